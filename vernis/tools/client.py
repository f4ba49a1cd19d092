"""The host page's own tools (SPEC §18): tools a socket declares, which run in the browser.

A page declares its tools with `client_tools`; each becomes a `Tool` like any server tool (`as_tool`),
so the runner offers it, validates the model's arguments against its JSON schema (`jsonschema`),
dedups, refuses loops, asks for approval of a `write` and guards the result, all in the one place
every tool goes through. What differs is only where it runs: its `run` asks a page
(`ClientToolBroker.call`) and waits for the page's `client_tool_result`.

Where a call goes: the socket that declared the tool (the one that sent the message, or that
approved the write), or, if that socket has gone, another socket of the same member showing the
same conversation that declared a tool of the same name and kind. None: `client_unavailable`. No
answer within the timeout: `timeout`. The broker knows the sockets of this process only: an answer
runs on the instance that admitted the message, where its socket is, so across several instances a
call reaches the member's other sockets on that same instance, not those connected elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from uuid import UUID

import orjson

from vernis.identity.members import ASSISTANT_USE, MemberInfo
from vernis.ids import random_hex
from vernis.tools.base import Tool, ToolContext, ToolFailure, json_schema_args
from vernis.tools.runner import Toolset

__all__ = [
    "MAX_CLIENT_TOOLS",
    "MAX_RESULT_BYTES",
    "MAX_SCHEMA_BYTES",
    "ClientPage",
    "ClientToolBroker",
    "ClientToolSpec",
    "as_tool",
    "check_parameters",
    "with_client_tools",
]

logger = logging.getLogger("vernis.tools")

MAX_CLIENT_TOOLS = 32
MAX_SCHEMA_BYTES = 8 * 1024
MAX_RESULT_BYTES = 64 * 1024
CLIENT_TOOL_NAME = r"^[a-z][a-z0-9_]{0,47}$"
CATEGORY = "This page"
# The value types a page's schema may use (SPEC §18: objects of strings, numbers, booleans, enums
# and arrays); `enum` and `const` need no type.
_TYPES = frozenset({"object", "string", "number", "integer", "boolean", "array", "null"})


@dataclass(frozen=True, slots=True)
class ClientToolSpec:
    """One tool as a page declared it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    writes: bool = False


def check_parameters(name: str, parameters: Mapping[str, Any]) -> None:
    """Raise `ValueError` (its message names the tool and says what is wrong) unless `parameters`
    is a JSON schema of at most `MAX_SCHEMA_BYTES`, of type object, using only the allowed value types."""
    size = len(orjson.dumps(parameters))
    if size > MAX_SCHEMA_BYTES:
        raise ValueError(f"the parameters of {name!r} are {size:,} bytes; at most {MAX_SCHEMA_BYTES:,}")
    for kind in _types(parameters):
        if kind not in _TYPES:
            raise ValueError(f"the parameters of {name!r} use the type {str(kind)[:40]!r}")
    try:
        json_schema_args(parameters)
    except ValueError as exc:
        raise ValueError(f"the parameters of {name!r}: {exc}") from None


def _types(schema: Any) -> list[Any]:
    """Every `type` named anywhere in `schema`."""
    found: list[Any] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, list):
                found.extend(kind)
            elif kind is not None:
                found.append(kind)
            stack.extend(value for key, value in node.items() if key not in ("enum", "const", "default"))
        elif isinstance(node, list):
            stack.extend(node)
    return found


class _Shown(Protocol):
    @property
    def id(self) -> UUID: ...


class ClientPage(Protocol):
    """A socket as the broker sees it: whose it is, what it shows, which tools its page declared,
    and how to send it a `client_tool_call`. (`vernis.session.state.Session` is one.)"""

    @property
    def member(self) -> MemberInfo: ...
    @property
    def conversation(self) -> _Shown | None: ...
    @property
    def client_tools(self) -> Mapping[str, Tool]: ...
    def ask(self, call_id: str, tool_name: str, arguments: Any) -> None:
        """Send the page `client_tool_call`; must not block."""
        ...


@dataclass(slots=True)
class _Pending:
    member_id: UUID
    page: ClientPage
    result: asyncio.Future[tuple[bool, Any, str | None]]


@dataclass(eq=False)
class ClientToolBroker:
    """The pages of this process that declared tools, per member, and the calls waiting for them.

    `timeout`: how long a page has to answer a call (`VERNIS_CLIENT_TOOL_TIMEOUT`)."""

    timeout: float = 30.0
    _pages: dict[UUID, set[ClientPage]] = field(default_factory=dict)
    _pending: dict[str, _Pending] = field(default_factory=dict)

    def attach(self, page: ClientPage) -> None:
        """`page` declared tools: calls may go to it."""
        self._pages.setdefault(page.member.id, set()).add(page)

    def detach(self, page: ClientPage) -> None:
        """`page` is gone (or declared none): no call goes to it, and those it had not answered end
        as `client_unavailable`."""
        pages = self._pages.get(page.member.id)
        if pages is not None:
            pages.discard(page)
            if not pages:
                del self._pages[page.member.id]
        for call_id, pending in list(self._pending.items()):
            if pending.page is page and not pending.result.done():
                pending.result.set_exception(_unavailable(call_id, gone=True))

    def _route(self, origin: ClientPage, ctx: ToolContext[Any], tool: Tool) -> ClientPage | None:
        pages = self._pages.get(ctx.member.id, set())

        def offers(page: ClientPage) -> bool:
            declared = page.client_tools.get(tool.name)
            return declared is not None and declared.writes == tool.writes

        if origin in pages and offers(origin):
            return origin
        for page in pages:
            shown = page.conversation
            if shown is not None and shown.id == ctx.conversation_id and offers(page):
                return page
        return None

    async def call(self, origin: ClientPage, ctx: ToolContext[Any], tool: Tool, arguments: Any) -> Any:
        """Run `tool` in a page (see the module's docstring for which) and return its data. Raises
        `ToolFailure`: `client_unavailable`, `timeout`, `result_too_large`, or `client_error` with
        the page's message."""
        page = self._route(origin, ctx, tool)
        if page is None:
            raise _unavailable(tool.name)
        call_id = f"ct_{random_hex()}"
        result: asyncio.Future[tuple[bool, Any, str | None]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = _Pending(ctx.member.id, page, result)
        try:
            page.ask(call_id, tool.name, arguments)
            async with asyncio.timeout(self.timeout):
                ok, data, error = await result
        except TimeoutError:
            raise ToolFailure(
                "timeout",
                f"The page did not answer {tool.name} within {self.timeout:g} seconds.",
                retryable=True,
                hint="Tell the user it did not happen; they may try again.",
            ) from None
        finally:
            self._pending.pop(call_id, None)
        if not ok:
            raise ToolFailure(
                "client_error", error or f"The page could not run {tool.name}.", hint="Tell the user."
            )
        return data

    def resolve(
        self, member_id: UUID, call_id: str, ok: bool, data: Any, error: str | None
    ) -> Literal["taken", "too_large"] | None:
        """A page's answer to `call_id`: "taken", or "too_large" when its data is over `MAX_RESULT_BYTES` (the
        call then ends as `result_too_large`); None when no such call waits for this member
        (answered already, timed out, or another member's), and then nothing happens."""
        pending = self._pending.get(call_id)
        if pending is None or pending.member_id != member_id or pending.result.done():
            return None
        del self._pending[call_id]
        if ok and len(orjson.dumps(data)) > MAX_RESULT_BYTES:
            pending.result.set_exception(
                ToolFailure(
                    "result_too_large",
                    f"The page's result is larger than {MAX_RESULT_BYTES // 1024} KiB; it was dropped.",
                )
            )
            return "too_large"
        pending.result.set_result((ok, data, error))
        return "taken"


def _unavailable(name: str, *, gone: bool = False) -> ToolFailure:
    return ToolFailure(
        "client_unavailable",
        "The page closed before it answered."
        if gone
        else f"No open page of this user can run {name} now (it is the page's own tool).",
        hint="Tell the user to reopen the page if they want it done.",
    )


def as_tool(spec: ClientToolSpec, page: ClientPage, broker: ClientToolBroker) -> Tool:
    """`spec` as a tool any member holding `assistant:use` may run: it runs in `page` (or a page
    standing in for it, `ClientToolBroker.call`). A write previews its arguments (the card) first."""
    args = json_schema_args(spec.parameters)
    made: Tool

    async def run(ctx: ToolContext[Any], arguments: Any) -> Any:
        return await broker.call(page, ctx, made, arguments.model_dump())

    async def preview(ctx: ToolContext[Any], arguments: Any) -> dict[str, Any]:
        return {
            "action": f"{spec.name.replace('_', ' ').capitalize()} on this page?",
            "arguments": arguments.model_dump(),
        }

    made = Tool(
        spec.name,
        CATEGORY,
        spec.description,
        args,
        ASSISTANT_USE,
        spec.writes,
        run,
        preview=preview if spec.writes else None,
        toolkit="page",
    )
    return made


def with_client_tools(server: Toolset, client: Mapping[str, Tool]) -> Toolset:
    """The tools an answer started on a socket offers: the member's server tools (`server`, shared
    by every socket with the same permissions) and the page's (`client`), whose names differ."""
    if not client:
        return server
    return Toolset(
        {**server.tools, **client}, known=server.known | frozenset(client), resources=server.resources
    )
