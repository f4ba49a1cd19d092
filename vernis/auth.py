"""Who is on the socket: signed tokens, where they may come from, and the Origin check (SPEC §2).

A token is a JWT (HS256 by default) with `sub` (member id), `org` (organization id) and `exp`. It is
taken, in order, from the `Authorization: Bearer` header, the `vernis_token` cookie, or an offered
subprotocol `vernis.token.<jwt>`; never from the URL, where it would end up in logs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit
from uuid import UUID

import jwt

from vernis.exceptions import AuthError

__all__ = [
    "COOKIE_NAME",
    "PROTOCOL",
    "TOKEN_PROTOCOL_PREFIX",
    "Claims",
    "decode_token",
    "extract_token",
    "issue_token",
    "origin_allowed",
]

COOKIE_NAME = "vernis_token"
PROTOCOL = "vernis.v1"
TOKEN_PROTOCOL_PREFIX = "vernis.token."
DEFAULT_TTL = 12 * 3600


@dataclass(frozen=True, slots=True)
class Claims:
    member_id: UUID
    organization_id: UUID
    expires_at: float


def issue_token(
    member_id: UUID, organization_id: UUID, secret: str, *, ttl: float = DEFAULT_TTL, algorithm: str = "HS256"
) -> str:
    now = int(time.time())
    payload = {"sub": str(member_id), "org": str(organization_id), "iat": now, "exp": now + int(ttl)}
    return jwt.encode(payload, secret, algorithm=algorithm)


def decode_token(token: str, secret: str, *, algorithm: str = "HS256") -> Claims:
    try:
        payload = jwt.decode(
            token, secret, algorithms=[algorithm], options={"require": ["sub", "org", "exp"]}
        )
        return Claims(UUID(str(payload["sub"])), UUID(str(payload["org"])), float(payload["exp"]))
    except jwt.ExpiredSignatureError:
        raise AuthError("The token has expired.") from None
    except (jwt.InvalidTokenError, ValueError):
        raise AuthError("The token is not valid.") from None


def extract_token(headers: dict[str, str], subprotocols: list[str]) -> str | None:
    """The token offered with a handshake; `headers` has lower-case names."""
    authorization = headers.get("authorization", "")
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    cookie_header = headers.get("cookie")
    if cookie_header:
        cookies: SimpleCookie = SimpleCookie()
        try:
            cookies.load(cookie_header)
        except CookieError:
            pass
        else:
            if COOKIE_NAME in cookies and cookies[COOKIE_NAME].value:
                return cookies[COOKIE_NAME].value
    for protocol in subprotocols:
        if protocol.startswith(TOKEN_PROTOCOL_PREFIX) and len(protocol) > len(TOKEN_PROTOCOL_PREFIX):
            return protocol[len(TOKEN_PROTOCOL_PREFIX) :]
    return None


def origin_allowed(origin: str | None, host: str | None, allowed: list[str], *, secure: bool) -> bool:
    """Refuse cross-site WebSocket hijacking: a browser's Origin must be one we trust.

    Browsers always send Origin; a client without one (a script, a server) cannot ride a victim's
    cookies, so it is let through to the token check. With no allowlist configured, only the
    server's own origin (the Host it was reached at) is trusted.
    """
    if origin is None:
        return True
    origin = origin.rstrip("/").lower()
    if allowed:
        return origin in {entry.lower() for entry in allowed} or "*" in allowed
    if host is None or origin == "null":
        return False
    parts = urlsplit(origin)
    own_scheme = {"https", "wss"} if secure else {"http", "ws"}
    return parts.scheme in own_scheme and parts.netloc == host.lower()
