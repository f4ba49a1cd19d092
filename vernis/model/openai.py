"""`OpenAIChatModel`: the `ChatModel` for any OpenAI-compatible chat-completions endpoint.

The official `openai.AsyncOpenAI` client does configuration, auth, the request and its retries
(429 honouring Retry-After, 5xx, connection errors: all before the first byte of the answer). The
answer itself is read as raw SSE bytes and parsed here with orjson: letting the client build a
pydantic chunk object per streamed chunk would make the adapter the bottleneck (SPEC §9). The
per-chunk path is `orjson.loads` and a few dict lookups.

Stream handling, on top of the `ChatModel` contract (`vernis.model.base`):
- tool-call deltas are assembled by `index` (id and name first, arguments in fragments); a call
  delivered whole in one chunk (Ollama), or delivered again under the same call id, is one call with
  its arguments once;
- the first `finish_reason` ends the answer: later chunks (a second finish chunk, OpenRouter) are
  ignored except for their usage, so nothing is doubled;
- an `{"error": ...}` object under HTTP 200 (or `finish_reason: "error"`) raises `LLMUnavailable`;
- `:` comment lines are ignored and do not count as progress for the stall timeout;
- a stream that stalls before the answer begins (no text or tool call yet) raises
  `LLMNotStarted`, retried like a 5xx; a stall after that is `LLMStalled` (the answer fails);
- reasoning text (`delta.reasoning_content` or `delta.reasoning`) becomes `ReasoningDelta`s;
- each `data:` line is one JSON chunk (no provider splits a chunk over several `data:` lines);
- the text of the chunks that came in one read of the stream is one `TextDelta` (reasoning: one
  `ReasoningDelta`): a model that outruns the server, or a burst after a network pause, costs one
  delta per read, not one per chunk.

Errors for the operator name the setting to check (`VERNIS_LLM_BASE_URL`, `_API_KEY`, `_MODEL`);
upstream details go to `LLMUnavailable.detail`, for logs only.
"""

from __future__ import annotations

import asyncio
import email.utils
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from typing import Any

import aiohttp
import httpx2
import openai
import orjson

from vernis.exceptions import (
    LLMError,
    LLMNotConfigured,
    LLMNotStarted,
    LLMStalled,
    LLMTruncated,
    LLMUnavailable,
)
from vernis.ids import random_hex, random_uuid
from vernis.model.base import ChatRequest, Finish, ModelEvent, ReasoningDelta, TextDelta, ToolCall, Usage

__all__ = ["OpenAIChatModel"]

# Local servers (Ollama, llama.cpp, vLLM) ignore the key, but the client insists on one.
PLACEHOLDER_API_KEY = "not-needed"
_NOTHING: tuple[ModelEvent, ...] = ()
_DETAIL_CHARS = 300
# Concurrent answers each hold an upstream connection; all of them are kept for reuse.
_LIMITS = httpx2.Limits(max_connections=2000, max_keepalive_connections=2000)
# The header with which the SDK's `with_streaming_response` asks for the response unread.
_RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"


class OpenAIChatModel:
    """Streams chat completions from `base_url` (`.../v1`); see the module docstring.

    `stall_timeout` bounds both the wait for the response headers and the silence between two
    chunks; `max_retries` is the client's retry budget before the first byte of the answer. One
    stream is iterated by one task (the stall timer cancels the task that started it).
    `on_fault` is told of every fault a stream raises, retried or not (the metrics count them).
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        stall_timeout: float,
        connect_timeout: float = 10,
        max_retries: int = 2,
        on_fault: Callable[[LLMError], None] | None = None,
    ) -> None:
        self.base_url = base_url
        self.stall_timeout = stall_timeout
        self._on_fault = on_fault
        # The client's default read timeout is 600 s: a stalled model would hold an answer open
        # for ten minutes.
        timeout = httpx2.Timeout(stall_timeout, connect=connect_timeout, pool=connect_timeout)
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or PLACEHOLDER_API_KEY,
            timeout=timeout,
            max_retries=max_retries,
            # aiohttp under the client: a streamed chunk costs one read, where the default transport
            # pauses and resumes the socket and enters a timeout scope per read, and every
            # concurrent answer keeps its connection open for the next one.
            http_client=openai.DefaultAioHttpClient(timeout=timeout, limits=_LIMITS),
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        try:
            async with self._send(request) as http:
                if http.headers.get("content-type", "").startswith("application/json"):
                    # A server that ignored `stream: true` (or sent a JSON error under HTTP 200).
                    for event in await self._read_whole(http):
                        yield event
                    return
                assembler = _Assembler()
                watch = _StallWatch(self.stall_timeout)
                pending = b""
                # Whether the answer has begun (an event went out): a stall before it is retried
                # like a 5xx (SPEC §9); after it, it fails the answer.
                started = False
                try:
                    async with aclosing(_reads(http)) as reads:
                        while not assembler.done:
                            watch.waiting = True
                            try:
                                data = await anext(reads)
                            except StopAsyncIteration:
                                break
                            except asyncio.CancelledError:
                                if not watch.expired():
                                    raise
                                if assembler.finish_reason is not None:
                                    break  # the answer is complete; the provider just kept the stream open
                                if not started:
                                    raise _not_started("chunk", self.stall_timeout) from None
                                raise LLMStalled(detail=f"no chunk for {self.stall_timeout:g} s") from None
                            except httpx2.TimeoutException:
                                if assembler.finish_reason is not None:
                                    break
                                if not started:
                                    raise _not_started("byte", self.stall_timeout) from None
                                raise LLMStalled(detail=f"no byte for {self.stall_timeout:g} s") from None
                            except (httpx2.TransportError, ssl.SSLError) as exc:
                                if assembler.finish_reason is not None:
                                    break
                                raise LLMUnavailable(
                                    "The connection to the language model was cut mid-answer.",
                                    detail=f"{type(exc).__name__}: {exc}"[:_DETAIL_CHARS],
                                ) from exc
                            finally:
                                watch.waiting = False
                            lines = (pending + data).split(b"\n")
                            pending = lines.pop()
                            events, error = _read_events(assembler, lines, watch)
                            if events:
                                started = True
                                for event in events:
                                    yield event
                            if error is not None:
                                raise error
                finally:
                    watch.close()
                if pending[:5] == b"data:" and not assembler.done:  # a last line without its newline
                    for event in assembler.feed(pending[5:]):
                        yield event
                for event in assembler.finish():
                    yield event
        except openai.APIError as exc:
            error = _request_error(exc)
            self._fault(error)
            raise error from exc
        except LLMError as exc:
            self._fault(exc)
            raise

    def _fault(self, error: LLMError) -> None:
        if self._on_fault is not None:
            self._on_fault(error)

    @asynccontextmanager
    async def _send(self, request: ChatRequest) -> AsyncIterator[httpx2.Response]:
        """POST the request through the client (its auth, headers and retries), body unread.

        This is what `chat.completions.with_streaming_response.create()` does, less the
        transformation of the parameters into the SDK's typed shapes, which walks every tool schema
        of the request on every call, for nothing, since ours are plain JSON already. The body is
        encoded with orjson.
        """
        response = await self._client.post(
            "/chat/completions",
            cast_to=httpx2.Response,
            content=_body(request),
            options={
                "headers": {_RAW_RESPONSE_HEADER: "stream", "Content-Type": "application/json"},
                # What the client would make itself (its retries reuse it), without its own
                # `uuid4()`: one system call less per request (`vernis.ids`).
                "idempotency_key": f"stainless-python-retry-{random_uuid()}",
            },
        )
        try:
            yield response  # the raw response, its body unread (the raw-response header)
        finally:
            await response.aclose()

    async def _read_whole(self, http: httpx2.Response) -> tuple[ModelEvent, ...]:
        try:
            async with asyncio.timeout(self.stall_timeout):
                body = await http.aread()
        except (TimeoutError, httpx2.TimeoutException):
            raise LLMStalled(detail="no complete body within the stall timeout") from None
        except httpx2.TransportError as exc:
            raise LLMUnavailable(detail=f"{type(exc).__name__}: {exc}"[:_DETAIL_CHARS]) from exc
        return _Assembler().feed_completion(body)


async def _reads(http: httpx2.Response) -> AsyncGenerator[bytes, None]:
    """The response body as it arrives. Under the aiohttp transport, straight from aiohttp's reader:
    a paced chunk then costs one read, not a stack of six async generators (httpx2's decoding and
    accounting, the transport's adapter); aiohttp's errors are given the httpx2 types the caller
    handles. Any other transport, or a compressed body, goes through `aiter_bytes()`."""
    aiohttp_response = getattr(getattr(http.stream, "_stream", None), "_aiohttp_response", None)
    if aiohttp_response is None or http.headers.get("content-encoding", "identity") != "identity":
        async for data in http.aiter_bytes():
            yield data
        return
    content = aiohttp_response.content
    while True:
        try:
            data = await content.readany()
        except aiohttp.ServerTimeoutError as exc:
            raise httpx2.ReadTimeout(str(exc)) from exc
        except aiohttp.ClientError as exc:
            raise httpx2.ReadError(str(exc) or type(exc).__name__) from exc
        if not data:
            return
        yield data


# A merged delta takes no more chunks once it holds this many characters (one longer chunk stays
# whole): frames stay small enough that a slow socket's queue, bounded in frames
# (`vernis.ws.connection.SEND_QUEUE_FRAMES`), stays bounded in memory as it was with a frame a chunk.
MERGED_CHARS = 512


def _read_events(
    assembler: _Assembler, lines: list[bytes], watch: _StallWatch
) -> tuple[list[ModelEvent], LLMError | None]:
    """The events of one read's lines, each run of text (or reasoning) deltas merged into one, up to
    about `MERGED_CHARS`: chunks that came together are not shown apart, and a delta costs the rest
    of the answer's path (the hub, the frame, the socket) once, not once per chunk. An error in the
    stream ends the events and is returned beside them: what came before it still goes out first."""
    out: list[ModelEvent] = []
    run: list[str] = []
    size = 0  # the characters in `run`
    kind: type[TextDelta] | type[ReasoningDelta] = TextDelta
    error = None
    try:
        for line in lines:
            if line[:5] != b"data:":
                continue
            watch.progress()
            for event in assembler.feed(line[5:]):
                if type(event) is TextDelta or type(event) is ReasoningDelta:
                    if run and (type(event) is not kind or size >= MERGED_CHARS):
                        out.append(_joined(kind, run))
                        run, size = [], 0
                    kind = type(event)
                    run.append(event.content)
                    size += len(event.content)
                    continue
                if run:
                    out.append(_joined(kind, run))
                    run, size = [], 0
                out.append(event)
    except LLMError as exc:
        error = exc
    if run:
        out.append(_joined(kind, run))
    return out, error


def _joined(kind: type[TextDelta] | type[ReasoningDelta], run: list[str]) -> ModelEvent:
    return kind(run[0] if len(run) == 1 else "".join(run))


class _StallWatch:
    """Cancels the reading task when no `data:` line came for `timeout` seconds while it waits.

    Not `asyncio.timeout`: one spanning the stream would also fire while the generator is suspended
    at a `yield` and cancel the consumer (in its own await) instead of the read; one per read would
    arm and cancel a timer for every chunk. This arms one timer per stall period, and a chunk only
    moves `deadline`. Time the consumer spends between two reads does not count against the
    provider: an expiry found outside a read restarts the period.
    """

    __slots__ = ("_cancelling", "_expired", "_handle", "_loop", "_task", "_timeout", "deadline", "waiting")

    def __init__(self, timeout: float) -> None:
        task = asyncio.current_task()
        assert task is not None, "a stream is read inside a task"
        self._loop = asyncio.get_running_loop()
        self._task = task
        self._cancelling = task.cancelling()
        self._timeout = timeout
        self._expired = False
        self.waiting = False
        self.deadline = self._loop.time() + timeout
        self._handle = self._loop.call_at(self.deadline, self._check)

    def progress(self) -> None:
        self.deadline = self._loop.time() + self._timeout

    def _check(self) -> None:
        now = self._loop.time()
        if now >= self.deadline:
            if self.waiting:
                self._expired = True
                self._task.cancel()
                return
            self.deadline = now + self._timeout
        self._handle = self._loop.call_at(self.deadline, self._check)

    def expired(self) -> bool:
        """After a CancelledError in the read: True when this watch caused it (and no one else did)."""
        if not self._expired:
            return False
        self._expired = False
        return self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        self._handle.cancel()


def _body(request: ChatRequest) -> bytes:
    """The request's JSON, the tool definitions first: a provider caches a prompt from its start,
    tools then messages, so the stable part leads the bytes too. Definitions encoded already are
    spliced in, not encoded again."""
    params = _params(request)
    tools = params.pop("tools", None)
    if tools is None:
        return orjson.dumps(params)
    tools_json = request.tools_json if request.tools_json is not None else orjson.dumps(tools)
    return b'{"tools":' + tools_json + b"," + orjson.dumps(params)[1:]


def _params(request: ChatRequest) -> dict[str, Any]:
    params: dict[str, Any] = {
        "model": request.model,
        "messages": list(request.messages),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        params["tools"] = list(request.tools)
    if request.max_tokens is not None:
        params["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.user is not None:
        params["user"] = request.user
    return params


class _Call:
    __slots__ = ("call_id", "name", "parts")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.name = ""
        self.parts: list[str] = []


class _Assembler:
    """Turns the JSON chunks of one stream into `ModelEvent`s (sans I/O).

    `feed()` takes the payload of one `data:` line and returns the deltas to yield now; `finish()`,
    once the stream has ended, returns the tool calls, the usage and the `Finish`, or raises
    `LLMTruncated` when no `finish_reason` came.
    """

    __slots__ = ("_by_id", "_by_index", "_calls", "done", "finish_reason", "model", "usage")

    def __init__(self) -> None:
        self.done = False  # `[DONE]` seen
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None
        self.model: str | None = None  # read from the chunk that finishes (traces)
        self._calls: list[_Call] = []
        self._by_index: dict[Any, _Call] = {}
        self._by_id: dict[str, _Call] = {}

    def feed(self, payload: bytes) -> tuple[ModelEvent, ...]:
        if payload[:1] == b" ":
            payload = payload[1:]
        if payload[:6] == b"[DONE]":
            self.done = True
            return _NOTHING
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise LLMUnavailable(detail=f"malformed chunk: {payload[:100]!r}") from None
        if type(chunk) is not dict:
            raise LLMUnavailable(detail=f"malformed chunk: {payload[:100]!r}")
        usage = chunk.get("usage")
        if usage:
            self.usage = usage
        if self.finish_reason is not None:
            return _NOTHING
        error = chunk.get("error")
        if error:
            raise _stream_error(error)
        choices = chunk.get("choices")
        if not choices:
            return _NOTHING
        choice = choices[0]
        delta = choice.get("delta")
        events = _NOTHING
        if delta:
            content = delta.get("content")
            if content and type(content) is str:
                events = (TextDelta(content),)
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and type(reasoning) is str:
                events = (ReasoningDelta(reasoning), *events)
            tool_calls = delta.get("tool_calls")
            if tool_calls:
                self._add_tool_calls(tool_calls)
        finish_reason = choice.get("finish_reason")
        if finish_reason:
            if finish_reason == "error":
                raise _stream_error(chunk.get("error") or {})
            self.finish_reason = finish_reason
            self.model = chunk["model"] if type(chunk.get("model")) is str else None
        return events

    def _add_tool_calls(self, deltas: list[Any]) -> None:
        for position, delta in enumerate(deltas):
            call_id = delta.get("id")
            function = delta.get("function") or {}
            arguments = function.get("arguments")
            if arguments is not None and type(arguments) is not str:
                arguments = orjson.dumps(arguments).decode()  # a few servers send an object
            call = self._by_id.get(call_id) if call_id else None
            if call is not None:
                # The same call again: whole (a repeat) or cumulative arguments replace, a fragment
                # (providers that put the id on every delta) appends.
                if arguments:
                    sofar = "".join(call.parts)
                    if sofar and arguments.startswith(sofar):
                        call.parts = [arguments]
                    else:
                        call.parts.append(arguments)
                continue
            index = delta.get("index", position)
            call = self._by_index.get(index)
            if call is None or (call_id and call.call_id and call.call_id != call_id):
                # A new call; llama.cpp and some Ollama versions reuse index 0 for every call.
                call = _Call()
                self._calls.append(call)
                self._by_index[index] = call
            if call_id:
                call.call_id = call_id
                self._by_id[call_id] = call
            name = function.get("name")
            if name and not call.name:
                call.name = name
            if arguments:
                call.parts.append(arguments)

    def finish(self) -> tuple[ModelEvent, ...]:
        if self.finish_reason is None:
            raise LLMTruncated(detail="the stream ended without a finish_reason")
        events: list[ModelEvent] = [
            ToolCall(
                call_id=call.call_id or f"call_{random_hex()[:24]}",
                name=call.name,
                arguments="".join(call.parts) or "{}",
            )
            for call in self._calls
        ]
        if self.usage:
            events.append(
                Usage(
                    prompt_tokens=_count(self.usage.get("prompt_tokens")),
                    completion_tokens=_count(self.usage.get("completion_tokens")),
                    cached_tokens=_cached_tokens(self.usage),
                )
            )
        events.append(Finish(self.finish_reason, self.model))
        return tuple(events)

    def feed_completion(self, body: bytes) -> tuple[ModelEvent, ...]:
        """Events of a whole (non-streamed) `chat.completion` body."""
        try:
            completion = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise LLMUnavailable(detail=f"not JSON: {body[:100]!r}") from None
        if type(completion) is not dict:
            raise LLMUnavailable(detail=f"not a completion: {body[:100]!r}")
        if completion.get("error"):
            raise _stream_error(completion["error"])
        choices = completion.get("choices") or [{}]
        message = choices[0].get("message") or {}
        self.usage = completion.get("usage")
        self.model = completion["model"] if type(completion.get("model")) is str else None
        events: list[ModelEvent] = []
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning and type(reasoning) is str:
            events.append(ReasoningDelta(reasoning))
        if message.get("content") and type(message["content"]) is str:
            events.append(TextDelta(message["content"]))
        if message.get("tool_calls"):
            self._add_tool_calls(message["tool_calls"])
        self.finish_reason = choices[0].get("finish_reason")
        return (*events, *self.finish())


def _count(value: object) -> int:
    """A token count from a provider's usage: a non-negative int, 0 for anything else."""
    if type(value) is int:
        return max(value, 0)
    if type(value) is float:
        return max(int(value), 0)
    return 0


def _cached_tokens(usage: Mapping[str, Any]) -> int:
    """The prompt tokens read from the provider's cache: OpenAI's (and vLLM's, OpenRouter's)
    `prompt_tokens_details.cached_tokens`, or DeepSeek's `prompt_cache_hit_tokens`; 0 when the usage
    says neither (many providers send no details, or `null`)."""
    details = usage.get("prompt_tokens_details")
    if isinstance(details, Mapping) and details.get("cached_tokens") is not None:
        return _count(details.get("cached_tokens"))
    return _count(usage.get("prompt_cache_hit_tokens"))


def _stream_error(error: object) -> LLMUnavailable:
    detail = orjson.dumps(error).decode() if isinstance(error, dict | list) else str(error)
    return LLMUnavailable(
        "The language model failed mid-answer; try again shortly.", detail=f"error in stream: {detail}"[:300]
    )


def _not_started(what: str, seconds: float) -> LLMNotStarted:
    """A stream that stalled before the answer began: retryable, as a 5xx is."""
    return LLMNotStarted(detail=f"no first {what} for {seconds:g} s")


def _request_error(exc: openai.APIError) -> LLMError:
    """Map the client's failure to send the request (after its retries) to the operator's error."""
    if isinstance(exc, openai.APIStatusError):
        return _status_error(exc)
    cause = exc.__cause__
    detail = f"{type(cause or exc).__name__}: {cause or exc}"[:_DETAIL_CHARS]
    if isinstance(
        cause, httpx2.ConnectError | httpx2.ConnectTimeout | httpx2.UnsupportedProtocol | ssl.SSLError
    ):
        return LLMNotConfigured(
            "Cannot connect to the language model endpoint; check VERNIS_LLM_BASE_URL "
            "(and that the model server is running)."
        )
    if isinstance(cause, httpx2.TimeoutException):
        return LLMStalled("The language model did not start answering in time.", detail=detail)
    return LLMUnavailable("The connection to the language model failed; try again shortly.", detail=detail)


def _status_error(exc: openai.APIStatusError) -> LLMUnavailable:
    status = exc.status_code
    detail = f"HTTP {status}: {exc.message}"[:_DETAIL_CHARS]
    if status == 429:
        return LLMUnavailable(
            "The language model is rate-limited right now; try again shortly.",
            retry_after=_retry_after(exc.response.headers),
            detail=detail,
        )
    if status >= 500 or status in (408, 409):
        return LLMUnavailable(retry_after=_retry_after(exc.response.headers), detail=detail)
    if status in (401, 403):
        message = f"The language model refused the credentials (HTTP {status}); check VERNIS_LLM_API_KEY."
    elif status == 404:
        message = (
            "The language model endpoint does not know this model (HTTP 404); "
            "check VERNIS_LLM_MODEL and VERNIS_LLM_BASE_URL."
        )
    else:
        message = (
            f"The language model rejected the request (HTTP {status}); check VERNIS_LLM_MODEL "
            "(the model may not support tools or this context length)."
        )
    return LLMUnavailable(message, retryable=False, detail=detail)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds or an HTTP date), if present."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            pass
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None
    return None
