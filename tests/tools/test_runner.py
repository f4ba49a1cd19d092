"""The tool registry and runner: permission filtering, envelopes, dedupe, loops, parallel reads."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from pydantic import BaseModel, Field

from tests.members import member
from vernis.model.base import ToolCall
from vernis.tools import Tool, ToolContext, ToolFailure
from vernis.tools.approvals import ApprovalService
from vernis.tools.runner import ToolRegistry, ToolRunner

MEMBER = member()


class Query(BaseModel):
    q: str = Field(min_length=1)


class Probe:
    """Real tool functions that count their runs and how many run at once."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.active = 0
        self.peak = 0

    async def lookup(self, ctx: ToolContext[None], args: Query) -> dict[str, Any]:
        self.runs.append(args.q)
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(0.01)
        self.active -= 1
        if args.q == "missing":
            raise ToolFailure("not_found", "No such thing.", hint="Search first.")
        if args.q == "boom":
            raise RuntimeError("secret internals")
        return {"found": args.q}


def runner_for(probe: Probe, permissions: frozenset[str]) -> ToolRunner:
    registry = ToolRegistry(
        [
            Tool("lookup", "Test", "Look a thing up.", Query, "thing:list", False, probe.lookup),
            Tool("admin_lookup", "Test", "Admins only.", Query, "thing:admin", False, probe.lookup),
        ]
    )
    toolset = registry.for_member(permissions)
    context = ToolContext(
        member=MEMBER, permissions=permissions, conversation_id=uuid.uuid4(), resources=None
    )
    # Read tools never touch approvals; the write path is proven end to end (tests/e2e/test_approvals.py).
    approvals: ApprovalService = None  # type: ignore[assignment]
    return ToolRunner(toolset, context, approvals)


def call(q: str, name: str = "lookup", call_id: str | None = None) -> ToolCall:
    return ToolCall(call_id or uuid.uuid4().hex, name, f'{{"q": "{q}"}}')


def test_write_tool_needs_a_preview_and_offers_confirmed() -> None:
    """A write tool cannot be declared without a preview; its schema offers the `confirmed` flag."""
    probe = Probe()
    with pytest.raises(ValueError, match="preview"):
        Tool("save", "Test", "Save.", Query, "thing:write", True, probe.lookup)
    tool = Tool("save", "Test", "Save.", Query, "thing:write", True, probe.lookup, preview=probe.lookup)
    parameters = tool.definition()["function"]["parameters"]
    assert parameters["properties"]["confirmed"]["type"] == "boolean"
    assert parameters["required"] == ["q"]


def test_toolset_offers_only_permitted_tools() -> None:
    """A member is offered only the tools whose permission they hold, with a JSON schema per tool."""
    runner = runner_for(Probe(), frozenset({"thing:list"}))
    definitions = runner.toolset.definitions()
    assert [d["function"]["name"] for d in definitions] == ["lookup"]
    assert definitions[0]["function"]["parameters"]["required"] == ["q"]


async def test_forbidden_and_unknown_tools_never_run() -> None:
    """A call to a tool the member lacks, or one that does not exist, gets an error envelope and runs nothing."""
    probe = Probe()
    runner = runner_for(probe, frozenset({"thing:list"}))
    forbidden = await runner.run(call("x", "admin_lookup"))
    unknown = await runner.run(call("x", "launch"))
    assert forbidden.envelope["error"]["code"] == "forbidden"
    assert unknown.envelope["error"]["code"] == "unknown_tool"
    assert probe.runs == []


async def test_errors_become_envelopes_without_internals() -> None:
    """Bad arguments, tool failures and crashes become envelopes; a crash's text never reaches the model."""
    probe = Probe()
    runner = runner_for(probe, frozenset({"thing:list"}))
    bad = await runner.run(ToolCall("1", "lookup", '{"q": ""}'))
    not_json = await runner.run(ToolCall("2", "lookup", "{oops"))
    missing = await runner.run(call("missing"))
    crash = await runner.run(call("boom"))
    assert bad.envelope["error"]["code"] == "invalid_arguments"
    assert not_json.envelope["error"]["code"] == "invalid_arguments"
    assert missing.envelope == {
        "ok": False,
        "error": {
            "code": "not_found",
            "message": "No such thing.",
            "retryable": False,
            "hint": "Search first.",
        },
    }
    assert crash.envelope["error"]["code"] == "internal"
    assert "secret" not in str(crash.envelope)


async def test_identical_calls_run_once_even_in_one_round() -> None:
    """The same call twice in one round (a repeated provider chunk) runs once; both get the result."""
    probe = Probe()
    runner = runner_for(probe, frozenset({"thing:list"}))
    first, second = call("a"), call("a")
    outcomes = await runner.run_round([first, second], lambda c, a: None, lambda o: None)
    assert probe.runs == ["a"]
    assert [o.call_id for o in outcomes] == [first.call_id, second.call_id]
    assert outcomes[0].envelope == outcomes[1].envelope == {"ok": True, "data": {"found": "a"}}


async def test_fourth_identical_call_is_refused_as_a_loop() -> None:
    """The same call more than three times in one answer is refused as a loop."""
    runner = runner_for(Probe(), frozenset({"thing:list"}))
    outcomes = [await runner.run(call("a")) for _ in range(4)]
    assert [o.status for o in outcomes] == ["ok", "ok", "ok", "error"]
    assert outcomes[3].envelope["error"]["code"] == "loop_detected"


async def test_reads_run_in_parallel_at_most_four() -> None:
    """Eight different reads in one round overlap, but never more than four at a time."""
    probe = Probe()
    runner = runner_for(probe, frozenset({"thing:list"}))
    started: list[str] = []
    outcomes = await runner.run_round(
        [call(str(n)) for n in range(8)], lambda c, a: started.append(c.call_id), lambda o: None
    )
    assert len(outcomes) == 8
    assert len(started) == 8
    assert probe.peak == 4
