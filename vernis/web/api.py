"""The HTTP API beside the socket, authenticated like it (a Bearer token or the `vernis_token` cookie).

- `GET /api/assistant/config` (SPEC §14): the assistant's name, whether answers are scripted, and
  the quick actions this member may use (each with the entity types it belongs to; empty: anywhere;
  `?entity_type=T`: only those for a page showing a T), the route patterns that name a page's
  entity (`pages`: [{route, entity_type}]), which the panel applies to its page's route, and
  whether the member reviews others' writes (`reviewer`, SPEC §23), and the routes the host page's
  `navigate` tool may open (`navigable`, SPEC §18).
  A page on an origin of `VERNIS_ALLOWED_ORIGINS` may read it cross-origin (SPEC §11), with its
  `Authorization` header (the preflight is answered); never with cookies (no
  `Access-Control-Allow-Credentials`), and no other origin gets CORS headers.
- `GET /api/organization/ai-rules` shows the organization's AI rules (SPEC §7) to any member; `PUT`
  replaces them and needs `organization:manage_ai_rules`. The system prompt reads them per message,
  so a change applies from the next message on.
- `GET /api/assistant/reviews` (SPEC §23): the review requests waiting for this member, a reviewer
  (they hold a reviewer permission of `[[reviews]]`), in their organization only, oldest first;
  403 for a member who reviews nothing.
- `GET /api/assistant/usage` (SPEC §15): the member's own tokens today and this month with their
  quotas; with `assistant:admin` also `days`, the organization's tokens per member and per UTC day
  this month (`?since=YYYY-MM-DD` for earlier days, up to a year back). Never another organization's.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from vernis.exceptions import AuthError
from vernis.identity import Identity, extract_token
from vernis.identity.members import ASSISTANT_ADMIN, MANAGE_AI_RULES
from vernis.identity.transport import origin_allowed
from vernis.runtime import Services
from vernis.session.reviews import expire_overdue

__all__ = [
    "MAX_AI_RULES_CHARS",
    "NO_STORE",
    "allowed_origin",
    "api_routes",
    "authenticated",
    "error_response",
]

MAX_AI_RULES_CHARS = 4000
NO_STORE = {"Cache-Control": "no-store"}
PREFLIGHT = {
    "Access-Control-Allow-Methods": "GET",
    "Access-Control-Allow-Headers": "Authorization",
    "Access-Control-Max-Age": "600",
}


def error_response(status: int, code: str, message: str, **fields: Any) -> Response:
    """The API's error answer: {"error": {code, message, ...fields}}, never cached."""
    return JSONResponse(
        {"error": {"code": code, "message": message, **fields}}, status_code=status, headers=NO_STORE
    )


_error = error_response


async def authenticated(request: Request) -> Identity | Response:
    """The caller's identity from their token (a Bearer header or the cookie), else the 401 answer."""
    services: Services = request.state.services
    headers = {name.lower(): value for name, value in request.headers.items()}
    token = extract_token(headers, [])
    if token is None:
        return _error(401, "unauthenticated", "Send a Bearer token or the vernis_token cookie.")
    try:
        return await services.identity.authenticate_recent(token)
    except AuthError as exc:
        return _error(401, "unauthenticated", exc.public_message)


def allowed_origin(request: Request) -> str | None:
    """The caller's origin when the socket would accept it (`VERNIS_ALLOWED_ORIGINS`, else the
    server's own), else None."""
    services: Services = request.state.services
    origin = request.headers.get("origin")
    secure = request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"
    host = request.headers.get("host")
    if origin is None or not origin_allowed(origin, host, services.settings.allowed_origins, secure=secure):
        return None
    return origin


async def assistant_config(request: Request) -> Response:
    origin = allowed_origin(request)
    cors = {"Vary": "Origin"} if origin is None else {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}
    if request.method == "OPTIONS":
        return Response(status_code=204, headers=cors if origin is None else cors | PREFLIGHT)
    response = await _assistant_config(request)
    response.headers.update(cors)
    return response


async def _assistant_config(request: Request) -> Response:
    services: Services = request.state.services
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    catalog = services.catalog
    # `?entity_type=contact`: the actions for a page showing one (the general ones and that type's);
    # without it, every action this member may use (the client shows a typed one only on its pages).
    entity_type = request.query_params.get("entity_type")
    allowed = (
        catalog.quick_actions_allowed(identity.permissions)
        if entity_type is None
        else catalog.quick_actions_for(identity.permissions, entity_type)
    )
    actions = [
        {"label": action.label, "prompt": action.prompt, "entity_types": list(action.entity_types)}
        for action in allowed
    ]
    # The route patterns, so a panel knows which entity a page shows from its route alone (as the
    # server does for the prompt): the host's first, then the toolkits'.
    pages = [{"route": page.route, "entity_type": page.entity_type} for page in catalog.pages]
    return JSONResponse(
        {
            "name": catalog.assistant_name,
            # The empty conversation's greeting and the image beside the name; null: the panel's own.
            "greeting": catalog.greeting,
            "avatar_url": catalog.avatar_url,
            "scripted": services.scripted,
            "quick_actions": actions,
            "pages": pages,
            # The routes the page's built-in `navigate` tool may open (SPEC §18): `[[pages]]`, the
            # toolkits' and `[embed] navigable`.
            "navigable": list(
                dict.fromkeys([*(page.route for page in catalog.pages), *services.embed.navigable])
            ),
            # Besides the server's own origin, where markdown images in answers may load from.
            "image_origins": services.embed.image_origins,
            # Whether this member reviews others' writes (SPEC §23): the panel shows its Reviews view.
            "reviewer": bool(catalog.reviewer_permissions(identity.permissions)),
        },
        headers=NO_STORE,
    )


async def ai_rules(request: Request) -> Response:
    services: Services = request.state.services
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    member = identity.member
    if request.method == "PUT":
        if MANAGE_AI_RULES not in identity.permissions:
            return _error(403, "forbidden", "Only the organization's owners and admins change its AI rules.")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "invalid_request", 'Send JSON: {"rules": "..."}.')
        rules = body.get("rules") if isinstance(body, dict) else None
        if not isinstance(rules, str):
            return _error(400, "invalid_request", "`rules` must be a string (empty to clear them).")
        if len(rules) > MAX_AI_RULES_CHARS:
            return _error(400, "invalid_request", f"AI rules are at most {MAX_AI_RULES_CHARS:,} characters.")
        await services.store.set_ai_rules(member.organization_id, rules.strip(), member.id)
    rules_text = await services.store.get_ai_rules(member.organization_id)
    return JSONResponse({"rules": rules_text}, headers=NO_STORE)


async def usage(request: Request) -> Response:
    services: Services = request.state.services
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    quotas = services.quotas
    assert quotas is not None, "the app sets the quotas"
    member = identity.member
    day, month = await quotas.status(member)
    own_month = await quotas.usage.member_tokens(member.id, month.start)
    body: dict[str, Any] = {
        "sub": member.sub,
        "org": member.org,
        "today": {
            "day": day.start.isoformat(),
            "tokens": day.used,
            "quota": day.limit,
            "reset_at": _iso(day.reset_at),
        },
        "month": {"start": month.start.isoformat(), "tokens": own_month},
        "organization": {
            "month": {
                "start": month.start.isoformat(),
                "tokens": month.used,
                "quota": month.limit,
                "reset_at": _iso(month.reset_at),
            }
        },
    }
    if ASSISTANT_ADMIN in identity.permissions:
        since = month.start
        asked = request.query_params.get("since")
        if asked is not None:
            try:
                since = date.fromisoformat(asked)
            except ValueError:
                return _error(400, "invalid_request", "`since` must be a day as YYYY-MM-DD.")
            if since < day.start - timedelta(days=366):
                return _error(400, "invalid_request", "`since` goes back a year at most.")
        rows = await quotas.usage.organization_days(member.organization_id, since)
        body["days"] = [
            {
                "day": row.day.isoformat(),
                "sub": row.sub,
                "name": row.name,
                "input_tokens": row.input_tokens,
                "output_tokens": row.output_tokens,
                "cached_tokens": row.cached_tokens,
                "tokens": row.tokens,
                "answers": row.answers,
            }
            for row in rows
        ]
    return JSONResponse(body, headers=NO_STORE)


async def reviews(request: Request) -> Response:
    services: Services = request.state.services
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    held = services.catalog.reviewer_permissions(identity.permissions)
    if not held or services.reviews is None:
        return _error(403, "forbidden", "Only reviewers see the review requests.")
    organization_id = identity.member.organization_id
    await expire_overdue(services, organization_id)
    pending = await services.reviews.pending(organization_id, held)
    return JSONResponse(
        {
            "reviews": [
                {
                    "review_id": str(review.id),
                    "tool_name": review.tool_name,
                    "arguments": review.arguments,
                    "preview": review.preview,
                    "requester_name": review.requester_name,
                    "created_at": _iso(review.created_at),
                    "expires_at": _iso(review.expires_at),
                }
                for review in pending
            ]
        },
        headers=NO_STORE,
    )


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def api_routes() -> list[BaseRoute]:
    return [
        Route("/api/assistant/config", assistant_config, methods=["GET", "OPTIONS"]),
        Route("/api/assistant/usage", usage),
        Route("/api/assistant/reviews", reviews),
        Route("/api/organization/ai-rules", ai_rules, methods=["GET", "PUT"]),
    ]
