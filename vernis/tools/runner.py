"""Offering tools per member and running them through one instrumented path.

`ToolRegistry` holds every tool of the loaded toolkits; `for_member()` collects, when a socket
connects, the tools whose permission the member holds. `ToolRunner` runs the calls of one answer:
it checks the permission again, validates the arguments, turns every outcome into the result
envelope the model reads

    {"ok": true, "data": ...}
    {"ok": false, "error": {"code", "message", "retryable", "hint"}}

and applies the per-answer rules: identical calls run once, reads run in parallel (at most 4 at a
time), and the same call made more than 3 times is refused as a loop. No tool writes its own checks.

Writes take two steps, enforced here and not by the model. A write tool's call without
`confirmed: true` runs only its `preview` (which validates against the data and describes exactly
what would change) and stores a pending approval; the answer shows the preview and asks. The write
itself runs only for an approved approval: after the user's button (`confirm_tool`), or when the
model repeats the identical call with `confirmed: true` after the user answered in the chat. A
confirmed call with no matching preview runs nothing and tells the model to preview first. Every
write attempt leaves an audit row.

`ask_user` (SPEC §17) runs nothing either: its questions are stored (`vernis.tools.questions`) and
its outcome carries them (status `needs_answer`); the answer ends after that round.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from uuid import UUID

import orjson
from pydantic import BaseModel, ValidationError

from vernis.guards import Action, GuardService
from vernis.tools.approvals import ApprovalService
from vernis.tools.asking import AskUserArgs
from vernis.tools.base import CONFIRMED, Tool, ToolContext, ToolFailure, error_envelope
from vernis.tools.blocks import BlockRules
from vernis.tools.consent import approves
from vernis.tools.outcomes import execute_write, failure_envelope, guard_envelope, ok_envelope
from vernis.tools.questions import QuestionInfo, QuestionService, asked_envelope, question_record
from vernis.tools.reviews import ReviewInfo, ReviewService, review_envelope
from vernis.tracing.spans import tool_span

__all__ = [
    "Call",
    "ToolOutcome",
    "ToolRegistry",
    "ToolRunner",
    "Toolset",
]

logger = logging.getLogger("vernis.tools")

MAX_PARALLEL_READS = 4
MAX_TOOLSETS = 1024
MAX_REPEATS = 3


class Call(Protocol):
    """A tool call as the model made it."""

    @property
    def call_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def arguments(self) -> str: ...


class ToolRegistry:
    """Every tool of the loaded toolkits, and each toolkit's resources once it has started."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        # Vernis's own tools (`ask_user`), offered beside the toolkits' to whoever holds their
        # permission; not listed among the toolkits' tools.
        self._builtins: dict[str, Tool] = {}
        self.resources: dict[str, Any] = {}
        # One Toolset per permission set, shared by every socket holding it (its definitions are
        # then encoded once); dropped whenever the tools change.
        self._toolsets: dict[frozenset[str], Toolset] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            other = self._tools[tool.name].toolkit
            raise ValueError(
                f"tool {tool.name!r} is offered by two toolkits, {other!r} and {tool.toolkit!r}"
                if other != tool.toolkit
                else f"tool {tool.name!r} is declared twice in {tool.toolkit or 'the registry'}"
            )
        self._tools[tool.name] = tool
        self._toolsets = {}

    def replace_toolkit(self, toolkit: str, tools: Iterable[Tool]) -> None:
        """Swap every tool of `toolkit` for `tools` at once (a remote toolkit's list changed while
        Vernis runs; sockets that connect afterwards see the new set). Raises `ValueError` naming
        both sides when a name is another toolkit's; then nothing changes."""
        offered: dict[str, Tool] = {}
        for tool in tools:
            if tool.toolkit != toolkit:
                raise ValueError(f"tool {tool.name!r} is {tool.toolkit!r}'s, not {toolkit!r}'s")
            if tool.name in offered:
                raise ValueError(f"tool {tool.name!r} is declared twice in {toolkit}")
            other = self._tools.get(tool.name)
            if other is not None and other.toolkit != toolkit:
                raise ValueError(
                    f"tool {tool.name!r} is offered by two toolkits, {other.toolkit!r} and {toolkit!r}"
                )
            offered[tool.name] = tool
        kept = {name: tool for name, tool in self._tools.items() if tool.toolkit != toolkit}
        # A new dict, not an update: a `for_member()` running elsewhere never sees half a change.
        self._tools = {**kept, **offered}
        self._toolsets = {}

    def add_builtin(self, tool: Tool) -> None:
        """Offer Vernis's own `tool` to every member holding its permission. Raises `ValueError`
        when a toolkit's tool has its name."""
        if tool.name in self._tools:
            owner = self._tools[tool.name].toolkit
            raise ValueError(f"tool {tool.name!r} is Vernis's own; toolkit {owner!r} offers one too")
        self._builtins[tool.name] = tool
        self._toolsets = {}

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name) or self._builtins.get(name)

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def for_member(self, permissions: frozenset[str]) -> Toolset:
        toolset = self._toolsets.get(permissions)
        if toolset is None:
            if len(self._toolsets) >= MAX_TOOLSETS:  # tokens with ever new permission claims
                self._toolsets = {}
            tools = self._tools | self._builtins
            toolset = self._toolsets[permissions] = Toolset(
                {name: tool for name, tool in tools.items() if tool.permission in permissions},
                known=frozenset(tools),
                resources=self.resources,
            )
        return toolset


@dataclass(frozen=True, slots=True)
class Toolset:
    """The tools one member may use, fixed when the socket connects (and on a token refresh)."""

    tools: dict[str, Tool]
    known: frozenset[str] = frozenset()
    # Toolkit name -> its resources (shared with the registry).
    resources: Mapping[str, Any] = field(default_factory=dict)
    _definitions: list[dict[str, Any]] | None = field(default=None, init=False, repr=False, compare=False)
    _json: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def context_for(self, tool: Tool, base: ToolContext[Any]) -> ToolContext[Any]:
        """`base` with the resources of the toolkit that brought `tool`."""
        return dataclasses.replace(base, resources=self.resources.get(tool.toolkit))

    def definitions(self) -> list[dict[str, Any]]:
        """The OpenAI function definitions of these tools (built once per toolset; do not modify)."""
        if self._definitions is None:
            object.__setattr__(self, "_definitions", [tool.definition() for tool in self.tools.values()])
        assert self._definitions is not None
        return self._definitions

    def definitions_json(self) -> bytes:
        """`definitions()` as the JSON array a request carries, encoded once per toolset."""
        if self._json is None:
            object.__setattr__(self, "_json", orjson.dumps(self.definitions()))
        assert self._json is not None
        return self._json

    def __bool__(self) -> bool:
        return bool(self.tools)


Status = Literal[
    "ok", "error", "needs_confirmation", "rejected", "review_requested", "expired", "needs_answer"
]


@dataclass(slots=True)
class ToolOutcome:
    call_id: str
    tool_name: str
    arguments: Any
    status: Status
    envelope: dict[str, Any]
    # Set on a write's preview (status `needs_confirmation`).
    confirmation_id: UUID | None = None
    preview: Any = None
    # Set when this call carried out an earlier preview: that preview's call id (its card ends).
    resolved_call: str | None = None
    # Set when the approved write went to a reviewer instead (SPEC §23): the review request.
    review: ReviewInfo | None = None
    # Set on an `ask_user` call (status `needs_answer`, SPEC §17): the question stored; the
    # answer ends after this round.
    question: QuestionInfo | None = None

    def stored(self) -> dict[str, Any]:
        """The shape kept in `assistant_message.tool_calls_json`."""
        return {
            "call_id": self.call_id,
            "tool_name": self.tool_name,
            "arguments": self.arguments,
            "status": self.status,
            "result": self.envelope,
        } | ({"question": question_record(self.question)} if self.question is not None else {})


@dataclass
class ToolRunner:
    """Runs the tool calls of one answer. `context` is the answer's (its resources are filled in
    per tool, from the tool's toolkit)."""

    toolset: Toolset
    context: ToolContext[Any]
    approvals: ApprovalService
    # Checks write arguments and tool results (vernis.guards); None: no guards (tests of the runner).
    guards: GuardService | None = None
    # How long a write confirmed in the chat may run (`execute_write`); None: no limit.
    write_timeout: float | None = None
    # Writes a second member reviews (SPEC §23): tool name -> the reviewer's permission, and where
    # their requests are kept; a write named here is not run once approved, it is sent to review.
    reviewed: Mapping[str, str] = field(default_factory=dict)
    reviews: ReviewService | None = None
    # What the results' UI blocks may hold (SPEC §16); None: the built-in kinds, relative links.
    blocks: BlockRules | None = None
    # Where `ask_user` questions are kept (SPEC §17); None: the tool is refused.
    questions: QuestionService | None = None
    _results: dict[tuple[str, str], asyncio.Future[ToolOutcome]] = field(default_factory=dict)
    # The tools whose results this answer read carried an injection signal: its writes say so.
    _untrusted: list[str] = field(default_factory=list)
    _counts: dict[tuple[str, str], int] = field(default_factory=dict)
    _reads: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_PARALLEL_READS))

    @staticmethod
    def parse_arguments(raw: str) -> Any:
        """The call's arguments as the model wrote them: a JSON value, or the raw text if invalid."""
        try:
            return orjson.loads(raw or "{}")
        except orjson.JSONDecodeError:
            return raw

    @staticmethod
    def key(name: str, arguments: Any) -> tuple[str, str]:
        """Identical calls share a key: the tool and its arguments with keys sorted."""
        return name, orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()

    async def run_round(
        self,
        calls: Sequence[Call],
        started: Callable[[Call, Any], None],
        completed: Callable[[ToolOutcome], None],
    ) -> list[ToolOutcome]:
        """Run one round of calls; reads in parallel, writes one at a time in order.

        `started` is called before a call runs and `completed` after, in the order they finish.
        Returns the outcomes in the order of `calls`.
        """

        async def one(call: Call) -> ToolOutcome:
            arguments = self.parse_arguments(call.arguments)
            started(call, arguments)
            outcome = await self.run(call, arguments)
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

    async def run(self, call: Call, arguments: Any = None) -> ToolOutcome:
        """Run one call; `arguments` are its parsed arguments when the caller has them already."""
        if arguments is None:
            arguments = self.parse_arguments(call.arguments)
        # Traces (SPEC §22): the call's span is current while it runs (its requests carry it).
        with tool_span(call.name, call.call_id, arguments) as span:
            outcome = await self._run(call, arguments)
            span.ended(outcome)
        return outcome

    async def _run(self, call: Call, arguments: Any) -> ToolOutcome:
        key = self.key(call.name, arguments)
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        if count > MAX_REPEATS:
            return ToolOutcome(
                call.call_id,
                call.name,
                arguments,
                "error",
                error_envelope(
                    "loop_detected",
                    f"{call.name} was already called {MAX_REPEATS} times with these arguments.",
                    hint="Use the results you already have, or answer the user.",
                ),
            )
        first = self._results.get(key)
        if first is None:
            first = self._results[key] = asyncio.ensure_future(self._execute(call, arguments))
            return await first
        # An identical call in the same answer (a provider repeating a chunk, or the model asking
        # twice, even in the same round) shares the first run: nothing runs again, and a preview
        # is announced once.
        previous = await first
        return dataclasses.replace(
            previous,
            call_id=call.call_id,
            arguments=arguments,
            confirmation_id=None,
            resolved_call=None,
            review=None,
            question=None,
        )

    async def _execute(self, call: Call, arguments: Any) -> ToolOutcome:
        tool = self.toolset.tools.get(call.name)
        if tool is not None and not tool.writes:
            async with self._reads:
                return await self._checked(tool, call, arguments)
        return await self._checked(tool, call, arguments)

    async def _checked(self, tool: Tool | None, call: Call, arguments: Any) -> ToolOutcome:
        def fail(code: str, message: str, hint: str | None = None) -> ToolOutcome:
            return ToolOutcome(
                call.call_id, call.name, arguments, "error", error_envelope(code, message, hint=hint)
            )

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
        confirmed = arguments.get(CONFIRMED) is True
        given = {k: v for k, v in arguments.items() if k != CONFIRMED}
        warning = None
        if tool.writes and self.guards is not None:
            verdict = await self.guards.check_arguments(
                tool.name, given, self.context.member, self.context.conversation_id
            )
            if verdict.action is Action.BLOCK:
                return fail(
                    "guard_failed" if verdict.failed else "blocked_by_guard",
                    verdict.error_message(),
                    "Do not retry with the same values; tell the user what was refused and why.",
                )
            given, warning = verdict.arguments, verdict.warning()
        try:
            args = tool.args.model_validate(given)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False, include_input=False)
            )
            return fail("invalid_arguments", problems, "Fix the arguments and call again.")
        if tool.writes:
            return await self._write(tool, call, arguments, args, confirmed, warning)
        if isinstance(args, AskUserArgs) and self.questions is not None:
            return await self._ask(call, arguments, args)
        try:
            data = await tool.run(self.toolset.context_for(tool, self.context), args)
            envelope = ok_envelope(tool.name, data, self.blocks)
        except ToolFailure as failure:
            envelope = failure_envelope(failure)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("tool %s failed", call.name)
            return fail("internal", f"{call.name} failed unexpectedly.", "Tell the user it did not work.")
        envelope = await self._guard(tool.name, envelope)
        return ToolOutcome(call.call_id, call.name, arguments, "ok" if envelope["ok"] else "error", envelope)

    async def _guard(self, tool_name: str, envelope: dict[str, Any]) -> dict[str, Any]:
        """`envelope` as the model, the store and the browser may see it (`guard_envelope`); an
        untrusted one flags this answer: the writes it proposes say so on their cards."""
        guarded = await guard_envelope(self.guards, tool_name, envelope, self.context)
        if "untrusted" in guarded:
            self._untrusted.append(tool_name)
        return guarded

    def distrust(self, source: str) -> None:
        """Something this answer's model read (besides tool results) carried a planted instruction:
        the writes it proposes say so on their cards."""
        self._untrusted.append(source)

    def _warning(self, warning: str | None) -> str | None:
        """What the confirmation card of a write proposed now must say, if anything."""
        notes = []
        if self._untrusted:
            read = ", ".join(dict.fromkeys(name.replace("_", " ") for name in self._untrusted))
            notes.append(
                f"Caution: this change was proposed right after the assistant read data ({read}) "
                "containing text that tries to give it instructions. Make sure it is what you asked for."
            )
        if warning is not None:
            notes.append(warning)
        return " ".join(notes) or None

    async def _write(
        self,
        tool: Tool,
        call: Call,
        arguments: Any,
        args: BaseModel,
        confirmed: bool,
        warning: str | None = None,
    ) -> ToolOutcome:
        ctx = self.toolset.context_for(tool, self.context)
        approvals = self.approvals
        canonical = args.model_dump(mode="json")
        if not confirmed:
            assert tool.preview is not None
            try:
                preview = await tool.preview(ctx, args)
            except ToolFailure as failure:
                envelope = await self._guard(tool.name, failure_envelope(failure))
                return ToolOutcome(call.call_id, call.name, arguments, "error", envelope)
            # The preview is shown, stored with the approval and read by the model: guarded first.
            checked = await self._guard(tool.name, {"ok": True, "data": preview})
            if not checked["ok"]:
                return ToolOutcome(call.call_id, call.name, arguments, "error", checked)
            preview = checked["data"]
            warning = self._warning(warning)
            if warning is not None:
                # First among the preview's `warnings`: the card shows them above its buttons, and
                # the model reads them too.
                preview = _with_warning(preview, warning)
            approval = await approvals.create(
                organization_id=ctx.organization_id,
                member_id=ctx.member.id,
                conversation_id=ctx.conversation_id,
                message_id=ctx.message_id,
                call_id=call.call_id,
                tool_name=tool.name,
                arguments=canonical,
                preview=preview,
            )
            envelope = {
                "ok": True,
                "data": {
                    "confirmation_id": str(approval.id),
                    "preview": preview,
                    "expires_at": approval.expires_at.isoformat(),
                    "instructions": (
                        "Nothing has changed yet. Show the user this preview and ask them to confirm. "
                        f"Only if they agree, call {tool.name} again with the same arguments "
                        "and confirmed=true."
                    ),
                },
            }
            return ToolOutcome(
                call.call_id,
                call.name,
                arguments,
                "needs_confirmation",
                envelope,
                confirmation_id=approval.id,
                preview=preview,
            )
        claimed = None
        if approves(ctx.user_message):
            claimed = await approvals.claim_for_chat(
                member_id=ctx.member.id,
                organization_id=ctx.organization_id,
                conversation_id=ctx.conversation_id,
                tool_name=tool.name,
                arguments=canonical,
                answered_at=ctx.asked_at,
            )
        if claimed is None:
            await approvals.audit(
                organization_id=ctx.organization_id,
                member_id=ctx.member.id,
                conversation_id=ctx.conversation_id,
                tool_name=tool.name,
                arguments=canonical,
                outcome="refused",
                approval_id=None,
                detail=(
                    "confirmed call without a matching preview answered by the user"
                    if approves(ctx.user_message)
                    else "confirmed call after a message that does not approve the change"
                ),
            )
            return ToolOutcome(
                call.call_id,
                call.name,
                arguments,
                "error",
                error_envelope(
                    "confirmation_required",
                    "Nothing was changed: the user has not approved a preview of exactly this change.",
                    hint=(
                        f"Call {tool.name} without confirmed to show a preview, then wait for the user "
                        "to approve it (the card's button, or a plain yes)."
                    ),
                ),
            )
        reviewer_permission = self.reviewed.get(tool.name)
        if reviewer_permission is not None and self.reviews is not None:
            review = await self.reviews.create(
                claimed, reviewer_permission, self.context.permissions, ctx.member.name
            )
            waiting = review_envelope(review)
            await approvals.update_stored_call(
                claimed.message_id, claimed.call_id, status="review_requested", result=waiting
            )
            return ToolOutcome(
                call.call_id,
                call.name,
                arguments,
                "review_requested",
                waiting,
                resolved_call=claimed.call_id,
                review=review,
            )
        envelope = await execute_write(
            tool, ctx, args, claimed.id, canonical, approvals, self.guards, self.write_timeout, self.blocks
        )
        if "untrusted" in envelope:
            self._untrusted.append(tool.name)
        # The preview's card, wherever it was shown, now says how it ended.
        status: Status = "ok" if envelope["ok"] else "error"
        await approvals.update_stored_call(
            claimed.message_id, claimed.call_id, status=status, result=envelope
        )
        return ToolOutcome(
            call.call_id, call.name, arguments, status, envelope, resolved_call=claimed.call_id
        )

    async def _ask(self, call: Call, arguments: Any, args: AskUserArgs) -> ToolOutcome:
        """`ask_user` (SPEC §17): the questions are stored and shown as a form; nothing runs."""
        assert self.questions is not None
        ctx = self.context
        question = await self.questions.create(
            organization_id=ctx.organization_id,
            member_id=ctx.member.id,
            conversation_id=ctx.conversation_id,
            message_id=ctx.message_id,
            call_id=call.call_id,
            args=args,
        )
        return ToolOutcome(
            call.call_id, call.name, arguments, "needs_answer", asked_envelope(question), question=question
        )


def _with_warning(preview: Any, warning: str) -> dict[str, Any]:
    if not isinstance(preview, dict):
        return {"details": preview, "warnings": [warning]}
    given = preview.get("warnings")
    others = list(given) if isinstance(given, list) else ([] if given in (None, "") else [given])
    return {**preview, "warnings": [warning, *others]}
