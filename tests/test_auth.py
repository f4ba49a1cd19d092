"""Tokens, where they are taken from, and the Origin check."""

from __future__ import annotations

import time
import uuid

import pytest

from vernis.auth import decode_token, extract_token, issue_token, origin_allowed
from vernis.exceptions import AuthError

SECRET = "s" * 32


def test_token_round_trip() -> None:
    """A token issued for a member decodes to the same member, organization and expiry."""
    member, org = uuid.uuid4(), uuid.uuid4()
    claims = decode_token(issue_token(member, org, SECRET, ttl=60), SECRET)
    assert (claims.member_id, claims.organization_id) == (member, org)
    assert claims.expires_at == pytest.approx(time.time() + 60, abs=2)


@pytest.mark.parametrize(
    "token",
    [
        issue_token(uuid.uuid4(), uuid.uuid4(), SECRET, ttl=-5),
        issue_token(uuid.uuid4(), uuid.uuid4(), "another-secret-of-enough-length!"),
        "not.a.jwt",
    ],
)
def test_bad_tokens_are_refused(token: str) -> None:
    """Expired, foreign-signed and malformed tokens raise AuthError."""
    with pytest.raises(AuthError):
        decode_token(token, SECRET)


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
