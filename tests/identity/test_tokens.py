"""Host tokens: keys bound to algorithms, JWKS fetched from a real loopback server, claims checked."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, HMACAlgorithm, OKPAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.utils import free_port, run_server
from vernis.exceptions import AuthError
from vernis.identity import tokens as tokens_module
from vernis.identity.tokens import LEEWAY_SECONDS, MAX_ID_CHARS, ConfigError, TokenVerifier, issue_token

SECRET = "a-test-secret-that-is-at-least-32-bytes-long"
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
MakeVerifier = Callable[..., TokenVerifier]


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def other_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="module")
def ed_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def pem(key: PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def jwk(key: PrivateKey, kid: str, **extra: Any) -> dict[str, Any]:
    public = key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        data = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        data = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        data = OKPAlgorithm.to_jwk(public, as_dict=True)
    return {**data, "kid": kid, **extra}


def sign(
    key: PrivateKey | str, alg: str, *, kid: str | None = None, drop: tuple[str, ...] = (), **claims: Any
) -> str:
    """A token with sub, org and a 10-minute exp unless `claims` override them or `drop` removes them."""
    payload = {"sub": "user-1", "org": "acme", "exp": int(time.time()) + 600, **claims}
    for claim in drop:
        del payload[claim]
    return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid} if kid else None)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_made(header: dict[str, Any], payload: dict[str, Any], hmac_key: bytes | None) -> str:
    """A token PyJWT would refuse to encode: `alg: none`, or HMAC keyed with a PEM public key."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    signature = (
        b"" if hmac_key is None else hmac.new(hmac_key, signing_input.encode(), hashlib.sha256).digest()
    )
    return f"{signing_input}.{b64(signature)}"


class JwksHost:
    """A host product's key-set endpoint: the test swaps `keys` (rotation) and reads `requests`."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.requests = 0
        self.status = 200
        self.body: bytes | None = None
        self.url = ""

    async def endpoint(self, request: Request) -> Response:
        self.requests += 1
        if self.body is not None:
            return Response(self.body, status_code=self.status, media_type="application/json")
        return JSONResponse({"keys": self.keys}, status_code=self.status)


@pytest.fixture
async def jwks_host() -> AsyncIterator[JwksHost]:
    host = JwksHost()
    app = Starlette(routes=[Route("/.well-known/jwks.json", host.endpoint)])
    async with run_server(app) as server:
        host.url = f"http://127.0.0.1:{server.config.port}/.well-known/jwks.json"
        yield host


@pytest.fixture
async def make_verifier() -> AsyncIterator[MakeVerifier]:
    made: list[TokenVerifier] = []

    def make(**settings: Any) -> TokenVerifier:
        made.append(TokenVerifier(**settings))
        return made[-1]

    yield make
    for verifier in made:
        await verifier.aclose()


async def refused(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(AuthError) as caught:
        await verifier.verify(token)
    return caught.value.public_message


# --- HS256 and issue_token -------------------------------------------------------------------------


async def test_hs256_round_trip_returns_every_claim(make_verifier: MakeVerifier) -> None:
    """issue_token's claims all come back from verify, and raw holds every claim read-only."""
    token = issue_token(
        SECRET,
        sub="u-42",
        org="o-7",
        ttl=120,
        role="admin",
        name="Ada",
        email="ada@acme.test",
        permissions=["assistant:use", "crm:read"],
        org_name="Acme",
        tz="Europe/Paris",
    )
    claims = await make_verifier(secret=SECRET).verify(token)
    assert (claims.sub, claims.org, claims.role, claims.name) == ("u-42", "o-7", "admin", "Ada")
    assert (claims.email, claims.org_name, claims.tz) == ("ada@acme.test", "Acme", "Europe/Paris")
    assert claims.permissions == ("assistant:use", "crm:read")
    assert claims.expires_at == pytest.approx(time.time() + 120, abs=2)
    assert claims.issued_at == pytest.approx(time.time(), abs=2)
    assert claims.raw["permissions"] == ["assistant:use", "crm:read"]
    assert claims.raw["org"] == "o-7"
    with pytest.raises(TypeError):
        claims.raw["sub"] = "someone-else"  # type: ignore[index]


async def test_absent_optional_claims_are_none(make_verifier: MakeVerifier) -> None:
    """Without optional claims, permissions is None (the role decides) and so are name, email and role."""
    claims = await make_verifier(secret=SECRET).verify(issue_token(SECRET, sub="u", org="o"))
    assert claims.permissions is None
    assert (claims.name, claims.email, claims.role, claims.org_name, claims.tz) == (None,) * 5
    assert "name" not in claims.raw


async def test_empty_permissions_list_is_kept(make_verifier: MakeVerifier) -> None:
    """An empty permissions claim means no permission at all, not "ask the role table"."""
    claims = await make_verifier(secret=SECRET).verify(issue_token(SECRET, sub="u", org="o", permissions=[]))
    assert claims.permissions == ()


async def test_bad_optional_claims_are_ignored(make_verifier: MakeVerifier) -> None:
    """An unknown time zone and non-string name/email/role are dropped, not a refusal."""
    token = sign(SECRET, "HS256", tz="Mars/Olympus_Mons", name=7, email=["x"], role={"r": 1})
    claims = await make_verifier(secret=SECRET).verify(token)
    assert (claims.tz, claims.name, claims.email, claims.role) == (None, None, None, None)
    assert (
        await make_verifier(secret=SECRET).verify(sign(SECRET, "HS256", tz="../../etc/passwd"))
    ).tz is None


async def test_integer_sub_and_org_become_strings(make_verifier: MakeVerifier) -> None:
    """Hosts with numeric ids may put integers in sub and org; they are read as their decimal text."""
    claims = await make_verifier(secret=SECRET).verify(sign(SECRET, "HS256", sub=1234, org=99))
    assert (claims.sub, claims.org) == ("1234", "99")


async def test_token_signed_with_another_secret_is_refused(make_verifier: MakeVerifier) -> None:
    """An HS256 token signed with a different secret is not valid."""
    token = issue_token("another-secret-that-is-also-32-bytes-long", sub="u", org="o")
    assert await refused(make_verifier(secret=SECRET), token) == "The token is not valid."


@pytest.mark.parametrize("token", ["", "garbage", "a.b.c", "x" * 20_000, "eyJhbGciOiJIUzI1NiJ9.e30."])
async def test_malformed_tokens_are_refused(make_verifier: MakeVerifier, token: str) -> None:
    """Empty, malformed, oversized and unsigned strings are not valid tokens."""
    assert await refused(make_verifier(secret=SECRET), token) == "The token is not valid."


def test_issue_token_refuses_a_short_secret() -> None:
    """issue_token will not sign with a secret the verifier would refuse."""
    with pytest.raises(ConfigError, match="VERNIS_JWT_SECRET"):
        issue_token("short", sub="u", org="o")


async def test_can_issue_only_with_a_secret(make_verifier: MakeVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    """can_issue is true exactly when a secret is configured."""
    assert make_verifier(secret=SECRET).can_issue
    assert not make_verifier(public_key=pem(rsa_key)).can_issue


# --- PEM public keys -------------------------------------------------------------------------------


@pytest.mark.parametrize(("fixture", "alg"), [("rsa_key", "RS256"), ("ec_key", "ES256"), ("ed_key", "EdDSA")])
async def test_pem_public_key_verifies_its_algorithm(
    make_verifier: MakeVerifier, request: pytest.FixtureRequest, fixture: str, alg: str
) -> None:
    """An RSA, EC P-256 or Ed25519 PEM public key verifies RS256, ES256 or EdDSA tokens respectively."""
    key: PrivateKey = request.getfixturevalue(fixture)
    claims = await make_verifier(public_key=pem(key)).verify(sign(key, alg))
    assert (claims.sub, claims.org) == ("user-1", "acme")


async def test_pem_public_key_from_a_file(
    make_verifier: MakeVerifier, ec_key: ec.EllipticCurvePrivateKey, tmp_path: Path
) -> None:
    """A public_key that does not start with -----BEGIN is the path of a PEM file."""
    path = tmp_path / "host.pem"
    path.write_text(pem(ec_key))
    assert (await make_verifier(public_key=str(path)).verify(sign(ec_key, "ES256"))).sub == "user-1"


async def test_pem_with_escaped_newlines(
    make_verifier: MakeVerifier, ed_key: ed25519.Ed25519PrivateKey
) -> None:
    """PEM text from an environment variable with literal \\n sequences is accepted."""
    verifier = make_verifier(public_key=pem(ed_key).replace("\n", "\\n"))
    assert (await verifier.verify(sign(ed_key, "EdDSA"))).sub == "user-1"


async def test_token_signed_by_another_rsa_key_is_refused(
    make_verifier: MakeVerifier, rsa_key: rsa.RSAPrivateKey, other_rsa_key: rsa.RSAPrivateKey
) -> None:
    """An RS256 token signed by a key other than the configured one is not valid."""
    verifier = make_verifier(public_key=pem(rsa_key))
    assert await refused(verifier, sign(other_rsa_key, "RS256")) == "The token is not valid."


async def test_algorithm_of_another_key_type_is_refused(
    make_verifier: MakeVerifier, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    """With only an RSA key configured, ES256 and RS512 tokens are refused even if otherwise well formed."""
    verifier = make_verifier(public_key=pem(rsa_key))
    assert await refused(verifier, sign(ec_key, "ES256")) == "The token is not valid."
    assert await refused(verifier, sign(rsa_key, "RS512")) == "The token is not valid."


async def test_alg_none_is_refused(make_verifier: MakeVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    """An unsigned token (alg none) is refused whichever keys are configured."""
    payload = {"sub": "u", "org": "o", "exp": int(time.time()) + 600}
    for alg in ("none", "None", "NONE"):
        token = hand_made({"alg": alg, "typ": "JWT"}, payload, None)
        assert await refused(make_verifier(secret=SECRET), token) == "The token is not valid."
        assert await refused(make_verifier(public_key=pem(rsa_key)), token) == "The token is not valid."


async def test_hs256_signed_with_the_public_key_pem_is_refused(
    make_verifier: MakeVerifier, rsa_key: rsa.RSAPrivateKey
) -> None:
    """Algorithm confusion: HS256 keyed with the configured public key's PEM never verifies."""
    public_pem = pem(rsa_key)
    token = hand_made(
        {"alg": "HS256", "typ": "JWT"},
        {"sub": "u", "org": "o", "exp": int(time.time()) + 600},
        public_pem.encode(),
    )
    # Sanity: the forgery is a correct HMAC over the PEM, so only the allow-list stops it.
    assert jwt.decode(token, options={"verify_signature": False})["sub"] == "u"
    assert HMACAlgorithm(HMACAlgorithm.SHA256).verify(
        token.rsplit(".", 1)[0].encode(),
        public_pem.encode(),
        base64.urlsafe_b64decode(token.rsplit(".", 1)[1] + "=="),
    )
    assert await refused(make_verifier(public_key=public_pem), token) == "The token is not valid."
    both = make_verifier(secret=SECRET, public_key=public_pem)
    assert await refused(both, token) == "The token is not valid."


async def test_secret_and_public_key_together_pick_the_key_by_alg(
    make_verifier: MakeVerifier, rsa_key: rsa.RSAPrivateKey
) -> None:
    """With both a secret and a public key, HS256 tokens use the secret and RS256 tokens the public key."""
    verifier = make_verifier(secret=SECRET, public_key=pem(rsa_key))
    assert (await verifier.verify(sign(SECRET, "HS256", sub="h"))).sub == "h"
    assert (await verifier.verify(sign(rsa_key, "RS256", sub="r"))).sub == "r"


# --- Time, issuer, audience ------------------------------------------------------------------------


async def test_expiry_with_leeway(make_verifier: MakeVerifier) -> None:
    """A token expired beyond the 30 s leeway is refused; one expired within it is accepted."""
    verifier = make_verifier(secret=SECRET)
    now = int(time.time())
    assert (
        await refused(verifier, sign(SECRET, "HS256", exp=now - LEEWAY_SECONDS - 5))
        == "The token has expired."
    )
    assert (await verifier.verify(sign(SECRET, "HS256", exp=now - LEEWAY_SECONDS + 10))).sub == "user-1"


async def test_not_before_with_leeway(make_verifier: MakeVerifier) -> None:
    """A token whose nbf is beyond the leeway in the future is refused; within the leeway it passes."""
    verifier = make_verifier(secret=SECRET)
    now = int(time.time())
    assert await refused(verifier, sign(SECRET, "HS256", nbf=now + 120)) == "The token is not valid yet."
    assert (await verifier.verify(sign(SECRET, "HS256", nbf=now + 10))).sub == "user-1"


@pytest.mark.parametrize("kind", ["numeric-string", "beyond-any-timestamp"])
async def test_exp_must_be_a_number(make_verifier: MakeVerifier, kind: str) -> None:
    """An exp given as a numeric string or as an integer beyond any timestamp is not a valid expiry."""
    # Made when the test runs, not when it is collected: a long suite would otherwise reach
    # this test after the string's time had passed, and the token would be refused as expired.
    exp: object = str(int(time.time()) + 600) if kind == "numeric-string" else 10**400
    assert (
        await refused(make_verifier(secret=SECRET), sign(SECRET, "HS256", exp=exp))
        == "The token is not valid."
    )


async def test_issuer_enforced_when_configured(make_verifier: MakeVerifier) -> None:
    """With an issuer configured, a token from another issuer or with none is refused; the right one passes."""
    verifier = make_verifier(secret=SECRET, issuer="https://host.test")
    assert (
        await refused(verifier, sign(SECRET, "HS256", iss="https://evil.test"))
        == "The token was issued by someone else."
    )
    assert await refused(verifier, sign(SECRET, "HS256")) == "The token lacks the iss claim."
    assert (await verifier.verify(sign(SECRET, "HS256", iss="https://host.test"))).sub == "user-1"


async def test_issuer_ignored_when_not_configured(make_verifier: MakeVerifier) -> None:
    """Without a configured issuer, any iss claim is accepted."""
    assert (await make_verifier(secret=SECRET).verify(sign(SECRET, "HS256", iss="whoever"))).sub == "user-1"


async def test_audience_enforced_when_configured(make_verifier: MakeVerifier) -> None:
    """With an audience configured, a token for another audience is refused; a matching one (or list) passes."""
    verifier = make_verifier(secret=SECRET, audience="vernis")
    assert (
        await refused(verifier, sign(SECRET, "HS256", aud="billing"))
        == "The token is meant for another audience."
    )
    assert await refused(verifier, sign(SECRET, "HS256")) == "The token lacks the aud claim."
    assert (await verifier.verify(sign(SECRET, "HS256", aud="vernis"))).sub == "user-1"
    assert (await verifier.verify(sign(SECRET, "HS256", aud=["billing", "vernis"]))).sub == "user-1"


async def test_audience_ignored_when_not_configured(make_verifier: MakeVerifier) -> None:
    """Without a configured audience, a token that carries aud still verifies."""
    token = issue_token(SECRET, sub="u", org="o", audience="anything", issuer="host")
    assert (await make_verifier(secret=SECRET).verify(token)).sub == "u"


# --- Required claims -------------------------------------------------------------------------------


@pytest.mark.parametrize("claim", ["sub", "org", "exp"])
async def test_missing_required_claim_is_named(make_verifier: MakeVerifier, claim: str) -> None:
    """A token without sub, org or exp is refused with a message naming the missing claim."""
    token = sign(SECRET, "HS256", drop=(claim,))
    assert await refused(make_verifier(secret=SECRET), token) == f"The token lacks the {claim} claim."


async def test_custom_org_claim(make_verifier: MakeVerifier) -> None:
    """With org_claim="tenant", the tenant claim is the org and a token with only "org" lacks it."""
    verifier = make_verifier(secret=SECRET, org_claim="tenant")
    token = issue_token(SECRET, sub="u", org="t-1", org_claim="tenant")
    assert (await verifier.verify(token)).org == "t-1"
    assert await refused(verifier, sign(SECRET, "HS256")) == "The token lacks the tenant claim."


@pytest.mark.parametrize("claim", ["sub", "org"])
@pytest.mark.parametrize("value", ["x" * (MAX_ID_CHARS + 1), "", ["a"], True, 1.5])
async def test_bad_identifiers_are_refused(make_verifier: MakeVerifier, claim: str, value: object) -> None:
    """sub and org over 255 characters, empty, or neither string nor integer are refused."""
    claims: dict[str, Any] = {claim: value}
    message = await refused(make_verifier(secret=SECRET), sign(SECRET, "HS256", **claims))
    assert message == f"The token's {claim} claim must be a string of 1 to {MAX_ID_CHARS} characters."


async def test_identifier_of_exactly_255_characters_passes(make_verifier: MakeVerifier) -> None:
    """sub and org of exactly 255 characters are accepted."""
    claims = await make_verifier(secret=SECRET).verify(sign(SECRET, "HS256", sub="s" * 255, org="o" * 255))
    assert (len(claims.sub), len(claims.org)) == (255, 255)


@pytest.mark.parametrize("permissions", ["assistant:use", ["assistant:use", 3], {"a": 1}, 0])
async def test_permissions_must_be_a_list_of_strings(
    make_verifier: MakeVerifier, permissions: object
) -> None:
    """A permissions claim that is not a list of strings is refused, not guessed at."""
    message = await refused(make_verifier(secret=SECRET), sign(SECRET, "HS256", permissions=permissions))
    assert message == "The token's permissions claim must be a list of strings."


# --- JWKS ------------------------------------------------------------------------------------------


async def test_jwks_selects_the_key_by_kid(
    make_verifier: MakeVerifier,
    jwks_host: JwksHost,
    rsa_key: rsa.RSAPrivateKey,
    ec_key: ec.EllipticCurvePrivateKey,
) -> None:
    """With two keys in the set, each token is verified by the key its kid names, from one cached fetch."""
    jwks_host.keys = [jwk(rsa_key, "r1"), jwk(ec_key, "e1", alg="ES256", use="sig")]
    verifier = make_verifier(jwks_url=jwks_host.url)
    assert (await verifier.verify(sign(rsa_key, "RS256", kid="r1", sub="a"))).sub == "a"
    assert (await verifier.verify(sign(ec_key, "ES256", kid="e1", sub="b"))).sub == "b"
    # The kid names the RSA key, the signature is by the EC key: refused.
    assert await refused(verifier, sign(ec_key, "ES256", kid="r1")) == "The token is not valid."
    assert jwks_host.requests == 1


async def test_jwks_token_without_kid_needs_a_single_key(
    make_verifier: MakeVerifier,
    jwks_host: JwksHost,
    rsa_key: rsa.RSAPrivateKey,
    ed_key: ed25519.Ed25519PrivateKey,
) -> None:
    """A token without kid is accepted when the set holds one signing key, refused when it holds several."""
    jwks_host.keys = [jwk(ed_key, "only")]
    assert (await make_verifier(jwks_url=jwks_host.url).verify(sign(ed_key, "EdDSA"))).sub == "user-1"
    jwks_host.keys = [jwk(ed_key, "d1"), jwk(rsa_key, "r1")]
    verifier = make_verifier(jwks_url=jwks_host.url)
    assert await refused(verifier, sign(ed_key, "EdDSA")) == "The token was signed with an unknown key."


async def test_jwks_rotation_is_picked_up_by_one_refetch(
    make_verifier: MakeVerifier,
    jwks_host: JwksHost,
    rsa_key: rsa.RSAPrivateKey,
    other_rsa_key: rsa.RSAPrivateKey,
) -> None:
    """After the host rotates its keys, a token with the new kid is accepted after exactly one refetch."""
    jwks_host.keys = [jwk(rsa_key, "2024")]
    verifier = make_verifier(jwks_url=jwks_host.url)
    await verifier.verify(sign(rsa_key, "RS256", kid="2024"))
    jwks_host.keys = [jwk(other_rsa_key, "2025")]
    assert (await verifier.verify(sign(other_rsa_key, "RS256", kid="2025", sub="rotated"))).sub == "rotated"
    assert jwks_host.requests == 2


async def test_unknown_kid_refetch_is_rate_limited(
    make_verifier: MakeVerifier,
    jwks_host: JwksHost,
    rsa_key: rsa.RSAPrivateKey,
    other_rsa_key: rsa.RSAPrivateKey,
) -> None:
    """Many tokens with unknown kids are refused and cost the host at most one extra fetch."""
    jwks_host.keys = [jwk(rsa_key, "k1")]
    verifier = make_verifier(jwks_url=jwks_host.url)
    await verifier.verify(sign(rsa_key, "RS256", kid="k1"))
    for n in range(20):
        token = sign(other_rsa_key, "RS256", kid=f"forged-{n}")
        assert await refused(verifier, token) == "The token was signed with an unknown key."
    assert jwks_host.requests == 2


async def test_concurrent_verifications_share_one_fetch(
    make_verifier: MakeVerifier, jwks_host: JwksHost, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    """Ten verifications started together on a cold cache cause a single JWKS request."""
    jwks_host.keys = [jwk(ec_key, "e1")]
    verifier = make_verifier(jwks_url=jwks_host.url)
    results = await asyncio.gather(
        *(verifier.verify(sign(ec_key, "ES256", kid="e1", sub=f"u{n}")) for n in range(10))
    )
    assert [c.sub for c in results] == [f"u{n}" for n in range(10)]
    assert jwks_host.requests == 1


async def test_jwks_cache_expires(
    make_verifier: MakeVerifier,
    jwks_host: JwksHost,
    ec_key: ec.EllipticCurvePrivateKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The set is refetched once jwks_cache_seconds have passed, not before."""
    # The verifier's own clock, moved by the test (a busy machine's pauses must not expire the cache).
    now = [1000.0]
    monkeypatch.setattr(tokens_module, "time", SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    jwks_host.keys = [jwk(ec_key, "e1")]
    verifier = make_verifier(jwks_url=jwks_host.url, jwks_cache_seconds=30)
    # A new token each time: one verified before is taken again without its key (see below).
    await verifier.verify(sign(ec_key, "ES256", kid="e1", sub="a"))
    now[0] += 29.9
    await verifier.verify(sign(ec_key, "ES256", kid="e1", sub="b"))
    assert jwks_host.requests == 1
    now[0] += 0.1
    await verifier.verify(sign(ec_key, "ES256", kid="e1", sub="c"))
    assert jwks_host.requests == 2


async def test_jwks_keys_must_match_their_type(
    make_verifier: MakeVerifier,
    jwks_host: JwksHost,
    rsa_key: rsa.RSAPrivateKey,
    ec_key: ec.EllipticCurvePrivateKey,
) -> None:
    """JWKS keys declaring an algorithm their type does not allow, or meant for encryption, are skipped."""
    jwks_host.keys = [jwk(rsa_key, "liar", alg="RS512"), jwk(rsa_key, "enc", use="enc"), jwk(ec_key, "good")]
    verifier = make_verifier(jwks_url=jwks_host.url)
    assert (await verifier.verify(sign(ec_key, "ES256", kid="good"))).sub == "user-1"
    for kid in ("liar", "enc"):
        assert (
            await refused(verifier, sign(rsa_key, "RS256", kid=kid))
            == "The token was signed with an unknown key."
        )
    assert await refused(verifier, sign(rsa_key, "RS512", kid="liar")) == "The token is not valid."


async def test_jwks_symmetric_keys_are_ignored(make_verifier: MakeVerifier, jwks_host: JwksHost) -> None:
    """An oct key in a JWKS never verifies anything: symmetric keys do not come from a URL."""
    jwks_host.keys = [{**HMACAlgorithm.to_jwk(SECRET, as_dict=True), "kid": "sym"}]
    verifier = make_verifier(jwks_url=jwks_host.url)
    assert await refused(verifier, sign(SECRET, "HS256", kid="sym")) == "The token is not valid."
    message = await refused(verifier, hand_made({"alg": "ES256", "kid": "sym"}, {"sub": "u"}, None))
    assert message == "The keys that verify tokens could not be fetched; try again shortly."


async def test_jwks_server_down_is_a_clear_refusal(
    make_verifier: MakeVerifier, rsa_key: rsa.RSAPrivateKey, caplog: pytest.LogCaptureFixture
) -> None:
    """With the JWKS host unreachable, verify says the keys could not be fetched and logs the URL, not the token."""
    url = f"http://127.0.0.1:{free_port()}/jwks.json"
    token = sign(rsa_key, "RS256", kid="k1")
    with caplog.at_level(logging.WARNING, logger="vernis.identity"):
        message = await refused(make_verifier(jwks_url=url), token)
    assert message == "The keys that verify tokens could not be fetched; try again shortly."
    assert url in caplog.text
    assert token not in caplog.text


@pytest.mark.parametrize(
    ("status", "body"), [(500, None), (200, b"not json"), (200, b'{"keys": 3}'), (200, b"[]")]
)
async def test_jwks_bad_answers_are_a_clear_refusal(
    make_verifier: MakeVerifier,
    jwks_host: JwksHost,
    rsa_key: rsa.RSAPrivateKey,
    status: int,
    body: bytes | None,
) -> None:
    """A non-200 answer or a body that is not a key set is reported as keys that could not be fetched."""
    jwks_host.keys, jwks_host.status, jwks_host.body = [jwk(rsa_key, "k1")], status, body
    message = await refused(make_verifier(jwks_url=jwks_host.url), sign(rsa_key, "RS256", kid="k1"))
    assert message == "The keys that verify tokens could not be fetched; try again shortly."


async def test_failed_jwks_fetch_is_not_retried_at_once(
    make_verifier: MakeVerifier, jwks_host: JwksHost, rsa_key: rsa.RSAPrivateKey
) -> None:
    """After a failed fetch, further verifications within 10 s do not ask the failing host again."""
    jwks_host.status = 503
    verifier = make_verifier(jwks_url=jwks_host.url)
    for _ in range(5):
        message = await refused(verifier, sign(rsa_key, "RS256", kid="k1"))
        assert message == "The keys that verify tokens could not be fetched; try again shortly."
    assert jwks_host.requests == 1


async def test_jwks_outage_keeps_the_previous_set(
    make_verifier: MakeVerifier, jwks_host: JwksHost, rsa_key: rsa.RSAPrivateKey
) -> None:
    """When a refresh fails, the previously fetched keys keep verifying tokens."""
    jwks_host.keys = [jwk(rsa_key, "k1")]
    verifier = make_verifier(jwks_url=jwks_host.url, jwks_cache_seconds=0.1)
    await verifier.verify(sign(rsa_key, "RS256", kid="k1"))
    jwks_host.status = 503
    await asyncio.sleep(0.2)
    assert (await verifier.verify(sign(rsa_key, "RS256", kid="k1", sub="user-2"))).sub == "user-2"
    assert jwks_host.requests == 2


async def test_hs256_is_refused_when_only_jwks_is_configured(
    make_verifier: MakeVerifier, jwks_host: JwksHost, rsa_key: rsa.RSAPrivateKey
) -> None:
    """With only a JWKS URL, an HS256 token is refused without fetching anything."""
    jwks_host.keys = [jwk(rsa_key, "k1")]
    verifier = make_verifier(jwks_url=jwks_host.url)
    assert await refused(verifier, sign(SECRET, "HS256", kid="k1")) == "The token is not valid."
    assert jwks_host.requests == 0


# --- Configuration ---------------------------------------------------------------------------------


def test_nothing_configured_is_a_config_error() -> None:
    """A verifier with no key names all three settings that could provide one."""
    with pytest.raises(ConfigError) as caught:
        TokenVerifier(secret="  ", issuer="x")
    assert all(
        name in str(caught.value)
        for name in ("VERNIS_JWT_SECRET", "VERNIS_JWT_PUBLIC_KEY", "VERNIS_JWKS_URL")
    )


def test_short_secret_is_a_config_error() -> None:
    """An HS256 secret under 32 bytes is refused at configuration time."""
    with pytest.raises(ConfigError, match=r"^VERNIS_JWT_SECRET: "):
        TokenVerifier(secret="x" * 31)


@pytest.mark.parametrize(
    "value",
    [
        "-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n",
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    ],
)
def test_bad_pem_is_a_config_error(value: str) -> None:
    """PEM text that is not a public key is refused, naming VERNIS_JWT_PUBLIC_KEY."""
    with pytest.raises(ConfigError, match=r"^VERNIS_JWT_PUBLIC_KEY: not a PEM public key"):
        TokenVerifier(public_key=value)


def test_unsupported_key_types_are_config_errors(rsa_key: rsa.RSAPrivateKey) -> None:
    """A private key, an EC key off P-256 and an RSA key under 2048 bits are all refused."""
    private_pem = rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    weak_rsa = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    for value in (private_pem, pem(ec.generate_private_key(ec.SECP384R1())), pem(weak_rsa)):
        with pytest.raises(ConfigError, match=r"^VERNIS_JWT_PUBLIC_KEY: "):
            TokenVerifier(public_key=value)


def test_unreadable_key_path_is_a_config_error(tmp_path: Path) -> None:
    """A public_key path that cannot be read is refused, naming VERNIS_JWT_PUBLIC_KEY and the path."""
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigError, match=r"^VERNIS_JWT_PUBLIC_KEY: cannot read") as caught:
        TokenVerifier(public_key=str(missing))
    assert str(missing) in str(caught.value)
    with pytest.raises(ConfigError, match=r"^VERNIS_JWT_PUBLIC_KEY: cannot read"):
        TokenVerifier(public_key=str(tmp_path))


def test_jwks_url_must_be_http() -> None:
    """A JWKS URL that is not http(s) is refused at configuration time."""
    with pytest.raises(ConfigError, match=r"^VERNIS_JWKS_URL: "):
        TokenVerifier(jwks_url="file:///etc/keys.json")


async def test_a_verified_token_is_taken_again_without_a_second_check(
    make_verifier: MakeVerifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same token presented again (a socket reconnecting) gives the same claims without a second signature check; another token is checked."""
    verifier = make_verifier(secret=SECRET)
    token = sign(SECRET, "HS256")
    claims = await verifier.verify(token)

    def no_second_check(*args: object) -> dict[str, Any]:
        raise AssertionError("checked again")

    monkeypatch.setattr(verifier, "_decode", no_second_check)
    assert await verifier.verify(token) is claims
    with pytest.raises(AssertionError, match="checked again"):
        await verifier.verify(sign(SECRET, "HS256", sub="user-2"))


async def test_a_verified_token_past_its_expiry_is_refused(
    make_verifier: MakeVerifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token verified while valid is refused once its exp and the leeway have passed, though its claims are still kept; with verified_seconds=0 nothing is kept."""
    verifier = make_verifier(secret=SECRET, verified_seconds=3600)
    token = sign(SECRET, "HS256", exp=int(time.time()) + 5)
    await verifier.verify(token)
    later = time.time() + 5 + tokens_module.LEEWAY_SECONDS + 1
    monkeypatch.setattr(tokens_module, "time", SimpleNamespace(monotonic=time.monotonic, time=lambda: later))
    assert await refused(verifier, token) == "The token has expired."
    uncached = make_verifier(secret=SECRET, verified_seconds=0)
    await uncached.verify(token := sign(SECRET, "HS256", sub="user-3"))
    monkeypatch.setattr(uncached, "_decode", lambda *args: {"sub": "x", "org": "y", "exp": 1})
    assert (await uncached.verify(token)).sub == "x"  # checked again: nothing was kept


async def test_a_token_kept_at_a_sockets_close_is_taken_without_a_second_check(
    make_verifier: MakeVerifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """keep(token, claims) (a socket that held the token closed) makes the token's next verify take those claims without a signature check; claims past their expiry are refused, and a token never kept is checked."""
    verifier = make_verifier(secret=SECRET)
    token = sign(SECRET, "HS256", sub="kept")
    payload = jwt.decode(token, SECRET, algorithms=["HS256"])

    def no_check(*args: object) -> dict[str, Any]:
        raise AssertionError("checked")

    monkeypatch.setattr(verifier, "_decode", no_check)
    verifier.keep(token, MappingProxyType(payload))
    claims = await verifier.verify(token)
    assert (claims.sub, claims.org) == ("kept", "acme")
    expired = sign(SECRET, "HS256", sub="old")
    verifier.keep(expired, {**payload, "sub": "old", "exp": int(time.time()) - 3600})
    assert await refused(verifier, expired) == "The token has expired."
    with pytest.raises(AssertionError, match="checked"):
        await verifier.verify(sign(SECRET, "HS256", sub="never-kept"))
