"""The operator's HTTP routes (SPEC §15): `/metrics` for Prometheus, and the admin API.

`GET /metrics` answers the Prometheus text format; with `VERNIS_METRICS_TOKEN` set it asks for
`Authorization: Bearer <token>` (401 otherwise). Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from vernis.metrics import CONTENT_TYPE
from vernis.services.runtime import Services

__all__ = ["bearer_matches", "ops_routes"]


def bearer_matches(request: Request, expected: str) -> bool:
    """Whether the request carries `Authorization: Bearer <expected>`, compared in constant time."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())


async def metrics(request: Request) -> Response:
    services: Services = request.state.services
    expected = services.settings.metrics_token
    if expected and not bearer_matches(request, expected):
        return JSONResponse(
            {
                "error": {
                    "code": "unauthenticated",
                    "message": "Send Authorization: Bearer $VERNIS_METRICS_TOKEN.",
                }
            },
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    return Response(services.metrics.render(), media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})


def ops_routes() -> list[BaseRoute]:
    return [Route("/metrics", metrics)]
