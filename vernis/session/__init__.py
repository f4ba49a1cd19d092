"""One socket's session and the use-cases its commands run."""
