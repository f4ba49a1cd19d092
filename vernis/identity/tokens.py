"""Verify the JWTs a host product signs for its own users, and issue HS256 tokens (SPEC §2).

Contract of `TokenVerifier.verify(token)`: it returns `HostClaims` only when the token's signature
checks out against a configured key, `exp` is in the future, `nbf` (if any) in the past (both with
`LEEWAY_SECONDS` of leeway), `iss`/`aud` match when an issuer/audience is configured, and `sub` and
the org claim are strings (or integers) of 1 to `MAX_ID_CHARS` characters, and its audience is not
one of the tokens Vernis signs for its MCP servers (`vernis.identity.signing`: such a token never
stands for a member here, whoever signed it). Anything else raises
`AuthError` whose `public_message` is short and safe to show; the token itself is never logged nor
put in a message.

The accepted algorithm is bound to the key, never read from the token alone: a secret verifies
HS256 only; a PEM public key verifies RS256 (RSA ≥ 2048 bits), ES256 (EC P-256) or EdDSA (Ed25519)
according to its type; a JWKS key verifies the one algorithm of its `kty`/`crv`. So `alg: none` and
the HS256-signed-with-the-public-key confusion never reach a signature check. JWKS sets are fetched
with `httpx2` (the model client's HTTP client too), cached for `jwks_cache_seconds`, and refetched
early only for an unknown `kid`, at most once per `REFETCH_INTERVAL` seconds so that forged tokens
cannot make Vernis hammer the host. A failed fetch is not retried for `REFETCH_INTERVAL` seconds
either; meanwhile the last good set stays in use.

A token verified once is taken again without a second signature check for `VERIFIED_SECONDS` (the
same string: the same claims), never past its `exp` and leeway: every socket of a reconnect storm
(a deploy, a network blip) presents the token it connected with. A key taken out of a JWKS set
verifies no new token; one it verified before may still be taken for up to `VERIFIED_SECONDS`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx2
import jwt
from cachetools import TTLCache
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from jwt.types import Options

from vernis.exceptions import AuthError, ConfigError
from vernis.identity.signing import SERVER_AUDIENCE_PREFIX

__all__ = [
    "DEFAULT_TTL",
    "LEEWAY_SECONDS",
    "MAX_ID_CHARS",
    "ConfigError",
    "HostClaims",
    "TokenVerifier",
    "issue_token",
]

DEFAULT_TTL = 12 * 3600
LEEWAY_SECONDS = 30
MAX_ID_CHARS = 255
REFETCH_INTERVAL = 10.0
MIN_SECRET_BYTES = 32  # RFC 7518 §3.2: an HS256 key at least as long as the hash
MAX_TOKEN_CHARS = 16_384
# How long a verified token's claims are taken again without a second check, and how many are kept.
VERIFIED_SECONDS = 30.0
VERIFIED_TOKENS = 20_000
MAX_JWKS_BYTES = 1 << 20

logger = logging.getLogger("vernis.identity")

_INVALID = "The token is not valid."
_UNKNOWN_KEY = "The token was signed with an unknown key."
_NO_KEYS = "The keys that verify tokens could not be fetched; try again shortly."
_NOT_PEM = "VERNIS_JWT_PUBLIC_KEY: not a PEM public key (RSA, EC P-256 or Ed25519)"
# (kty, crv) -> the only algorithm a JWKS key of that type may verify; "oct" is absent on purpose:
# a symmetric key served over HTTP would let anyone who can read the URL mint tokens.
_JWK_ALGORITHMS: dict[tuple[object, object], str] = {
    ("RSA", None): "RS256",
    ("EC", "P-256"): "ES256",
    ("OKP", "Ed25519"): "EdDSA",
}

_PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


@dataclass(frozen=True, slots=True)
class HostClaims:
    """A verified token. `permissions` is None when the claim is absent (the role table decides)."""

    sub: str
    org: str
    expires_at: float
    name: str | None = None
    email: str | None = None
    role: str | None = None
    permissions: tuple[str, ...] | None = None
    org_name: str | None = None
    tz: str | None = None
    issued_at: float | None = None
    # Every verified claim, read-only; left out of repr and equality (it may hold personal data).
    raw: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), repr=False, compare=False)


class TokenVerifier:
    """Verifies host tokens against exactly the keys given (see the module docstring).

    Blank strings count as "not configured". Raises `ConfigError` when no key is given, the secret
    is shorter than 32 bytes, or `public_key` (PEM text, or the path of a PEM file) is unusable.
    With both a public key and a JWKS URL, a token that carries a `kid` is checked against the set.
    """

    def __init__(
        self,
        *,
        secret: str | None = None,
        public_key: str | None = None,
        jwks_url: str | None = None,
        issuer: str | None = None,
        audience: str | None = None,
        org_claim: str = "org",
        jwks_cache_seconds: float = 300.0,
        verified_seconds: float = VERIFIED_SECONDS,
    ) -> None:
        secret, public_key, jwks_url = (
            v if v and v.strip() else None for v in (secret, public_key, jwks_url)
        )
        if secret is None and public_key is None and jwks_url is None:
            raise ConfigError(
                "no way to verify the host's tokens: set VERNIS_JWT_SECRET (HS256), VERNIS_JWT_PUBLIC_KEY "
                "(a PEM public key: RS256, ES256 or EdDSA) or VERNIS_JWKS_URL (or run the demo: --demo)"
            )
        if secret is not None:
            _check_secret(secret)
        if not org_claim:
            raise ConfigError("VERNIS_JWT_ORG_CLAIM: must name a claim")
        self._secret = secret
        self._public: tuple[_PublicKey, str] | None = None
        if public_key is not None:
            self._public = _load_public_key(public_key)
        self._jwks: _JwksCache | None = None
        if jwks_url is not None:
            if not jwks_url.startswith(("https://", "http://")):
                raise ConfigError("VERNIS_JWKS_URL: must be an http:// or https:// URL")
            self._jwks = _JwksCache(jwks_url, jwks_cache_seconds)
        self._issuer = issuer or None
        self._audience = audience or None
        self._org_claim = org_claim
        self._verified: TTLCache[str, HostClaims] | None = (
            TTLCache(maxsize=VERIFIED_TOKENS, ttl=verified_seconds) if verified_seconds > 0 else None
        )

    @property
    def can_issue(self) -> bool:
        return self._secret is not None

    async def verify(self, token: str) -> HostClaims:
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
            raise AuthError(_INVALID)
        verified = self._verified
        if verified is not None:
            claims = verified.get(token)
            if claims is not None:
                if claims.expires_at + LEEWAY_SECONDS > time.time():
                    return claims
                raise AuthError("The token has expired.")
        claims = await self._verify(token)
        if verified is not None:
            verified[token] = claims
        return claims

    def keep(self, token: str, payload: Mapping[str, Any]) -> None:
        """`token`, verified earlier with these claims (a socket that held it just closed), is taken
        again without a second check for `verified_seconds` from now, never past its expiry."""
        if self._verified is None:
            return
        try:
            self._verified[token] = self._claims(payload)
        except (AuthError, KeyError, TypeError):
            return

    async def _verify(self, token: str) -> HostClaims:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthError(_INVALID) from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str):
            raise AuthError(_INVALID)
        key: str | _PublicKey | jwt.PyJWK
        if alg == "HS256" and self._secret is not None:
            key = self._secret
        elif self._public is not None and alg == self._public[1] and (kid is None or self._jwks is None):
            key = self._public[0]
        elif self._jwks is not None and alg in _JWK_ALGORITHMS.values():
            key = await self._jwks.key_for(kid)
        else:
            raise AuthError(_INVALID)  # alg none, or an algorithm no configured key may verify
        payload = self._decode(token, key, alg)
        if _for_a_server(payload.get("aud")):
            raise AuthError(_INVALID)
        return self._claims(payload)

    async def aclose(self) -> None:
        if self._jwks is not None:
            await self._jwks.aclose()

    def _decode(self, token: str, key: str | _PublicKey | jwt.PyJWK, alg: str) -> dict[str, Any]:
        options: Options = {
            "require": ["exp", "sub", self._org_claim],
            "verify_sub": False,  # PyJWT refuses integer subjects; _identifier() decides
            "verify_aud": self._audience is not None,
            "enforce_minimum_key_length": True,
        }
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[alg],
                options=options,
                issuer=self._issuer,
                audience=self._audience,
                leeway=LEEWAY_SECONDS,
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("The token has expired.") from None
        except jwt.ImmatureSignatureError:
            raise AuthError("The token is not valid yet.") from None
        except jwt.InvalidIssuerError:
            raise AuthError("The token was issued by someone else.") from None
        except jwt.InvalidAudienceError:
            raise AuthError("The token is meant for another audience.") from None
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"The token lacks the {exc.claim} claim.") from None
        except jwt.PyJWTError:
            raise AuthError(_INVALID) from None

    def _claims(self, payload: Mapping[str, Any]) -> HostClaims:
        exp = _number(payload["exp"])
        if exp is None:
            raise AuthError(_INVALID)
        permissions = payload.get("permissions")
        if permissions is not None:
            if not isinstance(permissions, list) or not all(isinstance(p, str) for p in permissions):
                raise AuthError("The token's permissions claim must be a list of strings.")
            permissions = tuple(permissions)
        return HostClaims(
            sub=_identifier(payload["sub"], "sub"),
            org=_identifier(payload[self._org_claim], self._org_claim),
            expires_at=exp,
            name=_text(payload.get("name")),
            email=_text(payload.get("email")),
            role=_text(payload.get("role")),
            permissions=permissions,
            org_name=_text(payload.get("org_name")),
            tz=_zone(payload.get("tz")),
            issued_at=_number(payload.get("iat")),
            raw=MappingProxyType(payload),  # PyJWT's own dict, made for this call
        )


def issue_token(
    secret: str,
    *,
    sub: str,
    org: str,
    ttl: float = DEFAULT_TTL,
    role: str | None = None,
    name: str | None = None,
    email: str | None = None,
    permissions: Sequence[str] | None = None,
    org_name: str | None = None,
    tz: str | None = None,
    issuer: str | None = None,
    audience: str | None = None,
    org_claim: str = "org",
) -> str:
    """An HS256 token with `iat` and `exp` (now + `ttl`); claims left as None are omitted.

    Raises `ConfigError` for a secret that `TokenVerifier` would refuse.
    """
    _check_secret(secret)
    if isinstance(permissions, str):
        raise TypeError("permissions must be a sequence of strings, not a string")
    now = int(time.time())
    payload: dict[str, Any] = {"sub": sub, org_claim: org, "iat": now, "exp": now + int(ttl)}
    optional = {"name": name, "email": email, "role": role, "org_name": org_name, "tz": tz}
    optional |= {"iss": issuer, "aud": audience}
    payload |= {claim: value for claim, value in optional.items() if value is not None}
    if permissions is not None:
        payload["permissions"] = list(permissions)
    return jwt.encode(payload, secret, algorithm="HS256")


class _JwksCache:
    """The host's JSON Web Key Set: fetched lazily, shared by concurrent verifications."""

    def __init__(self, url: str, ttl: float) -> None:
        self._url = url
        self._ttl = ttl
        self._keys: tuple[jwt.PyJWK, ...] | None = None
        self._fetched_at = self._failed_at = self._refetched_at = -math.inf
        self._lock = asyncio.Lock()
        self._client: httpx2.AsyncClient | None = None

    async def key_for(self, kid: str | None) -> jwt.PyJWK:
        key = _pick(await self._current(), kid)
        if key is None and kid is not None:
            key = _pick(await self._current(missing_kid=kid), kid)
        if key is None:
            raise AuthError(_UNKNOWN_KEY)
        return key

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _current(self, missing_kid: str | None = None) -> tuple[jwt.PyJWK, ...]:
        # Holding the lock across the fetch is what makes concurrent verifications share it.
        async with self._lock:
            now = time.monotonic()
            if missing_kid is None:
                due = self._keys is None or now - self._fetched_at >= self._ttl
            elif self._keys is not None and _pick(self._keys, missing_kid) is not None:
                due = False  # a verification that waited on the lock already found it
            else:
                due = now - self._refetched_at >= REFETCH_INTERVAL
                if due:
                    self._refetched_at = now
            # After a failure, wait before asking again: a host that is down gets no retry storm.
            if due and now - self._failed_at >= REFETCH_INTERVAL:
                try:
                    self._keys = await self._fetch()
                    self._fetched_at = now
                except (httpx2.HTTPError, httpx2.InvalidURL, ValueError, RecursionError) as exc:
                    self._failed_at = now
                    logger.warning("could not fetch the JWKS from %s: %s", self._url, exc)
            if self._keys is None:
                raise AuthError(_NO_KEYS)
            return self._keys

    async def _fetch(self) -> tuple[jwt.PyJWK, ...]:
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=5.0, headers={"accept": "application/json"})
        body = bytearray()
        async with self._client.stream("GET", self._url) as response:
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_JWKS_BYTES:
                    raise ValueError("the key set is larger than 1 MiB")
        keys = _signing_keys(json.loads(body))
        if not keys:
            raise ValueError("no RS256, ES256 or EdDSA signing key in the set")
        return keys


def _signing_keys(document: object) -> tuple[jwt.PyJWK, ...]:
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError("not a JSON Web Key Set")
    keys: list[jwt.PyJWK] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kty = entry.get("kty")
        alg = _JWK_ALGORITHMS.get((kty, None if kty == "RSA" else entry.get("crv")))
        # A key that declares another algorithm than its type allows is skipped, not coerced.
        if alg is None or entry.get("alg", alg) != alg:
            continue
        try:
            key = jwt.PyJWK(entry, algorithm=alg)
        except jwt.PyJWTError:
            continue
        if isinstance(key.key, rsa.RSAPublicKey) and key.key.key_size < 2048:
            continue
        keys.append(key)
    return tuple(keys)


def _pick(keys: tuple[jwt.PyJWK, ...], kid: str | None) -> jwt.PyJWK | None:
    if kid is None:
        # Without a kid the choice is only unambiguous when there is nothing to choose from.
        return keys[0] if len(keys) == 1 else None
    return next((key for key in keys if key.key_id == kid), None)


def _for_a_server(audience: object) -> bool:
    audiences = audience if isinstance(audience, list) else [audience]
    return any(isinstance(each, str) and each.startswith(SERVER_AUDIENCE_PREFIX) for each in audiences)


def _check_secret(secret: str) -> None:
    if len(secret.encode()) < MIN_SECRET_BYTES:
        raise ConfigError(
            f"VERNIS_JWT_SECRET: shorter than {MIN_SECRET_BYTES} bytes; try `openssl rand -hex 32`"
        )


def _load_public_key(value: str) -> tuple[_PublicKey, str]:
    text = value.strip()
    if text.startswith("-----BEGIN"):
        # Environment variables often carry PEM with literal "\n" instead of line breaks.
        data = text.replace("\\n", "\n").encode()
    else:
        try:
            data = Path(text).expanduser().read_bytes()
        except OSError as exc:
            raise ConfigError(f"VERNIS_JWT_PUBLIC_KEY: cannot read {text!r} ({exc.strerror})") from None
    try:
        key = load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError(_NOT_PEM) from None
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise ConfigError("VERNIS_JWT_PUBLIC_KEY: the RSA key is shorter than 2048 bits")
        return key, "RS256"
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key, "ES256"
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key, "EdDSA"
    raise ConfigError(_NOT_PEM)


def _identifier(value: object, claim: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_CHARS:
        raise AuthError(f"The token's {claim} claim must be a string of 1 to {MAX_ID_CHARS} characters.")
    return value


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _zone(value: object) -> str | None:
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None
    return value


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float range: no real timestamp
        return None
    return number if math.isfinite(number) else None
