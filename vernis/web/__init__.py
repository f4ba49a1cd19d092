"""Every HTTP route: the API, the operator's routes, the web UI's assets and their security headers."""
