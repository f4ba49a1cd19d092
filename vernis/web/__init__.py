"""The web UI's server side: the pages Vernis serves (demo host app, login) and their assets."""

from __future__ import annotations

from starlette.routing import BaseRoute

__all__ = ["web_routes"]


def web_routes() -> list[BaseRoute]:
    """Routes of the web UI, mounted by `create_app`."""
    return []
