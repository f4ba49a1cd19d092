"""Vernis's own signing key and the tokens it signs for MCP servers: kept per data directory or
configured, published as public keys only, short-lived, and never taken by Vernis for a member's."""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.members import member
from vernis.exceptions import AuthError, ConfigError
from vernis.identity.signing import KEY_FILE, SERVER_TOKEN_TTL, SigningKeys
from vernis.identity.tokens import TokenVerifier

MEMBER = member(external_id="ann", name="Ann", email="ann@acme.test", role="agent")


def private_pem(key: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def public_pem(signing: SigningKeys) -> str:
    return (
        signing.load()
        .private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def verified(signing: SigningKeys, token: str, audience: str = "vernis-mcp:billing") -> dict[str, Any]:
    (key,) = jwt.PyJWKSet.from_dict(signing.jwks()).keys
    claims: dict[str, Any] = jwt.decode(token, key, algorithms=[key.algorithm_name], audience=audience)
    return claims


def test_the_key_is_made_once_per_data_directory_and_kept_private(tmp_path: Path) -> None:
    """Without VERNIS_SIGNING_KEY an Ed25519 key is made on first use, readable by its owner only, and the next start of the same data directory uses the same key."""
    first = SigningKeys(None, tmp_path)
    assert not (tmp_path / KEY_FILE).exists(), "nothing is made before it is needed"
    kid = first.load().kid
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
    assert SigningKeys(None, tmp_path).load().kid == kid
    assert SigningKeys(None, tmp_path / "other").load().kid != kid
    assert first.load().algorithm == "EdDSA"


async def test_processes_starting_together_agree_on_one_key(tmp_path: Path) -> None:
    """Several starts of one data directory at the same moment end with one key, whichever wrote it."""
    kids = await asyncio.gather(
        *(asyncio.to_thread(lambda: SigningKeys(None, tmp_path).load().kid) for _ in range(8))
    )
    assert len(set(kids)) == 1
    assert [path.name for path in (tmp_path / KEY_FILE).parent.iterdir()] == [KEY_FILE.name]


@pytest.mark.parametrize("curve", ["ed25519", "p256"])
def test_a_configured_key_is_used_with_a_stable_key_id(tmp_path: Path, curve: str) -> None:
    """VERNIS_SIGNING_KEY (PEM text with literal \\n, or a file's path) is the key, Ed25519 or P-256; two instances given it publish the same kid; no file is made."""
    key = (
        ed25519.Ed25519PrivateKey.generate()
        if curve == "ed25519"
        else ec.generate_private_key(ec.SECP256R1())
    )
    text = private_pem(key)
    path = tmp_path / "key.pem"
    path.write_text(text)
    one = SigningKeys(text.replace("\n", "\\n"), tmp_path / "a")
    two = SigningKeys(str(path), tmp_path / "b")
    assert one.configured
    assert one.jwks() == two.jwks()
    assert one.load().algorithm == ("EdDSA" if curve == "ed25519" else "ES256")
    assert not (tmp_path / "a" / KEY_FILE).exists()


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----", id="garbage"),
        pytest.param(private_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)), id="rsa"),
        pytest.param(private_pem(ec.generate_private_key(ec.SECP384R1())), id="p384"),
        pytest.param("/no/such/key.pem", id="missing file"),
    ],
)
def test_an_unusable_configured_key_stops_the_start(tmp_path: Path, value: str) -> None:
    """A configured key that is not an unencrypted Ed25519 or P-256 private key raises ConfigError naming VERNIS_SIGNING_KEY."""
    with pytest.raises(ConfigError, match="VERNIS_SIGNING_KEY"):
        SigningKeys(value, tmp_path)


def test_the_key_set_holds_the_public_key_only(tmp_path: Path) -> None:
    """The published JWKS has one signing key with its kid and algorithm, and no private part."""
    (jwk,) = SigningKeys(None, tmp_path).jwks()["keys"]
    assert set(jwk) == {"kty", "crv", "x", "kid", "alg", "use"}
    assert (jwk["kty"], jwk["crv"], jwk["alg"], jwk["use"]) == ("OKP", "Ed25519", "EdDSA", "sig")


def test_a_server_token_names_the_member_for_that_server_for_five_minutes_at_most(tmp_path: Path) -> None:
    """The token carries the member's sub, org, name, email, role and permissions, the server's audience, and expires within five minutes, never after the member's own token."""
    signing = SigningKeys(None, tmp_path)
    begun = time.time()
    token = signing.server_token(MEMBER, {"mcp:billing", "assistant:use"}, server="billing")
    claims = verified(signing, token)
    assert {k: claims[k] for k in ("sub", "org", "name", "email", "role", "org_name", "aud")} == {
        "sub": "ann",
        "org": "acme",
        "name": "Ann",
        "email": "ann@acme.test",
        "role": "agent",
        "org_name": "Acme",
        "aud": "vernis-mcp:billing",
    }
    assert claims["permissions"] == ["assistant:use", "mcp:billing"]
    assert begun - 1 <= claims["iat"] <= claims["exp"] <= begun + SERVER_TOKEN_TTL + 1
    soon = signing.server_token(MEMBER, (), server="billing", not_after=begun + 60)
    assert verified(signing, soon)["exp"] <= begun + 60
    with pytest.raises(jwt.InvalidAudienceError):
        verified(signing, token, audience="vernis-mcp:other")


async def test_vernis_never_takes_a_server_token_for_a_members(tmp_path: Path) -> None:
    """A token Vernis signed for an MCP server is refused by the host-token verifier, even one misconfigured with Vernis's own public key."""
    signing = SigningKeys(None, tmp_path)
    token = signing.server_token(MEMBER, {"assistant:use"}, server="billing")
    for verifier in (
        TokenVerifier(public_key=public_pem(signing)),
        TokenVerifier(secret="a-test-secret-that-is-at-least-32-bytes-long"),
    ):
        with pytest.raises(AuthError):
            await verifier.verify(token)
        await verifier.aclose()
