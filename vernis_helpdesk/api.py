"""A tiny helpdesk HTTP API: the host product's own API, as the helpdesk toolkit sees it.

Every request carries `Authorization: Bearer <token>`, the token the host signed for its user (the
same one Vernis verifies), and sees only the tickets of the token's organization: another
organization's ticket is a 404, like an unknown one. So a toolkit calling it with the member's token
can never see more than that user may.

    GET  /tickets?status=open|pending|solved&assigned=me&q=words&limit=N   {"tickets": [...], "total": N}
    GET  /tickets/{id}                                                      the ticket, with its comments
    POST /tickets/{id}/status    {"status": "solved"}          {"ticket": {...}, "previous_status": "open"}
    POST /tickets/{id}/comments  {"body": "..."}               201 {"ticket": {...}, "comment": {...}}

Errors are `{"error": {"code", "message"}}` with 400/422 (bad input), 401 (no or bad token), 403
(may not change tickets: the `permissions` claim lacks `ticket:update`, or without that claim the
role is not owner, admin or agent) and 404. Tickets live in memory (`vernis_helpdesk._tickets`).

Run it alone: `python -m vernis_helpdesk.api --port 9100` (verifies with VERNIS_JWT_SECRET, or
VERNIS_JWT_PUBLIC_KEY; VERNIS_JWT_ISSUER and VERNIS_JWT_AUDIENCE when set).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal, TypeVar

import uvicorn
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from vernis.exceptions import AuthError, ConfigError
from vernis.identity.tokens import HostClaims, TokenVerifier
from vernis_helpdesk._tickets import Status, Ticket, TicketStore

__all__ = ["UPDATE_ROLES", "create_api", "main"]

# Roles that may change tickets when the token has no `permissions` claim.
UPDATE_ROLES = frozenset({"owner", "admin", "agent"})
MAX_LIMIT = 100

M = TypeVar("M", bound=BaseModel)


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class StatusChange(_Body):
    status: Status


class NewComment(_Body):
    body: Annotated[str, StringConstraints(min_length=1, max_length=5000)]


class ListQuery(_Body):
    status: Status | Literal["any"] = "any"
    assigned: Literal["me", "anyone"] = "anyone"
    q: Annotated[str, StringConstraints(max_length=200)] = ""
    limit: int = Field(50, ge=1, le=MAX_LIMIT)


def create_api(
    secret: str | None = None,
    *,
    public_key: str | None = None,
    jwks_url: str | None = None,
    issuer: str | None = None,
    audience: str | None = None,
    org_claim: str = "org",
    store: TicketStore | None = None,
) -> Starlette:
    """The helpdesk API, verifying tokens like Vernis does (`TokenVerifier`: an HS256 `secret`, a PEM
    `public_key`, or a `jwks_url`). Raises `ConfigError` when none is given or one is unusable."""
    verifier = TokenVerifier(
        secret=secret,
        public_key=public_key,
        jwks_url=jwks_url,
        issuer=issuer,
        audience=audience,
        org_claim=org_claim,
    )
    tickets = store if store is not None else TicketStore()

    async def caller(request: Request) -> HostClaims:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refused(401, "unauthenticated", "Send the user's token: Authorization: Bearer <token>.")
        try:
            claims = await verifier.verify(token.strip())
        except AuthError as exc:
            raise _Refused(401, "unauthenticated", exc.public_message) from None
        tickets.ensure(claims.org, claims.sub)
        return claims

    def ticket_of(request: Request, claims: HostClaims) -> Ticket:
        ticket_id: str = request.path_params["ticket_id"]
        ticket = tickets.get(claims.org, ticket_id)
        if ticket is None:
            raise _Refused(404, "not_found", f"There is no ticket {ticket_id}.")
        return ticket

    async def list_tickets(request: Request) -> Response:
        claims = await caller(request)
        query = _parse(ListQuery, dict(request.query_params))
        found, total = tickets.find(
            claims.org,
            status=None if query.status == "any" else query.status,
            assignee=claims.sub if query.assigned == "me" else None,
            query=query.q or None,
            limit=query.limit,
        )
        return JSONResponse({"tickets": [ticket.summary() for ticket in found], "total": total})

    async def get_ticket(request: Request) -> Response:
        claims = await caller(request)
        return JSONResponse(ticket_of(request, claims).detail())

    async def change_status(request: Request) -> Response:
        claims = await caller(request)
        ticket = ticket_of(request, claims)
        _check_may_update(claims)
        change = _parse(StatusChange, await _json(request))
        previous = tickets.set_status(ticket, change.status, claims.sub)
        return JSONResponse({"ticket": ticket.detail(), "previous_status": previous})

    async def add_comment(request: Request) -> Response:
        claims = await caller(request)
        ticket = ticket_of(request, claims)
        _check_may_update(claims)
        comment = _parse(NewComment, await _json(request))
        added = tickets.add_comment(ticket, claims.sub, claims.name, comment.body)
        return JSONResponse({"ticket": ticket.detail(), "comment": added.to_json()}, status_code=201)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await verifier.aclose()

    app = Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/tickets", list_tickets),
            Route("/tickets/{ticket_id}", get_ticket),
            Route("/tickets/{ticket_id}/status", change_status, methods=["POST"]),
            Route("/tickets/{ticket_id}/comments", add_comment, methods=["POST"]),
        ],
        exception_handlers={_Refused: _refused},
        lifespan=lifespan,
    )
    app.state.tickets = tickets
    return app


def _check_may_update(claims: HostClaims) -> None:
    allowed = (
        "ticket:update" in claims.permissions
        if claims.permissions is not None
        else claims.role in UPDATE_ROLES
    )
    if not allowed:
        raise _Refused(403, "forbidden", "This user may not change tickets.")


async def _json(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        raise _Refused(400, "invalid_json", "The body must be a JSON object.") from None


def _parse(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'body'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False)
        )
        raise _Refused(422, "invalid", problems) from None


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, _Refused)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(
        {"error": {"code": exc.code, "message": exc.message}}, status_code=exc.status, headers=headers
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vernis_helpdesk.api",
        description="The example helpdesk API (in memory) that the helpdesk toolkit calls.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    args = parser.parse_args(argv)
    secret = os.environ.get("VERNIS_JWT_SECRET")
    public_key = os.environ.get("VERNIS_JWT_PUBLIC_KEY")
    if not (secret or public_key):
        print(
            "helpdesk api: set VERNIS_JWT_SECRET (the HS256 secret the host signs its tokens with) "
            "or VERNIS_JWT_PUBLIC_KEY (its PEM public key), as for `vernis serve`",
            file=sys.stderr,
        )
        return 2
    try:
        app = create_api(
            secret,
            public_key=public_key,
            issuer=os.environ.get("VERNIS_JWT_ISSUER"),
            audience=os.environ.get("VERNIS_JWT_AUDIENCE"),
        )
    except ConfigError as exc:
        print(f"helpdesk api: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=args.host, port=args.port, server_header=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
