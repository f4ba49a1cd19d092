"""The HTTP API beside the socket: an organization's AI rules (SPEC §7).

`GET /api/organization/ai-rules` shows the rules to any member; `PUT` replaces them and needs
`organization:manage_ai_rules` (owners and admins). The system prompt reads them per message, so a
change applies from the next message on. Authentication is the socket's: a Bearer token or the
`vernis_token` cookie.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from vernis.auth import decode_token, extract_token
from vernis.exceptions import AuthError
from vernis.runtime import Services
from vernis.services.permissions import permissions_for
from vernis.services.persistence import MemberInfo

__all__ = ["MAX_AI_RULES_CHARS", "api_routes"]

MAX_AI_RULES_CHARS = 4000


def _error(status: int, code: str, message: str) -> Response:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


async def _member(request: Request) -> tuple[MemberInfo, frozenset[str]] | Response:
    services: Services = request.state.services
    headers = {name.lower(): value for name, value in request.headers.items()}
    token = extract_token(headers, [])
    if token is None:
        return _error(401, "unauthenticated", "Send a Bearer token or the vernis_token cookie.")
    assert services.settings.jwt_secret is not None
    try:
        claims = decode_token(token, services.settings.jwt_secret, algorithm=services.settings.jwt_algorithm)
    except AuthError as exc:
        return _error(401, "unauthenticated", exc.public_message)
    member = await services.store.get_member(claims.member_id)
    if member is None or member.removed or member.organization_id != claims.organization_id:
        return _error(401, "unauthenticated", "Unknown or removed member.")
    return member, permissions_for(member.role, member.revoked_permissions)


async def ai_rules(request: Request) -> Response:
    services: Services = request.state.services
    found = await _member(request)
    if isinstance(found, Response):
        return found
    member, permissions = found
    if request.method == "PUT":
        if "organization:manage_ai_rules" not in permissions:
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
    return JSONResponse({"organization_id": str(member.organization_id), "rules": rules_text})


def api_routes() -> list[BaseRoute]:
    return [Route("/api/organization/ai-rules", ai_rules, methods=["GET", "PUT"])]
