"""The AG-UI routes (SPEC §20), authenticated like the rest of the API (`Authorization: Bearer`),
readable cross-origin by the origins of `VERNIS_ALLOWED_ORIGINS` (no cookies):

- `POST /api/agui/run`: a `RunAgentInput`; the run's events as SSE (`vernis.agui`). Refusals come
  before the stream, as `{"error": {code, message}}`: 401 no or bad token, 422 not a
  `RunAgentInput`, 400 a `threadId` that is not a UUID or nothing to run, 404 another member's
  thread or an unknown interrupt, 409 `response_in_progress`, 429 `rate_limited`/`quota_exceeded`.
- `POST /api/agui/connect` {threadId} (`Last-Event-ID`: the seq of the last event the client has):
  the thread as a run, its history or what was missed, then the live rest (`vernis.agui.connect`).
- `POST /api/agui/stop` {threadId}: stop the thread's answer (here or on whichever instance runs it).
- `GET /api/agui/info`: what the agent is and can do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any
from uuid import UUID, uuid4

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from vernis.agui.connect import open_connection
from vernis.agui.input import BadInput, parse_run_input
from vernis.agui.run import start_run
from vernis.exceptions import (
    ClientError,
    Forbidden,
    NotFound,
    RateLimited,
    ResponseInProgress,
    Unavailable,
)
from vernis.identity import Identity
from vernis.runtime import Services
from vernis.web.api import NO_STORE, allowed_origin, authenticated, error_response
from vernis.web.sse import EventStream, WriteNow

__all__ = ["agui_routes"]

PREFLIGHT = {
    "Access-Control-Allow-Methods": "GET, POST",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, Last-Event-ID",
    "Access-Control-Max-Age": "600",
}
# SSE through proxies: no buffering, no caching.
SSE_HEADERS = {"Cache-Control": "no-cache, no-store", "X-Accel-Buffering": "no"}
# A run carries the client's whole history and its page context (bounded after parsing).
MAX_BODY_BYTES = 4 << 20

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def _status(exc: ClientError) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, ResponseInProgress):
        return 409
    if isinstance(exc, RateLimited):
        return 429
    if isinstance(exc, Forbidden):
        return 403
    if isinstance(exc, Unavailable):
        return 503
    return 400


def _cors(handler: Handler) -> Handler:
    """Answer the preflight, and add CORS headers for an allowed origin (never credentials)."""

    async def endpoint(request: Request) -> Response:
        origin = allowed_origin(request)
        cors = (
            {"Vary": "Origin"}
            if origin is None
            else {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}
        )
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=cors if origin is None else cors | PREFLIGHT)
        response = await handler(request)
        response.headers.update(cors)
        return response

    return endpoint


async def _body(request: Request) -> bytes | Response:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return error_response(413, "invalid_message", "The body is larger than 4 MiB.")
    return body


async def run(request: Request) -> Response:
    services: Services = request.state.services
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    body = await _body(request)
    if isinstance(body, Response):
        return body
    try:
        _, run_request = parse_run_input(body)
    except BadInput as exc:
        return error_response(exc.status, exc.code, exc.message)
    try:
        agui_run = await start_run(services, request.state.agui, identity, run_request)
    except ClientError as exc:
        return error_response(_status(exc), exc.code, exc.public_message)
    return _event_stream(agui_run.stream(), agui_run.close, agui_run.write_directly)


def _event_stream(
    events: AsyncIterator[str], close: Callable[[], None], direct: Callable[[WriteNow], None]
) -> StreamingResponse:
    """A run's or a connection's events as server-sent events (`direct`: given the server's writer
    of body chunks, `vernis.web.sse`); `close` runs after the response, also when the client left
    before the stream started."""
    return EventStream(events, headers=SSE_HEADERS, close=close, direct=direct)


async def connect(request: Request) -> Response:
    services: Services = request.state.services
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    body = await _body(request)
    if isinstance(body, Response):
        return body
    try:
        data = orjson.loads(body)
        thread_id = UUID(str(data["threadId"]))
        run_id = str(data.get("runId") or uuid4())
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return error_response(400, "invalid_message", "The body must be {threadId: <conversation id>}.")
    last_event_id = request.headers.get("last-event-id")
    if last_event_id is not None and not last_event_id.isdigit():
        return error_response(
            400, "invalid_message", "Last-Event-ID must be the id of an event of this thread."
        )
    try:
        joined = await open_connection(
            services,
            identity,
            thread_id,
            run_id,
            int(last_event_id) if last_event_id is not None else None,
            versioned="protocolVersion" in data,
        )
    except ClientError as exc:
        return error_response(_status(exc), exc.code, exc.public_message)
    return _event_stream(joined.stream(), joined.close, joined.write_directly)


async def stop(request: Request) -> Response:
    services: Services = request.state.services
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    thread = await _thread(request, identity)
    if isinstance(thread, Response):
        return thread
    if not services.answers.stop(thread):
        await services.hub.request_stop(thread)
    return Response(status_code=204, headers=NO_STORE)


async def _thread(request: Request, identity: Identity) -> UUID | Response:
    """The member's conversation named by the body's `threadId`, or the error answer."""
    services: Services = request.state.services
    body = await _body(request)
    if isinstance(body, Response):
        return body
    try:
        data = orjson.loads(body)
        thread_id = UUID(str(data["threadId"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return error_response(400, "invalid_message", "The body must be {threadId: <conversation id>}.")
    member = identity.member
    conversation = await services.store.get_conversation(thread_id, member.id, member.organization_id)
    if conversation is None:
        return error_response(404, "not_found", "No such thread.")
    return (await services.store.latest_rollover(conversation, member.id, member.organization_id)).id


async def info(request: Request) -> Response:
    services: Services = request.state.services
    identity = await authenticated(request)
    if isinstance(identity, Response):
        return identity
    return JSONResponse(
        {
            "name": services.catalog.assistant_name,
            "protocolVersion": "1.0",
            "capabilities": {
                "tools": True,
                "clientTools": True,
                "approvalsAsInterrupts": True,
                "questionsAsInterrupts": True,
                "reasoning": True,
                "resumable": True,
            },
        },
        headers=NO_STORE,
    )


def agui_routes() -> list[BaseRoute]:
    return [
        Route("/api/agui/run", _cors(run), methods=["POST", "OPTIONS"]),
        Route("/api/agui/connect", _cors(connect), methods=["POST", "OPTIONS"]),
        Route("/api/agui/stop", _cors(stop), methods=["POST", "OPTIONS"]),
        Route("/api/agui/info", _cors(info), methods=["GET", "OPTIONS"]),
    ]
