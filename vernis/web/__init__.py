"""The web UI's server side: the assistant's assets and config, the demo host app and its login.

Routes (all responses carry the security headers of `vernis.web.security`):

- `/static/...`: the embeddable assistant (`/static/vernis/assistant.js`), its vendored libraries
  (`/static/vendor/`, copied there by `scripts/bootstrap` from `package-lock.json`), the demo's CSS.
- `GET /api/assistant/config`: what the client needs to know about this server (`{"scripted": true}`
  when answers come from the scripted model, so the UI can say so).
- `/login`, `/logout`: the demo login (sets the `vernis_token` cookie).
- `/`, `/contacts`, `/contacts/{id}`, `/calls`: the demo CRM, with the assistant panel on every page.
"""

from __future__ import annotations

from pathlib import Path

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from vernis.runtime import Services
from vernis.web.demo import calls, contact, contacts
from vernis.web.login import current_member, login, login_page, logout
from vernis.web.security import SecurityHeaders

__all__ = ["STATIC_DIR", "web_routes"]

STATIC_DIR = Path(__file__).resolve().parent.parent.parent / "static"


async def assistant_config(request: Request) -> Response:
    """GET /api/assistant/config: facts about this server the assistant UI shows."""
    services: Services = request.state.services
    return JSONResponse({"scripted": services.scripted}, headers={"Cache-Control": "no-store"})


async def home(request: Request) -> Response:
    """GET /: the demo app, or its login when nobody is signed in."""
    if await current_member(request) is None:
        return RedirectResponse("/login", status_code=303)
    return RedirectResponse("/contacts", status_code=303)


def web_routes() -> list[BaseRoute]:
    """Routes of the web UI, mounted by `create_app`."""
    secured = [Middleware(SecurityHeaders)]
    routes: list[BaseRoute] = [
        Route("/", home, middleware=secured),
        Route("/api/assistant/config", assistant_config, middleware=secured),
        Route("/login", login_page, methods=["GET"], middleware=secured),
        Route("/login", login, methods=["POST"], middleware=secured),
        Route("/logout", logout, methods=["POST"], middleware=secured),
        *(
            Route(path, endpoint, middleware=secured)
            for path, endpoint in (
                ("/contacts", contacts),
                ("/contacts/{contact_id}", contact),
                ("/calls", calls),
            )
        ),
    ]
    if STATIC_DIR.is_dir():
        # Ahead of the app's own plain mount of the same folder, so static files get the headers too.
        routes.append(Mount("/static", app=StaticFiles(directory=STATIC_DIR), middleware=secured))
    return routes
