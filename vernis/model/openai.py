"""`OpenAIChatModel`: the `ChatModel` for any OpenAI-compatible chat-completions endpoint.

The official `openai.AsyncOpenAI` client does configuration, auth, the request and its retries
(429 honouring Retry-After, 5xx, connection errors: all before the first byte of the answer). The
answer itself is read as raw SSE bytes and parsed here with orjson: letting the client build a
pydantic chunk object per streamed chunk would make the adapter the bottleneck (SPEC §9). The
per-chunk path is `orjson.loads` and a few dict lookups.

Stream handling, on top of the `ChatModel` contract (`vernis.model.base`), the chunks themselves
being turned into events by `vernis.model.chunks` (tool calls assembled, the first finish, errors
in the stream, reasoning, the deltas of one read merged):
- `:` comment lines are ignored and do not count as progress for the stall timeout;
- a stream that stalls before the answer begins (no text or tool call yet) raises
  `LLMNotStarted`, retried like a 5xx; a stall after that is `LLMStalled` (the answer fails);
- each `data:` line is one JSON chunk (no provider splits a chunk over several `data:` lines).

Errors for the operator name the setting to check (`VERNIS_LLM_BASE_URL`, `_API_KEY`, `_MODEL`);
upstream details go to `LLMUnavailable.detail`, for logs only.
"""

from __future__ import annotations

import asyncio
import email.utils
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
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
    LLMUnavailable,
)
from vernis.ids import random_uuid
from vernis.model.base import ChatRequest, ModelEvent
from vernis.model.chunks import Assembler

__all__ = ["OpenAIChatModel"]

# Local servers (Ollama, llama.cpp, vLLM) ignore the key, but the client insists on one.
PLACEHOLDER_API_KEY = "not-needed"
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
                assembler = Assembler()
                watch = _StallWatch(self.stall_timeout)
                pending = b""
                # Whether the answer has begun (an event went out): a stall before it is retried
                # like a 5xx (SPEC §9); after it, it fails the answer.
                started = False
                read = _reader(http)
                try:
                    while not assembler.done:
                        watch.waiting = True
                        try:
                            data = await read()
                            if not data:
                                break
                        except asyncio.CancelledError:
                            if not watch.expired():
                                raise
                            if assembler.finish_reason is not None:
                                break  # the answer is complete; the provider just kept the stream open
                            if not started:
                                raise _not_started("chunk", self.stall_timeout) from None
                            raise LLMStalled(detail=f"no chunk for {self.stall_timeout:g} s") from None
                        except (httpx2.TimeoutException, aiohttp.ServerTimeoutError):
                            if assembler.finish_reason is not None:
                                break
                            if not started:
                                raise _not_started("byte", self.stall_timeout) from None
                            raise LLMStalled(detail=f"no byte for {self.stall_timeout:g} s") from None
                        except (httpx2.TransportError, aiohttp.ClientError, ssl.SSLError) as exc:
                            if assembler.finish_reason is not None:
                                break
                            raise LLMUnavailable(
                                "The connection to the language model was cut mid-answer.",
                                detail=f"{type(exc).__name__}: {exc}"[:_DETAIL_CHARS],
                            ) from exc
                        finally:
                            watch.waiting = False
                        lines = (pending + data if pending else data).split(b"\n")
                        pending = lines.pop()
                        events, error = assembler.read(lines, watch.progress)
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
        return Assembler().feed_completion(body)


def _reader(http: httpx2.Response) -> Callable[[], Awaitable[bytes]]:
    """What reads the response body as it arrives, b"" at its end. Under the aiohttp transport,
    aiohttp's own reader, called by the stream directly: a paced chunk then costs one read, not a
    stack of async generators (httpx2's decoding and accounting, the transport's adapter, one of
    ours); the stream takes aiohttp's errors beside httpx2's. Any other transport, or a compressed
    body, goes through `aiter_bytes()`."""
    aiohttp_response = getattr(getattr(http.stream, "_stream", None), "_aiohttp_response", None)
    if aiohttp_response is None or http.headers.get("content-encoding", "identity") != "identity":
        chunks = http.aiter_bytes()

        async def read() -> bytes:
            async for data in chunks:
                if data:
                    return data
            return b""

        return read
    # From the body on, the stall watch (`_StallWatch`) bounds the silence between chunks: the client's
    # read timeout, which bounded the wait for the headers, would cancel and arm a timer in aiohttp for
    # every chunk (two objects for the garbage collector each). The next request on this connection
    # sets its own again.
    connection = aiohttp_response.connection
    if connection is not None and connection.protocol is not None:
        connection.protocol.read_timeout = None
    readany: Callable[[], Awaitable[bytes]] = aiohttp_response.content.readany
    return readany


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
    # One copy of each part (the tools alone are tens of kilobytes).
    return b"".join((b'{"tools":', tools_json, b",", memoryview(orjson.dumps(params))[1:]))


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
