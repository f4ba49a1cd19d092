"""Calling the host's API as the member: the token forwarded, every failure a `ToolFailure` the model can act on.

The host here is a small real HTTP server on loopback that answers each path with the status it names.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.helpdesk.support import Recorder
from tests.utils import free_port, run_server
from vernis.identity.members import MemberInfo
from vernis.tools import ToolContext, ToolFailure
from vernis_helpdesk.client import HelpdeskContext, call_api

TOKEN = "header.payload.signature-of-the-member"
MEMBER = MemberInfo(
    id=uuid.uuid4(),
    organization_id=uuid.uuid4(),
    external_id="agent-42",
    organization_external_id="acme-support",
    organization_name="Acme Support",
    organization_timezone="UTC",
    email=None,
    name="Alex",
    role="agent",
    removed=False,
)


@dataclass
class Host:
    url: str
    recorder: Recorder
    release: asyncio.Event


@pytest.fixture
async def host() -> AsyncIterator[Host]:
    release = asyncio.Event()

    async def status(request: Request) -> Response:
        code = int(request.path_params["code"])
        return JSONResponse({"error": {"code": "x", "message": f"the host says {code}"}}, status_code=code)

    async def slow(request: Request) -> Response:
        await release.wait()
        return JSONResponse({})

    async def text(request: Request) -> Response:
        return PlainTextResponse("<html>maintenance</html>")

    async def ok(request: Request) -> Response:
        return JSONResponse({"q": request.query_params.get("q"), "body": (await request.body()).decode()})

    app = Starlette(
        routes=[
            Route("/status/{code:int}", status, methods=["GET", "POST"]),
            Route("/slow", slow),
            Route("/text", text),
            Route("/ok", ok, methods=["GET", "POST"]),
        ]
    )
    recorder = Recorder(app)
    async with run_server(recorder) as server:
        try:
            yield Host(f"http://127.0.0.1:{server.config.port}", recorder, release)
        finally:
            release.set()


@pytest.fixture
async def ctx(host: Host) -> AsyncIterator[HelpdeskContext]:
    async with httpx.AsyncClient(base_url=host.url, timeout=0.3) as client:
        yield context(client)


def context(client: httpx.AsyncClient, token: str = TOKEN) -> HelpdeskContext:
    return ToolContext(
        member=MEMBER, permissions=frozenset(), conversation_id=uuid.uuid4(), resources=client, token=token
    )


async def failure(ctx: HelpdeskContext, path: str, method: str = "GET") -> ToolFailure:
    with pytest.raises(ToolFailure) as raised:
        await call_api(ctx, method, path)
    assert TOKEN not in f"{raised.value.message} {raised.value.hint}"
    return raised.value


async def test_forwards_the_member_token_and_returns_the_json(ctx: HelpdeskContext, host: Host) -> None:
    """Each call carries `Authorization: Bearer <the member's token>`, with the params and JSON body given."""
    assert await call_api(ctx, "GET", "/ok", params={"q": "vat"}) == {"q": "vat", "body": ""}
    assert await call_api(ctx, "POST", "/ok", json={"a": 1}) == {"q": None, "body": '{"a":1}'}
    assert host.recorder.seen == [("GET", "/ok", f"Bearer {TOKEN}"), ("POST", "/ok", f"Bearer {TOKEN}")]


async def test_without_a_member_token_nothing_is_sent(ctx: HelpdeskContext, host: Host) -> None:
    """A context without a token fails as forbidden before any request reaches the host."""
    with pytest.raises(ToolFailure) as raised:
        await call_api(context(ctx.resources, token=""), "GET", "/ok")
    assert raised.value.code == "forbidden"
    assert host.recorder.seen == []


@pytest.mark.parametrize(
    ("code", "expected", "retryable"),
    [
        (404, "not_found", False),
        (401, "forbidden", False),
        (403, "forbidden", False),
        (400, "invalid_arguments", False),
        (422, "invalid_arguments", False),
        (408, "unavailable", True),
        (429, "unavailable", True),
        (500, "unavailable", True),
        (503, "unavailable", True),
        (418, "upstream_error", False),
    ],
)
async def test_http_errors_become_tool_failures(
    ctx: HelpdeskContext, code: int, expected: str, retryable: bool
) -> None:
    """Each HTTP error maps to one failure code, retryable only when trying again can help."""
    found = await failure(ctx, f"/status/{code}", "POST")
    assert (found.code, found.retryable) == (expected, retryable)
    assert found.message


async def test_not_found_and_bad_input_carry_the_hosts_explanation(ctx: HelpdeskContext) -> None:
    """A 404 or 422 passes the host's own message on, and a 404 says how to find the right id."""
    missing = await failure(ctx, "/status/404")
    assert (missing.message, missing.hint) == (
        "the host says 404",
        "Use find_tickets to find the ticket's id.",
    )
    assert (await failure(ctx, "/status/422")).message == "the host says 422"
    assert "reload" in str((await failure(ctx, "/status/401")).hint)


async def test_a_slow_host_is_a_retryable_timeout(ctx: HelpdeskContext) -> None:
    """A host that does not answer within the client's timeout is `unavailable`, retryable."""
    found = await failure(ctx, "/slow")
    assert (found.code, found.retryable, found.message) == (
        "unavailable",
        True,
        "The helpdesk did not answer in time.",
    )


async def test_an_unreachable_host_is_retryable() -> None:
    """Nothing listening at the API's address is `unavailable`, retryable."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{free_port()}") as client:
        found = await failure(context(client), "/tickets")
    assert (found.code, found.retryable, found.message) == (
        "unavailable",
        True,
        "The helpdesk cannot be reached.",
    )


async def test_an_answer_that_is_not_json_is_unavailable(ctx: HelpdeskContext) -> None:
    """A 200 that is not JSON (a maintenance page) is `unavailable`, not a crash."""
    found = await failure(ctx, "/text")
    assert (found.code, found.retryable) == ("unavailable", True)
