"""The tool registry: tools declared once, offered per member, run through one instrumented path.

A `Tool` is declared once (name, category, description, pydantic argument model, the permission it
needs, read or write). `ToolRegistry.for_member()` collects, when a socket connects, the tools whose
permission the member holds. `ToolRunner` runs the calls of one answer: it checks the permission
again, validates the arguments, turns every outcome into the result envelope the model reads

    {"ok": true, "data": ...}
    {"ok": false, "error": {"code", "message", "retryable", "hint"}}

and applies the per-answer rules: identical calls run once, reads run in parallel (at most 4 at a
time), and the same call made more than 3 times is refused as a loop. No tool writes its own checks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

import orjson
from pydantic import BaseModel, ValidationError

from vernis.services.llm import ToolCall
from vernis.services.persistence import MemberInfo

__all__ = [
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolOutcome",
    "ToolRegistry",
    "ToolRunner",
    "Toolset",
]

logger = logging.getLogger("vernis.tools")

MAX_PARALLEL_READS = 4
MAX_REPEATS = 3


class ToolFailure(Exception):
    """Raised by a tool for an error the model can recover from (unknown id, bad argument, ...)."""

    def __init__(self, code: str, message: str, *, retryable: bool = False, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.hint = hint


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool may know: who asks, in which conversation, with which resources."""

    member: MemberInfo
    permissions: frozenset[str]
    conversation_id: UUID
    resources: Any = None


ToolFunc = Callable[[ToolContext, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    category: str
    description: str
    args: type[BaseModel]
    permission: str
    writes: bool
    run: ToolFunc

    def definition(self) -> dict[str, Any]:
        """The OpenAI function definition the model sees."""
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": schema},
        }


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is declared twice")
        self._tools[tool.name] = tool

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def for_member(self, permissions: frozenset[str]) -> Toolset:
        return Toolset(
            {name: tool for name, tool in self._tools.items() if tool.permission in permissions},
            known=frozenset(self._tools),
        )


@dataclass(frozen=True, slots=True)
class Toolset:
    """The tools one member may use, fixed when the socket connects."""

    tools: dict[str, Tool]
    known: frozenset[str] = frozenset()

    def definitions(self) -> list[dict[str, Any]]:
        return [tool.definition() for tool in self.tools.values()]

    def __bool__(self) -> bool:
        return bool(self.tools)


Status = Literal["ok", "error", "needs_confirmation", "rejected"]


@dataclass(slots=True)
class ToolOutcome:
    call_id: str
    tool_name: str
    arguments: Any
    status: Status
    envelope: dict[str, Any]

    def stored(self) -> dict[str, Any]:
        """The shape kept in `assistant_message.tool_calls_json`."""
        return {
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "arguments": self.arguments,
            "status": self.status,
            "result": self.envelope,
        }


def _error(code: str, message: str, *, retryable: bool = False, hint: str | None = None) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message, "retryable": retryable, "hint": hint}}


@dataclass
class ToolRunner:
    """Runs the tool calls of one answer."""

    toolset: Toolset
    context: ToolContext
    _results: dict[tuple[str, str], asyncio.Future[ToolOutcome]] = field(default_factory=dict)
    _counts: dict[tuple[str, str], int] = field(default_factory=dict)
    _reads: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_PARALLEL_READS))

    @staticmethod
    def parse_arguments(raw: str) -> Any:
        """The call's arguments as the model wrote them: a JSON value, or the raw text if invalid."""
        try:
            return orjson.loads(raw or "{}")
        except orjson.JSONDecodeError:
            return raw

    def key(self, call: ToolCall) -> tuple[str, str]:
        arguments = self.parse_arguments(call.arguments)
        canonical = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()
        return call.name, canonical

    async def run_round(
        self,
        calls: Sequence[ToolCall],
        started: Callable[[ToolCall, Any], None],
        completed: Callable[[ToolOutcome], None],
    ) -> list[ToolOutcome]:
        """Run one round of calls; reads in parallel, writes one at a time in order.

        `started` is called before a call runs and `completed` after, in the order they finish.
        Returns the outcomes in the order of `calls`.
        """

        async def one(call: ToolCall) -> ToolOutcome:
            started(call, self.parse_arguments(call.arguments))
            outcome = await self.run(call)
            completed(outcome)
            return outcome

        outcomes: list[ToolOutcome | None] = [None] * len(calls)
        async with asyncio.TaskGroup() as group:
            reads = {
                index: group.create_task(one(call))
                for index, call in enumerate(calls)
                if (tool := self.toolset.tools.get(call.name)) is not None and not tool.writes
            }
            for index, call in enumerate(calls):
                if index not in reads:
                    outcomes[index] = await one(call)
        for index, task in reads.items():
            outcomes[index] = task.result()
        return [outcome for outcome in outcomes if outcome is not None]

    async def run(self, call: ToolCall) -> ToolOutcome:
        key = self.key(call)
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        arguments = self.parse_arguments(call.arguments)
        if count > MAX_REPEATS:
            return ToolOutcome(
                call.call_id,
                call.name,
                arguments,
                "error",
                _error(
                    "loop_detected",
                    f"{call.name} was already called {MAX_REPEATS} times with these arguments.",
                    hint="Use the results you already have, or answer the user.",
                ),
            )
        first = self._results.get(key)
        if first is None:
            first = self._results[key] = asyncio.ensure_future(self._execute(call, arguments))
        # An identical call in the same answer (a provider repeating a chunk, or the model asking
        # twice, even in the same round) shares the first run: nothing runs again.
        previous = await first
        return ToolOutcome(call.call_id, call.name, arguments, previous.status, previous.envelope)

    async def _execute(self, call: ToolCall, arguments: Any) -> ToolOutcome:
        tool = self.toolset.tools.get(call.name)
        if tool is not None and not tool.writes:
            async with self._reads:
                return await self._checked(tool, call, arguments)
        return await self._checked(tool, call, arguments)

    async def _checked(self, tool: Tool | None, call: ToolCall, arguments: Any) -> ToolOutcome:
        def fail(code: str, message: str, hint: str | None = None) -> ToolOutcome:
            return ToolOutcome(call.call_id, call.name, arguments, "error", _error(code, message, hint=hint))

        if tool is None:
            if call.name in self.toolset.known:
                return fail("forbidden", f"You are not allowed to use {call.name} for this user.")
            return fail(
                "unknown_tool", f"There is no tool named {call.name!r}.", "Use one of the listed tools."
            )
        if tool.permission not in self.context.permissions:
            return fail("forbidden", f"You are not allowed to use {call.name} for this user.")
        if not isinstance(arguments, dict):
            return fail("invalid_arguments", "The arguments must be a JSON object.", "Send a JSON object.")
        try:
            args = tool.args.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)
            )
            return fail("invalid_arguments", problems, "Fix the arguments and call again.")
        try:
            data = await tool.run(self.context, args)
        except ToolFailure as failure:
            return ToolOutcome(
                call.call_id,
                call.name,
                arguments,
                "error",
                _error(failure.code, failure.message, retryable=failure.retryable, hint=failure.hint),
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("tool %s failed", call.name)
            return fail("internal", f"{call.name} failed unexpectedly.", "Tell the user it did not work.")
        return ToolOutcome(call.call_id, call.name, arguments, "ok", {"ok": True, "data": data})
