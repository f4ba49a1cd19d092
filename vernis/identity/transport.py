"""Where a token may come from, and the Origin check of a browser's handshake (SPEC §2).

The token the host signed (see `vernis.identity.tokens`) is taken, in order, from the
`Authorization: Bearer` header, the `vernis_token` cookie, or an offered subprotocol
`vernis.token.<jwt>`; never from the URL, where it would end up in logs.
"""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

__all__ = ["COOKIE_NAME", "PROTOCOL", "TOKEN_PROTOCOL_PREFIX", "extract_token", "origin_allowed"]

COOKIE_NAME = "vernis_token"
PROTOCOL = "vernis.v1"
TOKEN_PROTOCOL_PREFIX = "vernis.token."


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
