"""One MCP server's connection, through the official SDK (2.x); every quirk of the SDK stays here.

`McpConnection` keeps a configured server connected from a background task of its own and calls its
tools. What leaves this module is Vernis's: `RemoteTool`, `RemoteResult`, `ToolFailure`.

The SDK's quirks, and what is done about each:

- Its client has no read timeout by default and can hang when a server dies mid-call: every request
  is bounded here with `asyncio.timeout` (`timeout` per call, `connect_timeout` to connect).
- A transport failure cancels the task that entered the client (an anyio task group): only the
  connection's own task enters it, so a dying server ends that connection (in-flight calls get
  "connection closed") and never the member's answer. The task then reconnects, with backoff.
- The protocol's era is negotiated (`mode="auto"`): a 2026-07-28 server sends change events on a
  `subscriptions/listen` stream we open, an older one on the GET stream the SDK opens; either way a
  `tools/list_changed` notification reaches `message_handler` and the list is read again.
- Per-call headers: the SDK sends a request from a task that inherits the caller's context
  variables, so what is set in a context variable around one call (`_CallState`) reaches exactly
  that call's HTTP request: an httpx2 request hook adds the call's token there, on one shared
  session and connection pool (a session per call would cost a handshake per call).
- A session the server no longer knows is answered 404, which the SDK reports as some JSON-RPC
  error (the server's, or its own "Session terminated"), the status lost: an httpx2 response hook
  notes it on the call's `_CallState`. The session is renewed once, and only a read is sent again.
  The same hook adds the W3C `traceparent` of the call's span when the answer is traced.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from vernis.config import McpServerEntry
from vernis.tools.base import ToolFailure
from vernis.tools.toolkit import ToolkitError
from vernis.tracing.spans import inject

__all__ = [
    "MEMBER_TOKEN_HEADER",
    "McpConnection",
    "RemoteResult",
    "RemoteTool",
    "describe_failure",
    "safe_url",
    "stop_if_cancelled",
]

logger = logging.getLogger("vernis.tools.mcp")

MEMBER_TOKEN_HEADER = "X-Vernis-Member-Token"
# Reconnection: the first retry after this many seconds, doubling up to the cap.
RETRY_FIRST = 0.5
RETRY_MAX = 30.0
MAX_TOOLS = 128
_MAX_PAGES = 20
_CLOSE_TIMEOUT = 5.0
_MAX_ERROR = 1000
# The SDK's own defaults, but for connecting: change-event streams stay open, quiet, for minutes.
_STREAM_READ_TIMEOUT = 300.0
_SESSION_HEADER = "mcp-session-id"


@dataclass(slots=True)
class _CallState:
    """What one call's HTTP requests need to know and tell (see the module docstring)."""

    token: str | None
    session_gone: bool = False


_call_state: ContextVar[_CallState | None] = ContextVar("vernis_mcp_call", default=None)


@dataclass(frozen=True, slots=True)
class RemoteTool:
    """A tool as the server lists it."""

    name: str
    # For people: the server's title, else its annotations' title, else the name.
    title: str
    description: str
    input_schema: Mapping[str, Any]
    # The server's `readOnlyHint` (None: not said).
    read_only_hint: bool | None


@dataclass(frozen=True, slots=True)
class RemoteResult:
    """A tool's answer: its text parts, its structured content, and a line for anything else."""

    text: list[str]
    structured: Any
    other: list[str]
    is_error: bool


class McpConnection:
    """A configured server, connected in the background. `on_tools(tools)` is called with its tools
    each time they are listed, and with None while the server is out of reach; it may raise
    `ToolkitError` to refuse a list (then the previous one stays)."""

    def __init__(self, entry: McpServerEntry, on_tools: Callable[[list[RemoteTool] | None], None]) -> None:
        self.entry = entry
        self._on_tools = on_tools
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._refresh = self._renew = self._lost = False
        # Replaced each time the client changes: who waits for a new client waits on the old one.
        self._changed = asyncio.Event()
        self._first_attempt = asyncio.Event()
        self._fatal: ToolkitError | None = None
        # Whether its tools are offered; whether the current attempt got connected.
        self._listed = False
        self._up = False

    @property
    def connected(self) -> bool:
        return self._client is not None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp server {self.entry.name}")

    async def ready(self) -> None:
        """Wait (bounded) for the first attempt to connect. A server out of reach only leaves its
        tools out; raises `ToolkitError` when its tools cannot be offered (a name taken twice)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.entry.connect_timeout + 1):
                await self._first_attempt.wait()
        if self._fatal is not None:
            raise self._fatal

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # Not `await task`: that would raise the task's cancellation here, as if we were cancelled.
        await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)
        if not task.done():
            logger.warning("MCP server %s: the connection did not close in time", self.entry.name)

    async def probe(self, wait: float) -> list[RemoteTool]:
        """Connect once, list the tools, disconnect (`vernis check-config`), within `wait` seconds
        or `connect_timeout` if shorter. Raises on failure."""
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(min(wait, self.entry.connect_timeout)):
                client = await self._connect(stack)
                return await self._list(client)

    async def call(
        self, name: str, arguments: dict[str, Any], *, token: str | None, read: bool
    ) -> RemoteResult:
        """Call the server's tool `name`; `token` (the one Vernis signed for this server, naming the
        member) goes along in `MEMBER_TOKEN_HEADER` when the entry forwards one. Raises `ToolFailure`."""
        server = self.entry.name
        client = self._client
        if client is None:
            raise ToolFailure(
                "unavailable",
                f"The {server} service cannot be reached right now.",
                retryable=True,
                hint="Tell the user the tool is unavailable at the moment.",
            )
        deadline = asyncio.timeout(self.entry.timeout)
        try:
            async with deadline:
                return await self._call_renewing(client, name, arguments, token, read)
        except ToolFailure:
            raise
        except Exception as exc:
            stop_if_cancelled()
            if deadline.expired():
                raise ToolFailure(
                    "timeout",
                    f"The {server} service did not answer within {self.entry.timeout:g} s.",
                    retryable=True,
                    hint="Tell the user the tool did not answer in time.",
                ) from None
            if isinstance(exc, MCPError):
                raise _call_failure(server, exc) from None
            if isinstance(exc, ValidationError | RuntimeError):
                logger.warning(
                    "MCP server %s: unusable answer to %s (%s)", server, name, describe_failure(exc)
                )
                raise ToolFailure(
                    "tool_error", f"The {server} service gave an answer Vernis cannot use.", retryable=False
                ) from None
            logger.warning("MCP server %s: calling %s failed (%s)", server, name, describe_failure(exc))
            raise ToolFailure(
                "unavailable", f"The {server} service cannot be reached right now.", retryable=True
            ) from None

    # -- calls ---------------------------------------------------------------------------------

    async def _call_renewing(
        self, client: Client, name: str, arguments: dict[str, Any], token: str | None, read: bool
    ) -> RemoteResult:
        state = _CallState(token if self.entry.forward_member_token and token else None)
        try:
            return await self._call(client, name, arguments, state)
        except MCPError:
            if not state.session_gone:
                raise
        client = await self._renewed(client)
        if not read:
            raise ToolFailure(
                "unavailable",
                f"The session with the {self.entry.name} service had expired; it was renewed, "
                f"but {name} was not run.",
                retryable=True,
                hint="Nothing was changed. Ask the user before trying again.",
            )
        return await self._call(client, name, arguments, _CallState(state.token))

    async def _call(
        self, client: Client, name: str, arguments: dict[str, Any], state: _CallState
    ) -> RemoteResult:
        reset = _call_state.set(state)
        try:
            result = await client.call_tool(name, arguments)
        finally:
            _call_state.reset(reset)
        return _result(result)

    async def _renewed(self, old: Client) -> Client:
        """Ask for a new session in place of `old` and wait for it (the caller bounds the wait)."""
        logger.info("MCP server %s: the session expired; renewing it", self.entry.name)
        if self._client is old:
            self._renew = True
            self._wake.set()
        while True:
            changed = self._changed
            client = self._client
            if client is not None and client is not old:
                return client
            await changed.wait()

    # -- the connection's task -----------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = RETRY_FIRST
        while True:
            renew = False
            self._up = False
            began = loop.time()
            try:
                renew = await self._session()
                failure: Exception | None = None
            except Exception as exc:
                stop_if_cancelled()
                failure = exc
            if self._fatal is not None:
                self._first_attempt.set()
                return
            if self._up:
                # It was connected: try again soon, keeping its tools meanwhile. Only a session
                # that lasted resets the backoff, so a server that drops every session is not
                # reconnected to in a tight loop.
                if failure is not None:
                    logger.warning(
                        "MCP server %s: connection lost (%s)", self.entry.name, describe_failure(failure)
                    )
                if loop.time() - began > RETRY_MAX:
                    delay = RETRY_FIRST
                if not renew:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX)
                continue
            if self._listed or not self._first_attempt.is_set():
                logger.warning(
                    "MCP server %s cannot be reached (%s); its tools are left out until it answers",
                    self.entry.name,
                    describe_failure(failure),
                    extra={"url": safe_url(self.entry.url)},
                )
            else:
                logger.debug(
                    "MCP server %s still cannot be reached (%s)", self.entry.name, describe_failure(failure)
                )
            if self._listed:
                self._listed = False
                self._on_tools(None)
            self._first_attempt.set()
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, RETRY_MAX)

    async def _session(self) -> bool:
        """One connection, from connecting until it ends. True when it ended to be renewed."""
        self._refresh = self._renew = self._lost = False
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(self.entry.connect_timeout):
                client = await self._connect(stack)
                tools = await self._list(client)
            if not self._publish(tools):
                return False
            try:
                self._set_client(client)
                self._up = True
                self._first_attempt.set()
                logger.info("MCP server %s connected: %d tools", self.entry.name, len(tools))
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS and _announces_changes(client):
                    self._listener = asyncio.create_task(
                        self._listen(client), name=f"mcp {self.entry.name} events"
                    )
                while True:
                    await self._wake.wait()
                    self._wake.clear()
                    if self._renew or self._lost:
                        return self._renew
                    if self._refresh:
                        self._refresh = False
                        async with asyncio.timeout(self.entry.timeout):
                            tools = await self._list(client)
                        self._publish(tools)
            finally:
                self._set_client(None)
                if self._listener is not None:
                    # Not awaited: it ends at its next step, and this task may be cancelled already.
                    self._listener.cancel()

    async def _connect(self, stack: contextlib.AsyncExitStack) -> Client:
        entry = self.entry
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(entry.headers),
                timeout=httpx2.Timeout(entry.connect_timeout, read=_STREAM_READ_TIMEOUT),
                event_hooks={"request": [_on_request], "response": [_on_response]},
            )
        )
        client = Client(
            streamable_http_client(entry.url, http_client=http),
            mode="auto",
            cache=None,
            message_handler=self._on_message,
            client_info=_client_info(),
        )
        return await stack.enter_async_context(client)

    async def _list(self, client: Client) -> list[RemoteTool]:
        listed: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        if len(listed) > MAX_TOOLS:
            logger.warning(
                "MCP server %s lists %d tools; only the first %d are offered",
                self.entry.name,
                len(listed),
                MAX_TOOLS,
            )
        return [_remote_tool(tool) for tool in listed[:MAX_TOOLS]]

    def _publish(self, tools: list[RemoteTool]) -> bool:
        try:
            self._on_tools(tools)
        except ToolkitError as exc:
            if not self._first_attempt.is_set():
                self._fatal = exc
                return False
            logger.error("MCP server %s: its new tool list is refused: %s", self.entry.name, exc)
            return True
        self._listed = True
        return True

    def _set_client(self, client: Client | None) -> None:
        self._client = client
        self._changed.set()
        self._changed = asyncio.Event()

    async def _listen(self, client: Client) -> None:
        entered = False
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                entered = True
                # Events are not replayed: a change between the first listing and now is read here.
                self._refresh = True
                self._wake.set()
                async for _ in subscription:
                    self._refresh = True
                    self._wake.set()
        except Exception as exc:
            stop_if_cancelled()
            if not entered:
                logger.info(
                    "MCP server %s sends no change events (%s); its tools are listed at each connection",
                    self.entry.name,
                    describe_failure(exc),
                )
                return
        # The stream ended: the server went away or restarts. Reconnect (and list again).
        self._lost = True
        self._wake.set()

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._refresh = True
            self._wake.set()
        elif isinstance(message, Exception):
            logger.debug("MCP server %s: transport: %s", self.entry.name, describe_failure(message))


def stop_if_cancelled() -> None:
    """Raise `CancelledError` in a task asked to stop. Needed after catching `Exception` around the
    SDK: as its anyio streams close under a cancellation, it may raise another error instead."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def _on_request(request: httpx2.Request) -> None:
    state = _call_state.get()
    if state is not None and state.token:
        request.headers[MEMBER_TOKEN_HEADER] = state.token
    # Traces (SPEC §22): the server joins the answer's trace under the call's span.
    inject(request.headers)


async def _on_response(response: httpx2.Response) -> None:
    state = _call_state.get()
    if state is not None and response.status_code == 404 and _SESSION_HEADER in response.request.headers:
        state.session_gone = True


def _announces_changes(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return tools is not None and bool(tools.list_changed)


def _call_failure(server: str, exc: MCPError) -> ToolFailure:
    if exc.code == types.CONNECTION_CLOSED:
        return ToolFailure("unavailable", f"The connection to the {server} service was lost.", retryable=True)
    return ToolFailure(
        "tool_error",
        f"The {server} service refused the call: {exc.message[:_MAX_ERROR]}",
        retryable=False,
        hint="Check the arguments against the tool's description, or tell the user.",
    )


def _remote_tool(tool: types.Tool) -> RemoteTool:
    annotations = tool.annotations
    title = tool.title or (annotations.title if annotations else None) or tool.name
    return RemoteTool(
        name=tool.name,
        title=title,
        description=tool.description or "",
        input_schema=tool.input_schema,
        read_only_hint=annotations.read_only_hint if annotations else None,
    )


def _result(result: types.CallToolResult) -> RemoteResult:
    text: list[str] = []
    other: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            text.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            other.append(f"[{block.type}: {block.mime_type}, {_size(len(block.data) * 3 // 4)}]")
        elif isinstance(block, types.ResourceLink):
            kind = f" ({block.mime_type})" if block.mime_type else ""
            other.append(f"[resource link: {block.uri}{kind}]")
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            kind = f" ({resource.mime_type})" if resource.mime_type else ""
            if isinstance(resource, types.TextResourceContents):
                other.append(f"[resource: {resource.uri}{kind}, {_size(len(resource.text.encode()))}]")
                text.append(resource.text)
            else:
                other.append(f"[resource: {resource.uri}{kind}, {_size(len(resource.blob) * 3 // 4)}]")
    return RemoteResult(text, result.structured_content, other, result.is_error)


def _size(size: int) -> str:
    return f"{size} bytes" if size < 1024 else f"{round(size / 1024)} KB"


@functools.cache
def _client_info() -> types.Implementation:
    try:
        release = version("vernis")
    except PackageNotFoundError:
        release = "0"
    return types.Implementation(name="vernis", version=release)


def safe_url(url: str) -> str:
    """`url` fit for a log line or a listing: without credentials, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return parts._replace(netloc=netloc, query="", fragment="").geturl()


def describe_failure(exc: BaseException | None) -> str:
    """One line about what went wrong: the innermost cause of an exception group. Never a header."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if exc is None:
        return "unknown"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
