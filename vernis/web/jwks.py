"""`GET /api/assistant/jwks`: the public keys of the tokens Vernis signs for its MCP servers.

An MCP server configured with `forward_member_token = true` verifies the token it receives in
`X-Vernis-Member-Token` against this JSON Web Key Set (by `kid`; see `vernis.identity.signing`).
Public keys only, no authentication, cacheable for five minutes. Without a signing key in use (no
server forwards a token and `VERNIS_SIGNING_KEY` is unset) the set is empty.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from vernis.identity.signing import SigningKeys

__all__ = ["JWKS_PATH", "jwks_routes"]

JWKS_PATH = "/api/assistant/jwks"


def jwks_routes(signing: SigningKeys | None) -> list[BaseRoute]:
    """The JWKS route, serving `signing`'s public key (its key is read or made now), or no key."""
    document = signing.jwks() if signing is not None else {"keys": []}

    async def jwks(request: Request) -> Response:
        return JSONResponse(document, headers={"Cache-Control": "public, max-age=300"})

    return [Route(JWKS_PATH, jwks)]
