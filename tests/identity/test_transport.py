"""Where a token is taken from, and the Origin check."""

from __future__ import annotations

from vernis.identity.transport import extract_token, origin_allowed


def test_token_sources_in_order() -> None:
    """Bearer header wins over the cookie, which wins over the subprotocol; none means no token."""
    assert extract_token({"authorization": "Bearer h", "cookie": "vernis_token=c"}, ["vernis.token.p"]) == "h"
    assert extract_token({"cookie": "a=1; vernis_token=c"}, ["vernis.token.p"]) == "c"
    assert extract_token({}, ["vernis.v1", "vernis.token.p"]) == "p"
    assert extract_token({"authorization": "Basic x"}, ["vernis.v1"]) is None


def test_origin_rules() -> None:
    """No allowlist: only the server's own origin; with one: exactly the listed origins; no Origin passes."""
    assert origin_allowed("http://127.0.0.1:8000", "127.0.0.1:8000", [], secure=False)
    assert not origin_allowed("http://evil.test", "127.0.0.1:8000", [], secure=False)
    assert not origin_allowed("https://127.0.0.1:8000", "127.0.0.1:8000", [], secure=False)
    assert origin_allowed("https://app.test", "vernis.test", ["https://app.test"], secure=True)
    assert not origin_allowed("https://vernis.test", "vernis.test", ["https://app.test"], secure=True)
    assert origin_allowed(None, "vernis.test", ["https://app.test"], secure=True)
