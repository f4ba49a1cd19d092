"""`python -m vernis`: the `vernis` command."""

import sys

from vernis.cli import main

sys.exit(main())
