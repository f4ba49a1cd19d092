"""An OpenAI-compatible chat-completions server that answers from a script, for tests and the demo.

    model = ScriptedModel()
    model.add(Reply(fault=Fault.http(500)), times=2)        # fails twice ...
    model.add(Reply("Hello there"), match="hello")          # ... then answers a message with "hello"
    app = model.app                                         # POST /v1/chat/completions, GET /v1/models

Each request is answered by the first rule that matches it and is not used up (rules are consumed
once unless `times=` says otherwise, `times=None` never), else by the first scenario that answers
(`vernis.model.scripted.scenarios`). `requests` holds every request body received, `exchanges` the same
with what happened to it (`disconnected` is set when the client hung up before the end).

Streams are written exactly as OpenAI writes them (`vernis.model.scripted.script.render_stream`), so the
real `openai` client and Vernis' own adapter parse them as they would a provider's. The app has no
state outside its `ScriptedModel` and can be mounted under any prefix (`Mount("/scripted", app)`
makes the base URL `http://HOST:PORT/scripted/v1`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from vernis.model.scripted.scenarios import (
    SCRIPTED_CHAT_MODEL,
    SCRIPTED_TITLE_MODEL,
    Scenario,
    default_scenarios,
    last_user_text,
)
from vernis.model.scripted.script import (
    COMMENT_FRAME,
    Fault,
    Quirk,
    Reply,
    estimate_prompt_tokens,
    render_completion,
    render_stream,
)

__all__ = ["Exchange", "Match", "Rule", "ScriptedModel", "create_app"]

# A predicate over the request body, or a substring of the last user message.
Match = Callable[[Mapping[str, Any]], bool] | str | None

_STATUS_ERRORS = {
    400: ("invalid_request_error", "The request was invalid."),
    401: ("invalid_api_key", "Incorrect API key provided."),
    403: ("permission_denied", "You are not allowed to use this model."),
    404: ("model_not_found", "The model does not exist or you do not have access to it."),
    429: ("rate_limit_exceeded", "Rate limit reached; please try again later."),
}


@dataclass(eq=False)
class Rule:
    reply: Reply
    match: Match = None
    # How many requests this rule answers; None: any number.
    times: int | None = 1
    hits: int = 0

    @property
    def used_up(self) -> bool:
        return self.times is not None and self.hits >= self.times

    def matches(self, body: Mapping[str, Any]) -> bool:
        if self.match is None:
            return True
        if isinstance(self.match, str):
            return self.match.casefold() in last_user_text(body).casefold()
        return self.match(body)


@dataclass(eq=False)
class Exchange:
    """One request received and what the server did with it."""

    body: dict[str, Any]
    reply: Reply
    # The request's bytes as received (what a provider's prompt cache compares).
    raw: bytes = b""
    # The whole response was written (a cut, a stall or a client disconnect leave it False).
    completed: bool = False
    # The client hung up before the response was complete.
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)


class ScriptedModel:
    def __init__(
        self,
        *,
        chat_model: str = SCRIPTED_CHAT_MODEL,
        title_model: str = SCRIPTED_TITLE_MODEL,
        scenarios: list[Scenario] | None = None,
        chunk_delay: float = 0.0,
        prefix_cache: bool = False,
    ) -> None:
        self.chat_model = chat_model
        self.title_model = title_model
        self.scenarios: list[Scenario] = default_scenarios(title_model) if scenarios is None else scenarios
        # Seconds between streamed frames for replies that do not set their own (the demo's pace).
        self.chunk_delay = chunk_delay
        # Like a provider's prompt cache: a reply that does not set `cached_tokens` reports the
        # share of its prompt that repeats the previous request of the same model byte for byte.
        self.prefix_cache = prefix_cache
        self._last_raw: dict[str, bytes] = {}
        self.rules: list[Rule] = []
        self.requests: list[dict[str, Any]] = []
        self.exchanges: list[Exchange] = []
        self._completions = 0

    def add(self, reply: Reply | str, *, match: Match = None, times: int | None = 1) -> Rule:
        """Answer the next `times` requests that `match` with `reply` (a string is a plain text reply)."""
        rule = Rule(Reply(reply) if isinstance(reply, str) else reply, match, times)
        self.rules.append(rule)
        return rule

    def reply_for(self, body: Mapping[str, Any]) -> Reply:
        """Pick the answer to `body`, using up one hit of the rule that gives it."""
        for rule in self.rules:
            if not rule.used_up and rule.matches(body):
                rule.hits += 1
                return rule.reply
        for scenario in self.scenarios:
            reply = scenario(body)
            if reply is not None:
                return reply
        raise LookupError("no rule or scenario answers this request")

    def _cached(self, body: Mapping[str, Any], raw: bytes) -> int:
        """The prompt tokens a prefix cache would hold for `raw`: its share in common with the
        previous request of its model, of the estimated prompt tokens (in blocks of 16)."""
        model = str(body.get("model"))
        previous, self._last_raw[model] = self._last_raw.get(model), raw
        if previous is None or not raw:
            return 0
        prompt = estimate_prompt_tokens(body)
        return int(prompt * _common_prefix(previous, raw) / len(raw)) // 16 * 16

    @cached_property
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    async def _models(self, request: Request) -> Response:
        created = int(time.time())
        data = [
            {"id": name, "object": "model", "created": created, "owned_by": "vernis-scripted"}
            for name in dict.fromkeys((self.chat_model, self.title_model))
        ]
        return _json({"object": "list", "data": data})

    async def _chat_completions(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _error(400, "We could not parse the JSON body of your request.")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' is a required property.", param="messages")
        self.requests.append(body)
        reply = self.reply_for(body)
        if reply.chunk_delay is None:
            reply = replace(reply, chunk_delay=self.chunk_delay)
        if self.prefix_cache and reply.cached_tokens is None:
            reply = replace(reply, cached_tokens=self._cached(body, raw))
        exchange = Exchange(body, reply, raw)
        self.exchanges.append(exchange)

        fault = reply.fault or Fault()
        if fault.status is not None:
            exchange.completed = True
            headers = {} if fault.retry_after is None else {"retry-after": f"{fault.retry_after:g}"}
            return _error(fault.status, headers=headers)

        self._completions += 1
        completion_id = f"chatcmpl-scripted{self._completions:08d}"
        model = body["model"] if isinstance(body.get("model"), str) else self.chat_model
        if not body.get("stream") or Quirk.IGNORES_STREAM in reply.quirks:
            exchange.completed = True
            completion = render_completion(
                reply, body, completion_id=completion_id, created=int(time.time()), model=model
            )
            return _json(completion, headers={"x-request-id": completion_id})
        frames = render_stream(
            reply, body, completion_id=completion_id, created=int(time.time()), model=model
        )
        return _EventStream(frames, exchange, fault, headers={"x-request-id": completion_id})


def _common_prefix(a: bytes, b: bytes) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:  # a binary search: log2(n) slice comparisons, each done in C
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def create_app(model: ScriptedModel | None = None) -> Starlette:
    """The scripted chat-completions app (a fresh `ScriptedModel` by default), ready to serve or mount."""
    return (model or ScriptedModel()).app


def _json(content: object, status_code: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status_code, headers, media_type="application/json")


def _error(
    status: int,
    message: str | None = None,
    *,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    kind, default = _STATUS_ERRORS.get(
        status, ("server_error", "The server had an error processing your request.")
    )
    error = {"message": message or default, "type": kind, "param": param, "code": kind}
    return _json({"error": error}, status, headers)


class _EventStream(Response):
    """Writes SSE frames with the fault's timing, and notices when the client hangs up."""

    media_type = "text/event-stream"

    def __init__(
        self, frames: list[bytes], exchange: Exchange, fault: Fault, headers: Mapping[str, str]
    ) -> None:
        self.frames = frames
        self.exchange = exchange
        self.fault = fault
        self.status_code = 200
        self.background = None
        self.init_headers({**headers, "cache-control": "no-cache"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        writer = asyncio.ensure_future(self._write(send))
        listener = asyncio.ensure_future(self._listen(receive))
        try:
            await asyncio.wait((writer, listener), return_when=asyncio.FIRST_COMPLETED)
        finally:
            listener.cancel()
            if not writer.done():
                writer.cancel()
            await asyncio.wait((writer, listener))
        if not writer.cancelled():
            writer.result()  # re-raise a bug in the writer rather than hide it

    async def _listen(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.exchange.completed:
            self.exchange.disconnected.set()

    async def _write(self, send: Send) -> None:
        fault, reply = self.fault, self.exchange.reply
        delay, per_write = reply.chunk_delay or 0.0, max(1, reply.frames_per_write)
        batch: list[bytes] = []

        async def flush() -> None:
            if batch:
                await _body(send, b"".join(batch))
                batch.clear()

        sent = 0
        for frame in self.frames:
            if frame.startswith(b"data:"):
                if fault.cut_after is not None and sent >= fault.cut_after:
                    await flush()
                    # Returning with the body unfinished makes the server drop the connection.
                    return
                if fault.error_after is not None and sent >= fault.error_after:
                    error = {
                        "message": "The upstream provider disconnected.",
                        "type": "server_error",
                        "code": 502,
                    }
                    batch.append(b"data: " + orjson.dumps({"error": error}) + b"\n\n")
                    break
                if fault.stall_after is not None and sent == fault.stall_after:
                    await flush()
                    await self._stall(send)
                if delay and sent:
                    await flush()
                    await asyncio.sleep(delay)
                sent += 1
            batch.append(frame)
            if len(batch) >= per_write:
                await flush()
        await flush()
        self.exchange.completed = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stall(self, send: Send) -> None:
        fault = self.fault
        if fault.keepalive is None:
            await asyncio.sleep(fault.stall_for)
            return
        deadline = asyncio.get_running_loop().time() + fault.stall_for
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            await asyncio.sleep(min(fault.keepalive, left))
            await _body(send, COMMENT_FRAME)


async def _body(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})
