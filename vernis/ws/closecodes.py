"""WebSocket close codes Vernis uses after accepting a socket (SPEC §2)."""

from __future__ import annotations

import enum

__all__ = ["CloseCode"]


class CloseCode(enum.IntEnum):
    NORMAL = 1000
    GOING_AWAY = 1001
    POLICY_VIOLATION = 1008  # command flood
    MESSAGE_TOO_BIG = 1009  # sent by the server implementation for frames over the cap
    INTERNAL_ERROR = 1011  # also uvicorn's keepalive timeout
    SERVICE_RESTART = 1012  # graceful shutdown: clients reconnect
    TRY_AGAIN_LATER = 1013  # the client reads too slowly to keep up
    AUTH_EXPIRED = 4401  # token expired, member removed or lost access
    KEEPALIVE_TIMEOUT = 4408  # no pong to a keepalive ping (vernis.ws.keepalive)
