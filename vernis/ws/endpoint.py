"""`GET /api/assistant/ws`: the handshake checks, then a `Connection` for the accepted socket.

Every refusal happens before accept and is an HTTP 403: a bad Origin (cross-site WebSocket
hijacking), no token or a bad one, a member who is gone or lacks `assistant:use`, too many sockets
for one member, a server that is shutting down.
"""

from __future__ import annotations

import asyncio
import logging
from uuid import UUID

from starlette.websockets import WebSocket

from vernis.exceptions import AuthError, Unavailable
from vernis.identity.members import Identity
from vernis.identity.service import IdentityService
from vernis.identity.transport import PROTOCOL, extract_token, origin_allowed
from vernis.ids import random_hex
from vernis.limits.rate import SocketCap
from vernis.logs import member_context
from vernis.runtime import Services
from vernis.ws.connection import Connection

__all__ = ["Sockets", "assistant_socket"]

logger = logging.getLogger("vernis.ws")


def _headers(websocket: WebSocket) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in websocket.scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}; {value}" if name == "cookie" and name in headers else value
    return headers


async def _refuse(websocket: WebSocket, reason: str) -> None:
    logger.info("handshake refused: %s", reason, extra={"client": _client(websocket)})
    await websocket.close()


def _client(websocket: WebSocket) -> str | None:
    return f"{websocket.client.host}:{websocket.client.port}" if websocket.client else None


class Sockets:
    """The live sockets of this process, per member: the cap on sockets per member, and closing the
    sockets of members who were removed or lost access (`watch`)."""

    def __init__(self) -> None:
        self.by_member: dict[UUID, set[Connection]] = {}

    def count(self, member_id: UUID) -> int:
        return len(self.by_member.get(member_id, ()))

    async def watch(self, identity: IdentityService, interval: float, cap: SocketCap | None = None) -> None:
        """Every `interval` seconds, ask once for every member with a socket here whether they may
        still use the assistant, and close (4401) the sockets of those who may not; keep this
        instance's sockets counted in the shared socket `cap`."""
        while True:
            await asyncio.sleep(interval)
            if not self.by_member:
                continue
            if cap is not None:
                try:
                    await cap.refresh(
                        [(member_id, c.socket_id) for member_id, cs in self.by_member.items() for c in cs]
                    )
                except Exception:
                    logger.exception("refreshing the socket count failed; next time")
            try:
                revoked = await identity.revoked(list(self.by_member))
                tokens_revoked = await identity.token_revocations(list(self.by_member))
            except Exception:
                logger.exception("checking the members of open sockets failed; next time")
                continue
            for member_id in revoked:
                for connection in list(self.by_member.get(member_id, ())):
                    connection.revoked()
            for member_id, revoked_at in tokens_revoked.items():
                self.revoke(member_id, revoked_at)

    def revoke(self, member_id: UUID, revoked_at: float) -> None:
        """Close (4401) the member's sockets here whose token the revocation at `revoked_at` covers."""
        for connection in list(self.by_member.get(member_id, ())):
            if connection.identity.revoked_by(revoked_at):
                connection.revoked()


async def assistant_socket(websocket: WebSocket) -> None:
    services: Services = websocket.state.services
    registry: Sockets = websocket.state.sockets
    admitted = await _admit(websocket, services, registry)
    if admitted is None:
        return
    identity, subprotocol, socket_id = admitted
    member = identity.member
    sockets = registry.by_member.setdefault(member.id, set())
    connection = Connection(websocket, services, identity)
    connection.socket_id = socket_id
    sockets.add(connection)
    try:
        with member_context(member.id, member.org, member.sub):
            await websocket.accept(subprotocol)
            query = websocket.query_params
            # The handshake's headers were read by `_admit` and are not read again; the scope would
            # keep them as long as the socket is open.
            websocket.scope["headers"] = []
            await connection.serve(query.get("conversation_id"), query.get("after_seq"))
    finally:
        sockets.discard(connection)
        if not sockets:
            registry.by_member.pop(member.id, None)
        await services.socket_cap.release(member.id, socket_id)


async def _admit(
    websocket: WebSocket, services: Services, registry: Sockets
) -> tuple[Identity, str | None, str] | None:
    """Every check of the handshake: the member and the subprotocol to select, or None (refused).
    Apart from the socket's task, so that what it reads is not kept as long as the socket lives."""
    settings = services.settings
    headers = _headers(websocket)
    subprotocols: list[str] = list(websocket.scope.get("subprotocols") or [])
    if services.draining:
        await _refuse(websocket, "shutting down")
        return None
    secure = websocket.url.scheme == "wss" or headers.get("x-forwarded-proto") == "https"
    if not origin_allowed(
        headers.get("origin"), headers.get("host"), settings.allowed_origins, secure=secure
    ):
        await _refuse(websocket, f"origin {headers.get('origin')!r} not allowed")
        return None
    token = extract_token(headers, subprotocols)
    if token is None:
        await _refuse(websocket, "no token")
        return None
    try:
        identity = await services.identity.authenticate(token)
    except AuthError as exc:
        await _refuse(websocket, exc.public_message)
        return None
    member = identity.member
    socket_id = random_hex()
    try:
        admitted = await services.socket_cap.acquire(member.id, socket_id)
    except Unavailable:
        # The cap guards resources, not data: while Redis is away a socket is let in (uncounted),
        # and what needs Redis answers `unavailable` on its own.
        logger.warning("socket cap unavailable (Redis); admitting the socket uncounted")
        admitted = True
    if not admitted:
        await _refuse(websocket, f"member {member.id} has {settings.max_sockets_per_member} sockets open")
        return None
    # Never the `vernis.token.<jwt>` one: the selected subprotocol goes back in a response header,
    # which proxies and access logs keep. A browser that offered subprotocols fails the handshake
    # unless one is selected: the panel offers `vernis.v1` beside its token.
    return identity, PROTOCOL if PROTOCOL in subprotocols else None, socket_id
