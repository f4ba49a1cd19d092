"""The web UI's server side in the core: the embeddable assistant's assets, with security headers.

`/static/...` serves the assistant (`/static/vernis/assistant.js`) and its vendored libraries
(`/static/vendor/`, copied there by `scripts/bootstrap` from `package-lock.json`). Host pages are the
host's: the demo's are the CRM toolkit's, mounted in demo mode only. Host pages on other origins
load the assistant's files too (`PUBLIC_ASSET_HEADERS`).
"""

from __future__ import annotations

from pathlib import Path

from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from vernis.web.security import PUBLIC_ASSET_HEADERS, SECURITY_HEADERS, SecurityHeaders

__all__ = ["STATIC_DIR", "web_routes"]

STATIC_DIR = Path(__file__).resolve().parent.parent.parent / "static"


def web_routes() -> list[BaseRoute]:
    """The static assets, mounted by `create_app`."""
    if not STATIC_DIR.is_dir():
        return []
    headers = SECURITY_HEADERS | PUBLIC_ASSET_HEADERS
    assets = StaticFiles(directory=STATIC_DIR)
    return [Mount("/static", app=assets, middleware=[Middleware(SecurityHeaders, headers=headers)])]
