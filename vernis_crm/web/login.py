"""The demo login (demo mode only): pick a demo member, get the `vernis_token` cookie the socket reads.

It plays the host product's part: the host signs a token for its own signed-in user (here, the
member clicked, with their host ids, name, e-mail and role), and Vernis verifies it like any other.
Anyone who reaches it can act as any demo member, which is why it exists only in demo mode.

The cookie is what a host product would set for its own signed-in users: HttpOnly (page scripts,
the assistant's included, never see the token), SameSite=Lax (a cross-site page cannot ride it),
and Secure when the page came over HTTPS.
"""

from __future__ import annotations

from urllib.parse import parse_qs, quote

import sqlalchemy as sa
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from vernis.exceptions import AuthError
from vernis.identity import COOKIE_NAME, DEFAULT_TTL, MemberInfo, issue_token
from vernis.runtime import Services
from vernis.store.models import Member, Organization, table_of
from vernis_crm.demo.seed import DEMO_ORGANIZATIONS
from vernis_crm.web._html import Markup, e, page

__all__ = ["current_member", "login", "login_page", "logout", "redirect_to_login", "same_origin"]

_member = table_of(Member)
_organization = table_of(Organization)
_ROLE_ORDER = {"owner": 0, "admin": 1, "member": 2, "viewer": 3}
MAX_FORM_BYTES = 4096


async def current_member(request: Request) -> MemberInfo | None:
    """The member whose valid token is in the cookie, or None."""
    token = request.cookies.get(COOKIE_NAME)
    if not token:
        return None
    services: Services = request.state.services
    try:
        identity = await services.identity.authenticate(token, require=None)
    except AuthError:
        return None
    return identity.member


def redirect_to_login(request: Request) -> RedirectResponse:
    target = request.url.path
    if request.url.query:
        target += f"?{request.url.query}"
    return RedirectResponse(f"/login?next={quote(target, safe='/')}", status_code=303)


def _safe_next(value: str | None) -> str:
    # Only a path on this site: never `//host` or `https://host` (an open redirect).
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/contacts"


async def login_page(request: Request, *, error: str | None = None, status_code: int = 200) -> Response:
    """GET /login: the demo members, one button each."""
    services: Services = request.state.services
    query = (
        sa.select(_member.c.email, _member.c.name, _member.c.role, _organization.c.name.label("org"))
        .join(_organization, _organization.c.id == _member.c.organization_id)
        .where(_member.c.removed_at.is_(None), _organization.c.external_id.in_(DEMO_ORGANIZATIONS))
    )
    async with services.engine.connect() as connection:
        rows = sorted(
            (await connection.execute(query)).all(),
            key=lambda row: (row.org, _ROLE_ORDER.get(row.role, 9), row.email),
        )
    next_path = _safe_next(request.query_params.get("next"))
    buttons = "".join(
        f"""<li><button class="member-choice" type="submit" name="email" value="{e(row.email)}">
  <span class="member-name">{e(row.name)}</span>
  <span class="member-meta">{e(row.email)} · {e(row.role)} · {e(row.org)}</span>
</button></li>"""
        for row in rows
    )
    if not rows:
        buttons = '<li class="empty">No members yet: run <code>vernis seed-demo</code> first.</li>'
    alert = f'<p class="form-error" role="alert">{e(error)}</p>' if error else ""
    content = Markup(f"""<section class="login-card" aria-labelledby="login-title">
  <h1 id="login-title">Sign in to the demo</h1>
  <p class="lede">Pick a demo member. Each one sees the assistant with the tools their role allows.</p>
  {alert}
  <form method="post" action="/login">
    <input type="hidden" name="next" value="{e(next_path)}">
    <ul class="member-list">{buttons}</ul>
  </form>
</section>""")
    return page("Sign in", content, assistant=False, status_code=status_code)


async def login(request: Request, secret: str) -> Response:
    """POST /login: set the cookie for the chosen member, then go where the visitor was heading."""
    if not same_origin(request):
        return Response("Cross-site form posts are refused.", status_code=403)
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return Response("Form too large.", status_code=413)
    form = parse_qs(body.decode("utf-8", errors="replace"))
    email = (form.get("email") or [""])[0]
    services: Services = request.state.services
    member = await _demo_member(services, email) if email else None
    if member is None:
        return await login_page(request, error="No such demo member.", status_code=400)
    token = issue_token(
        secret,
        sub=member.external_id,
        org=member.organization_external_id,
        name=member.name,
        email=member.email,
        role=member.role,
        org_name=member.organization_name,
        tz=member.organization_timezone,
        issuer=services.settings.jwt_issuer,
        audience=services.settings.jwt_audience,
        org_claim=services.settings.jwt_org_claim,
    )
    next_path = form.get("next")
    response = RedirectResponse(_safe_next(next_path[0] if next_path else None), status_code=303)
    response.set_cookie(
        COOKIE_NAME,
        token,
        max_age=DEFAULT_TTL,
        path="/",
        httponly=True,
        samesite="lax",
        secure=_secure(request),
    )
    return response


async def _demo_member(services: Services, email: str) -> MemberInfo | None:
    query = (
        sa.select(_member.c.id)
        .join(_organization, _organization.c.id == _member.c.organization_id)
        .where(
            sa.func.lower(_member.c.email) == email.strip().lower(),
            _member.c.removed_at.is_(None),
            _organization.c.external_id.in_(DEMO_ORGANIZATIONS),
        )
    )
    async with services.engine.connect() as connection:
        member_id = await connection.scalar(query)
    return None if member_id is None else await services.identity.member(member_id)


async def logout(request: Request) -> Response:
    """POST /logout: forget the cookie."""
    if not same_origin(request):
        return Response("Cross-site form posts are refused.", status_code=403)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="lax", secure=_secure(request))
    return response


def _secure(request: Request) -> bool:
    return request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"


def same_origin(request: Request) -> bool:
    """Whether a form post comes from this site: browsers send Origin on every POST, and one from
    another site is a forged form (login CSRF)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in {f"http://{host}", f"https://{host}"}
