"""Vernis's own signing key, and the short-lived tokens it signs for an MCP server (SPEC §14 item 4).

The member's host token never leaves Vernis: a host token opens a socket, so a server holding one
could talk to Vernis as the member. A server configured with `forward_member_token = true` gets a
token Vernis signs for it instead, one per call:

    header  {"alg": "EdDSA" (or "ES256"), "kid": <RFC 7638 thumbprint of the key>, "typ": "JWT"}
    claims  sub, org             the member, as the host's token named them
            name, email, role, org_name   when known
            permissions          what Vernis lets the member do (the role's set or the claim)
            aud                  "vernis-mcp:<server>"
            iat, exp             exp at most `SERVER_TOKEN_TTL` (5 minutes) later, and never after
                                 the member's own token expires
            jti                  unique per token

The server verifies it with the public keys Vernis serves at `GET /api/assistant/jwks`. Vernis
itself never takes one for a member's token: host tokens are verified against the host's keys
only, and `TokenVerifier` refuses a token for any `vernis-mcp:` audience whoever signed it.

The key is `VERNIS_SIGNING_KEY` (a PEM private key, Ed25519 or EC P-256, or the path of a PEM
file), else an Ed25519 key generated once per data directory (`.vernis/signing-key.pem`). Instances
that do not share a data directory must share the key: set `VERNIS_SIGNING_KEY` on each.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from jwt.algorithms import ECAlgorithm, OKPAlgorithm

from vernis.exceptions import ConfigError
from vernis.identity.members import MemberInfo

__all__ = [
    "KEY_FILE",
    "SERVER_AUDIENCE_PREFIX",
    "SERVER_TOKEN_TTL",
    "SigningKey",
    "SigningKeys",
    "server_audience",
]

logger = logging.getLogger("vernis.identity")

SERVER_AUDIENCE_PREFIX = "vernis-mcp:"
SERVER_TOKEN_TTL = 300
# Under the data directory.
KEY_FILE = Path(".vernis") / "signing-key.pem"

_NOT_PEM = "VERNIS_SIGNING_KEY: not an unencrypted PEM private key (Ed25519 or EC P-256)"

_PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


def server_audience(server: str) -> str:
    """The audience of the tokens Vernis signs for the MCP server configured as `server`."""
    return f"{SERVER_AUDIENCE_PREFIX}{server}"


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One private key, the algorithm bound to it and its key id."""

    private: _PrivateKey
    algorithm: str
    kid: str

    @classmethod
    def of(cls, private: _PrivateKey) -> SigningKey:
        """Raises `ConfigError` for a key of another type than Ed25519 or EC P-256."""
        if isinstance(private, ed25519.Ed25519PrivateKey):
            algorithm = "EdDSA"
            public = OKPAlgorithm.to_jwk(private.public_key(), as_dict=True)
        elif isinstance(private, ec.EllipticCurvePrivateKey) and isinstance(private.curve, ec.SECP256R1):
            algorithm = "ES256"
            public = ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
        else:
            raise ConfigError(_NOT_PEM)
        return cls(private, algorithm, _thumbprint(public))

    @classmethod
    def from_pem(cls, data: bytes) -> SigningKey:
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            raise ConfigError(_NOT_PEM) from None
        if not isinstance(private, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
            raise ConfigError(_NOT_PEM)
        return cls.of(private)

    def public_jwk(self) -> dict[str, Any]:
        """The public half as a JWK: never the private part."""
        public = self.private.public_key()
        if isinstance(public, ed25519.Ed25519PublicKey):
            jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
        else:
            jwk = ECAlgorithm.to_jwk(public, as_dict=True)
        return {**jwk, "kid": self.kid, "alg": self.algorithm, "use": "sig"}

    def sign(self, claims: dict[str, Any]) -> str:
        return jwt.encode(
            claims, self.private, algorithm=self.algorithm, headers={"kid": self.kid, "typ": "JWT"}
        )


class SigningKeys:
    """Vernis's signing key: `configured` (PEM text or a PEM file's path; blank: none), else the one
    kept under `directory`, made there the first time it is needed. Raises `ConfigError` at once for
    a configured key that is unusable; reading or making the kept one happens on `load()`."""

    def __init__(self, configured: str | None, directory: Path) -> None:
        self._path = directory / KEY_FILE
        self._key: SigningKey | None = None
        text = configured.strip() if configured else ""
        self.configured = bool(text)
        if text:
            self._key = SigningKey.from_pem(_pem_bytes(text))

    def load(self) -> SigningKey:
        """The key, read or made now if it was not yet. Raises `ConfigError` when the kept key
        cannot be read or written."""
        if self._key is None:
            self._key = _kept_key(self._path)
        return self._key

    def jwks(self) -> dict[str, Any]:
        """The public JSON Web Key Set an MCP server verifies Vernis's tokens with."""
        return {"keys": [self.load().public_jwk()]}

    def server_token(
        self,
        member: MemberInfo,
        permissions: Iterable[str],
        *,
        server: str,
        not_after: float | None = None,
    ) -> str:
        """A token for the MCP server `server` naming `member` (see the module docstring); it
        expires within `SERVER_TOKEN_TTL` seconds, and not after `not_after` (epoch seconds: the
        member's own token's expiry) when given."""
        now = int(time.time())
        expires = now + SERVER_TOKEN_TTL
        if not_after is not None:
            expires = min(expires, int(not_after))
        claims: dict[str, Any] = {
            "sub": member.sub,
            "org": member.org,
            "aud": server_audience(server),
            "iat": now,
            "exp": expires,
            "jti": uuid.uuid4().hex,
            "permissions": sorted(permissions),
        }
        optional = {
            "name": member.name,
            "email": member.email,
            "role": member.role,
            "org_name": member.organization_name,
        }
        claims |= {claim: value for claim, value in optional.items() if value}
        return self.load().sign(claims)


def _thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: the same key gives the same id on every instance."""
    members = {name: jwk[name] for name in ("crv", "kty", "x", "y") if name in jwk}
    digest = hashlib.sha256(json.dumps(members, sort_keys=True, separators=(",", ":")).encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _pem_bytes(text: str) -> bytes:
    if text.startswith("-----BEGIN"):
        # Environment variables often carry PEM with literal "\n" instead of line breaks.
        return text.replace("\\n", "\n").encode()
    try:
        return Path(text).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(f"VERNIS_SIGNING_KEY: cannot read {text!r} ({exc.strerror})") from None


def _kept_key(path: Path) -> SigningKey:
    try:
        return _read_kept(path)
    except FileNotFoundError:
        pass
    key = SigningKey.of(ed25519.Ed25519PrivateKey.generate())
    pem = key.private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # Written whole under another name, then linked into place: a process of the same data
    # directory starting at the same moment reads either nothing or the whole key, and one wins.
    draft = path.with_name(f"{path.name}.{uuid.uuid4().hex}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(pem)
        try:
            os.link(draft, path)
        except FileExistsError:
            return _read_kept(path)
    except OSError as exc:
        raise ConfigError(
            f"VERNIS_SIGNING_KEY is not set and a key cannot be kept in {path} ({exc.strerror}); "
            "set VERNIS_SIGNING_KEY to a PEM private key (Ed25519 or EC P-256)"
        ) from None
    finally:
        draft.unlink(missing_ok=True)
    logger.info("made a signing key for the tokens MCP servers receive: %s", path)
    return key


def _read_kept(path: Path) -> SigningKey:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot be read ({exc.strerror}); set VERNIS_SIGNING_KEY instead"
        ) from None
    try:
        return SigningKey.from_pem(data)
    except ConfigError:
        raise ConfigError(f"{path}: not a usable signing key; remove it to make a new one") from None
