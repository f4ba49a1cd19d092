import sys

from vernis.cli import main

sys.exit(main())
