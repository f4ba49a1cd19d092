"""`GET /api/assistant/ws`: the handshake checks, then a `Connection` for the accepted socket.

Every refusal happens before accept and is an HTTP 403: a bad Origin (cross-site WebSocket
hijacking), no token or a bad one, a member who is gone or lacks `assistant:use`, too many sockets
for one member, a server that is shutting down.
"""

from __future__ import annotations

import logging

from starlette.websockets import WebSocket

from vernis.auth import PROTOCOL, TOKEN_PROTOCOL_PREFIX, decode_token, extract_token, origin_allowed
from vernis.exceptions import AuthError
from vernis.logs import member_context
from vernis.runtime import Services
from vernis.services.permissions import ASSISTANT_USE, permissions_for
from vernis.ws.connection import Connection

__all__ = ["assistant_socket"]

logger = logging.getLogger("vernis.ws")


async def _refuse(websocket: WebSocket, reason: str) -> None:
    logger.info("handshake refused: %s", reason, extra={"client": _client(websocket)})
    await websocket.close()


def _client(websocket: WebSocket) -> str | None:
    return f"{websocket.client.host}:{websocket.client.port}" if websocket.client else None


async def assistant_socket(websocket: WebSocket) -> None:
    services: Services = websocket.state.services
    settings = services.settings
    headers: dict[str, str] = {}
    for raw_name, raw_value in websocket.scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}; {value}" if name == "cookie" and name in headers else value
    subprotocols: list[str] = list(websocket.scope.get("subprotocols") or [])

    if services.draining:
        return await _refuse(websocket, "shutting down")
    secure = websocket.url.scheme == "wss" or headers.get("x-forwarded-proto") == "https"
    if not origin_allowed(
        headers.get("origin"), headers.get("host"), settings.allowed_origins, secure=secure
    ):
        return await _refuse(websocket, f"origin {headers.get('origin')!r} not allowed")
    token = extract_token(headers, subprotocols)
    if token is None:
        return await _refuse(websocket, "no token")
    assert settings.jwt_secret is not None
    try:
        claims = decode_token(token, settings.jwt_secret, algorithm=settings.jwt_algorithm)
    except AuthError as exc:
        return await _refuse(websocket, exc.public_message)
    member = await services.store.get_member(claims.member_id)
    if member is None or member.removed or member.organization_id != claims.organization_id:
        return await _refuse(websocket, "unknown or removed member")
    permissions = permissions_for(member.role, member.revoked_permissions)
    if ASSISTANT_USE not in permissions:
        return await _refuse(websocket, f"member {member.id} lacks {ASSISTANT_USE}")
    sockets = services.connections.setdefault(member.id, set())
    if len(sockets) >= settings.max_sockets_per_member:
        return await _refuse(websocket, f"member {member.id} has {len(sockets)} sockets open")

    # A browser that offered subprotocols fails the handshake unless one is selected.
    subprotocol = None
    if PROTOCOL in subprotocols:
        subprotocol = PROTOCOL
    elif any(p.startswith(TOKEN_PROTOCOL_PREFIX) for p in subprotocols):
        subprotocol = next(p for p in subprotocols if p.startswith(TOKEN_PROTOCOL_PREFIX))

    connection = Connection(websocket, services, member, claims, permissions)
    sockets.add(connection)
    try:
        with member_context(member.id):
            await websocket.accept(subprotocol)
            await connection.serve(
                websocket.query_params.get("conversation_id"), websocket.query_params.get("after_seq")
            )
    finally:
        sockets.discard(connection)
        if not sockets:
            services.connections.pop(member.id, None)
