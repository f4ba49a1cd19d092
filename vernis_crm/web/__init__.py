"""The demo host app (demo mode only): a small CRM with the assistant on every page, and the demo login.

- `/login`, `/logout`: pick a demo member; the login signs the token a host product would sign for
  its signed-in user (the `vernis_token` cookie).
- `/`, `/contacts`, `/contacts/{id}`, `/calls`: the demo CRM, with the assistant panel on every page.
- `/static/demo/...`: its stylesheet and icon.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from vernis_crm.web.login import current_member, login, login_page, logout
from vernis_crm.web.pages import calls, contact, contacts

__all__ = ["demo_routes"]

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"


async def home(request: Request) -> Response:
    """GET /: the demo app, or its login when nobody is signed in."""
    if await current_member(request) is None:
        return RedirectResponse("/login", status_code=303)
    return RedirectResponse("/contacts", status_code=303)


def demo_routes(secret: str) -> list[BaseRoute]:
    """The demo's routes; `secret` signs the demo login's tokens."""

    async def sign_in(request: Request) -> Response:
        return await login(request, secret)

    return [
        Mount("/static/demo", app=StaticFiles(directory=STATIC_DIR)),
        Route("/", home),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", sign_in, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/contacts", contacts),
        Route("/contacts/{contact_id}", contact),
        Route("/calls", calls),
    ]
