"""The operator's HTTP routes (SPEC §15): `/metrics` for Prometheus, and the admin API.

`GET /metrics` answers the Prometheus text format; with `VERNIS_METRICS_TOKEN` set it asks for
`Authorization: Bearer <token>` (401 otherwise).

The admin API is for the host's servers, never for browsers: every route asks for
`Authorization: Bearer $VERNIS_ADMIN_TOKEN` (401 otherwise) and does not exist (404) while that
setting is unset. A member is named by the host's ids, `org` and `sub`:

- `POST /api/admin/members/revoke` `{"org", "sub"}`: tokens of the member issued until now are
  refused from now on, and every socket of theirs closes with 4401 on every instance; a token issued
  later lets them in again. Answers `{"org", "sub", "revoked_at"}`.
- `GET /api/admin/members/conversations?org=&sub=`: the member's conversations and their messages
  as JSON.
- `DELETE /api/admin/members/conversations?org=&sub=`: deletes them (the audit of writes and the
  token usage stay). Answers `{"org", "sub", "conversations", "messages"}`.
- `GET /api/admin/feedback?since=&org=`: the rated answers since `since` (an ISO 8601 date or time,
  UTC unless it says otherwise; every rating when left out), of the organization `org` (every one
  when left out), as JSON lines (`vernis.conversation.feedback`), streamed.

An unknown member answers 404. Every call is logged (`admin call`: action, org, sub, status,
client), never with a token. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from vernis.conversation.feedback import feedback_records
from vernis.conversation.member_data import MemberData
from vernis.identity.members import MemberInfo
from vernis.metrics import CONTENT_TYPE
from vernis.runtime import Services

__all__ = ["bearer_matches", "ops_routes", "parse_since"]

logger = logging.getLogger("vernis.admin")

NO_STORE = {"Cache-Control": "no-store"}


def bearer_matches(request: Request, expected: str) -> bool:
    """Whether the request carries `Authorization: Bearer <expected>`, compared in constant time."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())


async def metrics(request: Request) -> Response:
    services: Services = request.state.services
    expected = services.settings.metrics_token
    if expected and not bearer_matches(request, expected):
        return JSONResponse(
            {
                "error": {
                    "code": "unauthenticated",
                    "message": "Send Authorization: Bearer $VERNIS_METRICS_TOKEN.",
                }
            },
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    return Response(services.metrics.render(), media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})


def _error(status: int, code: str, message: str) -> Response:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=NO_STORE)


AdminAction = Callable[[Request, Services, MemberInfo], Awaitable[Response]]


def _admin(action: str, handler: AdminAction) -> Callable[[Request], Awaitable[Response]]:
    """The admin API's checks around `handler`: the token, the member named, the log line."""

    async def endpoint(request: Request) -> Response:
        services: Services = request.state.services
        expected = services.settings.admin_token
        if not expected:
            return _error(404, "not_found", "Not Found")
        org: str | None = None
        sub: str | None = None
        if not bearer_matches(request, expected):
            response = _error(401, "unauthenticated", "Send Authorization: Bearer $VERNIS_ADMIN_TOKEN.")
        else:
            org, sub = await _member_named(request)
            try:
                response = await _act(request, services, handler, org, sub)
            except Exception:
                logger.exception("admin call failed", extra={"action": action, "org": org, "sub": sub})
                response = _error(500, "internal", "Something went wrong on the server.")
        logger.info(
            "admin call",
            extra={
                "action": action,
                "org": org,
                "sub": sub,
                "status": response.status_code,
                "client": request.client.host if request.client else None,
            },
        )
        return response

    return endpoint


async def _act(
    request: Request, services: Services, handler: AdminAction, org: str | None, sub: str | None
) -> Response:
    if org is None or sub is None:
        return _error(400, "invalid_request", "Name the member: `org` and `sub`, strings.")
    member = await services.identity.find(org, sub)
    if member is None:
        return _error(404, "not_found", "No such member.")
    return await handler(request, services, member)


async def _member_named(request: Request) -> tuple[str | None, str | None]:
    """`org` and `sub` from the JSON body (POST) or the query (GET, DELETE)."""
    fields: Any = request.query_params
    if request.method == "POST":
        try:
            fields = await request.json()
        except ValueError:
            return None, None
        if not isinstance(fields, dict):
            return None, None
    org, sub = fields.get("org"), fields.get("sub")
    valid = all(isinstance(value, str) and 0 < len(value) <= 255 for value in (org, sub))
    return (org, sub) if valid else (None, None)


async def _revoke(request: Request, services: Services, member: MemberInfo) -> Response:
    revoked = await services.identity.revoke_tokens(member.org, member.sub)
    assert revoked is not None
    assert revoked.tokens_revoked_at is not None
    await services.revocations.publish(revoked.id, revoked.tokens_revoked_at)
    revoked_at = datetime.fromtimestamp(revoked.tokens_revoked_at, UTC)
    return JSONResponse(
        {"org": member.org, "sub": member.sub, "revoked_at": revoked_at.isoformat().replace("+00:00", "Z")},
        headers=NO_STORE,
    )


async def _conversations(request: Request, services: Services, member: MemberInfo) -> Response:
    data = MemberData(services.engine)
    if request.method == "DELETE":
        ids, messages = await data.erase(member.id)
        for conversation_id in ids:
            services.windows.discard(conversation_id)
        # Their uploaded files too (SPEC §21), and the stored bytes no one else's upload shares.
        files = await services.attachments.erase_member(member.id) if services.attachments is not None else 0
        return JSONResponse(
            {
                "org": member.org,
                "sub": member.sub,
                "conversations": len(ids),
                "messages": messages,
                "attachments": files,
            },
            headers=NO_STORE,
        )
    return JSONResponse(
        {
            "org": member.org,
            "sub": member.sub,
            "name": member.name,
            "email": member.email,
            "exported_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "conversations": await data.export(member.id),
            # What each file is and which messages carry it; the files themselves are not exported.
            "attachments": await services.attachments.export(member.id)
            if services.attachments is not None
            else [],
        },
        headers=NO_STORE,
    )


def parse_since(text: str | None) -> datetime:
    """`since` as given to the feedback export: an ISO 8601 date or date and time, UTC unless it
    names its offset; the beginning of time when empty. Raises `ValueError` for anything else."""
    if not text:
        return datetime.min.replace(tzinfo=UTC)
    value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


async def feedback(request: Request) -> Response:
    """`GET /api/admin/feedback`: the admin token's checks, then the export as JSON lines."""
    services: Services = request.state.services
    expected = services.settings.admin_token
    if not expected:
        return _error(404, "not_found", "Not Found")
    org = request.query_params.get("org") or None
    if not bearer_matches(request, expected):
        response = _error(401, "unauthenticated", "Send Authorization: Bearer $VERNIS_ADMIN_TOKEN.")
    else:
        try:
            since = parse_since(request.query_params.get("since"))
        except ValueError:
            response = _error(400, "invalid_request", "`since` must be an ISO 8601 date or time.")
        else:
            response = StreamingResponse(
                _lines(feedback_records(services.engine, since=since, org=org)),
                media_type="application/x-ndjson",
                headers=NO_STORE,
            )
    logger.info(
        "admin call",
        extra={
            "action": "feedback",
            "org": org,
            "status": response.status_code,
            "client": request.client.host if request.client else None,
        },
    )
    return response


async def _lines(records: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for record in records:
        yield orjson.dumps(record) + b"\n"


def ops_routes() -> list[BaseRoute]:
    return [
        Route("/metrics", metrics),
        Route("/api/admin/feedback", feedback, methods=["GET"]),
        Route("/api/admin/members/revoke", _admin("revoke", _revoke), methods=["POST"]),
        Route(
            "/api/admin/members/conversations",
            _admin("conversations", _conversations),
            methods=["GET", "DELETE"],
        ),
    ]
