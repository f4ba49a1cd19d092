"""A host product on another origin that embeds the assistant as any product would (SPEC §11).

The demo of a cross-origin embed (tests/ui/test_embed.py drives it). Beside `vernis serve --demo`:

    VERNIS_ALLOWED_ORIGINS=http://127.0.0.1:8000,http://127.0.0.1:8001 vernis serve --demo
    python -m vernis_crm.web.embed --vernis http://127.0.0.1:8000 --port 8001

(from the same directory, so that both read the same database and the demo's signing secret), then
open http://127.0.0.1:8001. Its page, "Northwind", is what a product adds: one module script tag from
the Vernis server, one `<vernis-assistant server=... theme=...>`, and its own script
(`embed_assets/host.js`) that gives the element
- `getToken`: the host's own endpoint, `GET /vernis-token`, which signs a short-lived token for the
  host's signed-in user (here a demo member picked on the page; Vernis verifies it like any other);
- `pageContext` when the user opens a contact (a one-page app: no reload), and listens to
- `vernis:tool-completed` to refresh its contact list, `vernis:open` / `vernis:close`;
- its own tools (SPEC §18): `navigate` (the element's, through the host's router, to a contact's
  page) and `fill_contact_form`, a write the user approves, which opens the page's new-contact form
  prefilled.
Its Content-Security-Policy lets in the Vernis origin and nothing else.

Like the demo login, it signs a token for any demo member, for anyone who reaches it: loopback only.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import sqlalchemy as sa
import uvicorn
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from vernis.exceptions import ConfigError
from vernis.identity import issue_token
from vernis.settings import Settings, load_settings
from vernis.store.engine import create_engine
from vernis.store.models import Member, Organization, table_of
from vernis_crm.demo.seed import DEMO_ORGANIZATIONS
from vernis_crm.models import Contact
from vernis_crm.web._html import e
from vernis_crm.web.login import same_origin

__all__ = ["DEFAULT_MEMBER", "DEFAULT_TOKEN_TTL", "HostUser", "embed_host_app", "main"]

ASSETS = Path(__file__).resolve().parent / "embed_assets"
# The host's own session: which demo member is signed in to the host product (not a Vernis token).
SESSION_COOKIE = "northwind_member"
DEFAULT_MEMBER = "member@acme.test"
# Short-lived, as a host's tokens should be: the assistant asks for the next one before it expires.
DEFAULT_TOKEN_TTL = 600
CONTACTS_SHOWN = 12
THEMES = ("light", "dark", "auto")
MAX_FORM_BYTES = 1024
LOOPBACK = ("127.0.0.1", "::1", "localhost")

_member = table_of(Member)
_organization = table_of(Organization)
_contact = table_of(Contact)


def embed_host_app(vernis_url: str, settings: Settings, *, token_ttl: float = DEFAULT_TOKEN_TTL) -> Starlette:
    """The host app, embedding the assistant of the Vernis at `vernis_url` (an origin). `settings`
    are that Vernis's: its database (the demo members and contacts) and its HS256 secret, issuer,
    audience and org claim (the tokens this host signs). Raises `ConfigError` without a secret."""
    secret = settings.jwt_secret
    if not secret:
        raise ConfigError("the embed demo signs HS256 tokens: set VERNIS_JWT_SECRET (or run in demo mode)")
    vernis = urlsplit(vernis_url)
    if vernis.scheme not in ("http", "https") or not vernis.netloc or vernis.path not in ("", "/"):
        raise ConfigError(
            f"--vernis {vernis_url!r}: the Vernis server's origin, such as http://127.0.0.1:8000"
        )
    origin = f"{vernis.scheme}://{vernis.netloc}"
    socket_origin = f"{'wss' if vernis.scheme == 'https' else 'ws'}://{vernis.netloc}"
    # What a host's policy needs for the assistant: its scripts, styles, images, API and socket.
    policy = "; ".join(
        (
            "default-src 'none'",
            f"script-src 'self' {origin}",
            f"style-src 'self' {origin}",
            f"img-src 'self' data: {origin}",
            f"connect-src 'self' {origin} {socket_origin}",
            "form-action 'self'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        )
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, AsyncEngine]]:
        engine = create_engine(settings.database_url)
        try:
            yield {"engine": engine}
        finally:
            await engine.dispose()

    async def signed_in(request: Request) -> HostUser | None:
        """The host's signed-in user: a demo member (the cookie's, else the default one)."""
        email = request.cookies.get(SESSION_COOKIE) or DEFAULT_MEMBER
        return await _member_row(request.state.engine, email)

    async def home(request: Request) -> Response:
        member = await signed_in(request)
        members = await _members(request.state.engine)
        search = request.query_params.get("q", "").strip()[:100]
        contacts = await _contacts(request.state.engine, member, search) if member is not None else []
        theme = request.query_params.get("theme", "auto")
        html = _page(origin, member, members, contacts, search, theme if theme in THEMES else "auto")
        return HTMLResponse(html, headers={"Content-Security-Policy": policy, "Cache-Control": "no-store"})

    async def vernis_token(request: Request) -> Response:
        member = await signed_in(request)
        if member is None:
            return PlainTextResponse("Not signed in.", status_code=401, headers={"Cache-Control": "no-store"})
        token = issue_token(
            secret,
            sub=member.external_id,
            org=member.org_external_id,
            ttl=token_ttl,
            name=member.name,
            email=member.email,
            role=member.role,
            org_name=member.org_name,
            tz=member.timezone,
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            org_claim=settings.jwt_org_claim,
        )
        return PlainTextResponse(token, headers={"Cache-Control": "no-store"})

    async def contacts_json(request: Request) -> Response:
        member = await signed_in(request)
        if member is None:
            return JSONResponse({"contacts": []}, status_code=401)
        search = request.query_params.get("q", "").strip()[:100]
        # `?id=`: that one contact (the router opens any contact of the organization, listed or not).
        wanted = request.query_params.get("id")
        return JSONResponse({"contacts": await _contacts(request.state.engine, member, search, wanted)})

    async def switch_member(request: Request) -> Response:
        body = await request.body()
        if not same_origin(request) or len(body) > MAX_FORM_BYTES:
            return PlainTextResponse("Refused.", status_code=403)
        email = (parse_qs(body.decode("utf-8", errors="replace")).get("email") or [""])[0]
        response = RedirectResponse("/", status_code=303)
        if await _member_row(request.state.engine, email) is not None:
            response.set_cookie(SESSION_COOKIE, email, httponly=True, samesite="lax")
        return response

    return Starlette(
        routes=[
            Route("/", home),
            Route("/vernis-token", vernis_token),
            Route("/contacts.json", contacts_json),
            Route("/member", switch_member, methods=["POST"]),
            Mount("/host", app=StaticFiles(directory=ASSETS)),
        ],
        lifespan=lifespan,
    )


@dataclass(frozen=True, slots=True)
class HostUser:
    """A user of the host product (a demo member), as the host knows them: what its tokens say."""

    email: str
    external_id: str
    name: str
    role: str
    organization_id: uuid.UUID
    org_external_id: str
    org_name: str
    timezone: str


def _users_query() -> sa.Select[Any]:
    return (
        sa.select(
            _member.c.email,
            _member.c.external_id,
            _member.c.name,
            _member.c.role,
            _organization.c.id.label("organization_id"),
            _organization.c.external_id.label("org_external_id"),
            _organization.c.name.label("org_name"),
            _organization.c.timezone,
        )
        .join(_organization, _organization.c.id == _member.c.organization_id)
        .where(_member.c.removed_at.is_(None), _organization.c.external_id.in_(DEMO_ORGANIZATIONS))
        .order_by(_organization.c.name, _member.c.email)
    )


async def _member_row(engine: AsyncEngine, email: str) -> HostUser | None:
    query = _users_query().where(sa.func.lower(_member.c.email) == email.strip().lower())
    async with engine.connect() as connection:
        row = (await connection.execute(query)).first()
    return None if row is None else HostUser(**row._asdict())


async def _members(engine: AsyncEngine) -> list[HostUser]:
    async with engine.connect() as connection:
        return [HostUser(**row._asdict()) for row in await connection.execute(_users_query())]


async def _contacts(
    engine: AsyncEngine, member: HostUser, search: str, wanted: str | None = None
) -> list[dict[str, str]]:
    where = [_contact.c.organization_id == member.organization_id]
    if wanted is not None:
        try:
            where.append(_contact.c.id == uuid.UUID(wanted))
        except ValueError:
            return []
    if search:
        name = sa.func.lower(_contact.c.first_name + " " + _contact.c.last_name)
        where.append(name.like(f"%{search.lower()}%"))
    query = (
        sa.select(_contact.c.id, _contact.c.first_name, _contact.c.last_name, _contact.c.company)
        .where(*where)
        .order_by(_contact.c.last_name, _contact.c.first_name, _contact.c.id)
        .limit(CONTACTS_SHOWN)
    )
    async with engine.connect() as connection:
        rows = (await connection.execute(query)).all()
    return [
        {
            "id": str(row.id),
            "name": " ".join(part for part in (row.first_name, row.last_name) if part),
            "company": row.company or "",
        }
        for row in rows
    ]


def _page(
    vernis: str,
    member: HostUser | None,
    members: Sequence[HostUser],
    contacts: list[dict[str, str]],
    search: str,
    theme: str,
) -> str:
    current = member.email if member is not None else None
    options = "".join(
        f'<option value="{e(row.email)}"{" selected" if row.email == current else ""}>'
        f"{e(row.name)} · {e(row.role)} · {e(row.org_name)}</option>"
        for row in members
    )
    items = "".join(
        f'<li><button type="button" class="contact" data-id="{e(c["id"])}" data-name="{e(c["name"])}">'
        f'<span class="contact-name">{e(c["name"])}</span>'
        f'<span class="contact-company">{e(c["company"])}</span></button></li>'
        for c in contacts
    )
    org = e(member.org_name) if member is not None else "nobody signed in"
    assistant = (
        ""
        if member is None
        else f'<vernis-assistant server="{e(vernis)}" theme="{e(theme)}"></vernis-assistant>'
    )
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Northwind · a host product embedding Vernis</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/host/host.css">
<script type="module" src="{e(vernis)}/static/vernis/assistant.js"></script>
<script type="module" src="/host/host.js"></script>
</head>
<body>
<header class="bar">
  <strong class="brand">Northwind</strong>
  <span class="note">a host product on another origin · {org}</span>
  <form class="who" method="post" action="/member">
    <label for="member">Signed in as</label>
    <select id="member" name="email">{options}</select>
    <button type="submit">Switch</button>
  </form>
</header>
<main class="main">
  <section class="card" aria-labelledby="contacts-title" id="contacts">
    <h1 id="contacts-title">Contacts</h1>
    <form class="search" role="search" method="get" action="/">
      <input type="hidden" name="theme" value="{e(theme)}">
      <label for="q">Search by name</label>
      <input id="q" name="q" type="search" value="{e(search)}">
      <button type="submit">Search</button>
    </form>
    <ul class="contacts" id="contact-list">{items}</ul>
    <button type="button" id="new-contact-open">New contact</button>
  </section>
  <section class="card" aria-labelledby="new-contact-title" id="new-contact" hidden>
    <h1 id="new-contact-title">New contact</h1>
    <form class="contact-form" id="new-contact-form">
      <label for="nc-first-name">First name</label>
      <input id="nc-first-name" name="first_name" autocomplete="off">
      <label for="nc-last-name">Last name</label>
      <input id="nc-last-name" name="last_name" autocomplete="off">
      <label for="nc-email">Email</label>
      <input id="nc-email" name="email" type="email" autocomplete="off">
      <label for="nc-phone">Phone</label>
      <input id="nc-phone" name="phone" type="tel" autocomplete="off">
      <label for="nc-company">Company</label>
      <input id="nc-company" name="company" autocomplete="off">
      <p class="muted">Northwind would save it here; the demo only shows the form.</p>
      <button type="button" id="new-contact-cancel">Close</button>
    </form>
  </section>
  <section class="card" aria-labelledby="contact-title" id="contact" hidden>
    <button type="button" class="back" id="back">← All contacts</button>
    <h1 id="contact-title"></h1>
    <p class="muted" id="contact-company"></p>
    <p class="muted">Open the assistant: it knows which contact this page shows.</p>
  </section>
  <section class="card" aria-labelledby="activity-title">
    <h2 id="activity-title">From the assistant</h2>
    <p class="muted">Status: <span id="assistant-state">closed</span></p>
    <ol class="activity" id="activity" aria-live="polite"></ol>
  </section>
</main>
{assistant}
</body>
</html>
"""


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m vernis_crm.web.embed`: serve the host app beside a `vernis serve --demo`."""
    parser = argparse.ArgumentParser(
        prog="python -m vernis_crm.web.embed", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--vernis", default="http://127.0.0.1:8000", help="the Vernis server's origin")
    parser.add_argument("--host", default="127.0.0.1", help="loopback only: it signs tokens for anyone")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--ttl", type=int, default=DEFAULT_TOKEN_TTL, help="seconds each token lives")
    args = parser.parse_args(argv)
    if args.host not in LOOPBACK:
        parser.error(f"--host {args.host}: loopback only (it signs a token for any demo member)")
    # Demo mode: the same signing secret as the demo server started from this directory.
    app = embed_host_app(args.vernis, load_settings(demo=True), token_ttl=args.ttl)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()
