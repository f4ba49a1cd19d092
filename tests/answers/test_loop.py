"""The assistant loop (`run_loop`) in process: the real `openai` client (`OpenAIChatModel`) against the
scripted model on loopback, real tools in a `ToolRunner`; no Vernis server, no database."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from tests.fixtures.scripted import ScriptedServer
from tests.members import member
from vernis.answers.loop import (
    AnswerEvent,
    LoopSettings,
    TextChunk,
    ToolFinished,
    ToolStarted,
    UsageAdded,
    run_loop,
)
from vernis.exceptions import LLMStalled, LLMUnavailable
from vernis.model.openai import OpenAIChatModel
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Fault, Reply, ScriptedToolCall
from vernis.tools import Tool, ToolContext, ToolFailure
from vernis.tools.approvals import ApprovalService
from vernis.tools.runner import ToolRegistry, ToolRunner

SYSTEM = {"role": "system", "content": "You are a test."}
QUESTION = {"role": "user", "content": "Where is Priya?"}
MESSAGES = [SYSTEM, QUESTION]
# Retries at once: the tests are about which faults are retried, not about the wait.
FAST = LoopSettings(model=SCRIPTED_CHAT_MODEL, retry_base_delay=0.001, retry_max_delay=0.01)


class Lookup(BaseModel):
    name: str


class Directory:
    """A read tool that finds people by name, recording what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def find(self, ctx: ToolContext[None], args: Lookup) -> dict[str, Any]:
        self.asked.append(args.name)
        if args.name == "nobody":
            raise ToolFailure("not_found", "No one by that name.")
        return {"name": args.name, "office": "Lyon"}


@pytest.fixture
async def model(scripted: ScriptedServer) -> AsyncIterator[OpenAIChatModel]:
    """The OpenAI adapter on the scripted server; the client's own retries off (the loop's are tested)."""
    llm = OpenAIChatModel(base_url=scripted.base_url, api_key=None, stall_timeout=0.5, max_retries=0)
    yield llm
    await llm.aclose()


@pytest.fixture
def directory() -> Directory:
    return Directory()


@pytest.fixture
def runner(directory: Directory) -> ToolRunner:
    """A runner offering `find_person` (a read: approvals are never asked)."""
    registry = ToolRegistry(
        [
            Tool(
                "find_person",
                "People",
                "Find a person by name.",
                Lookup,
                "people:read",
                False,
                directory.find,
            )
        ]
    )
    permissions = frozenset({"people:read"})
    context = ToolContext(
        member=member(), permissions=permissions, conversation_id=uuid.uuid4(), resources=None
    )
    approvals: ApprovalService = None  # type: ignore[assignment]
    return ToolRunner(registry.for_member(permissions), context, approvals)


def find(name: str, call_id: str) -> ScriptedToolCall:
    return ScriptedToolCall("find_person", {"name": name}, call_id=call_id)


async def run(
    model: OpenAIChatModel, runner: ToolRunner | None, settings: LoopSettings = FAST
) -> tuple[str, list[AnswerEvent]]:
    emitted: list[AnswerEvent] = []
    finish = await run_loop(model, MESSAGES, runner, settings, emitted.append)
    return finish, emitted


def text_of(emitted: list[AnswerEvent]) -> str:
    return "".join(event.content for event in emitted if isinstance(event, TextChunk))


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or ()]


async def test_a_text_answer_is_emitted_chunk_by_chunk_with_its_usage(
    model: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """Without tools, each streamed chunk (arriving apart) is one TextChunk, the usage is emitted, the finish reason is returned and the request carries the messages and no tools."""
    scripted.model.add(Reply(["Priya", " is", " in Lyon."], usage=(30, 5), chunk_delay=0.05))

    finish, emitted = await run(model, None)

    assert finish == "stop"
    assert emitted == [
        TextChunk("Priya"),
        TextChunk(" is"),
        TextChunk(" in Lyon."),
        UsageAdded(prompt_tokens=30, completion_tokens=5),
    ]
    (body,) = scripted.model.requests
    assert body["model"] == SCRIPTED_CHAT_MODEL
    assert body["messages"] == MESSAGES
    assert "tools" not in body


async def test_a_tool_round_runs_the_tool_and_feeds_its_result_back(
    model: OpenAIChatModel, scripted: ScriptedServer, runner: ToolRunner, directory: Directory
) -> None:
    """A tool call runs the tool (started, then finished), and the next request carries the assistant's call and the tool's envelope before the written answer."""
    scripted.model.add(Reply(tool_calls=[find("Priya", "call_1")]))
    scripted.model.add(Reply("She is in Lyon."))

    finish, emitted = await run(model, runner)

    assert finish == "stop"
    assert directory.asked == ["Priya"]
    started, finished = (e for e in emitted if isinstance(e, ToolStarted | ToolFinished))
    assert started == ToolStarted("call_1", "find_person", {"name": "Priya"})
    assert isinstance(finished, ToolFinished)
    assert finished.outcome.call_id == "call_1"
    assert finished.outcome.status == "ok"
    assert text_of(emitted) == "She is in Lyon."
    first, second = scripted.model.requests
    assert offered(first) == ["find_person"]
    assert second["messages"][:2] == MESSAGES
    call, result = second["messages"][2:]
    assert call["role"] == "assistant"
    assert call["tool_calls"] == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "find_person", "arguments": '{"name":"Priya"}'},
        }
    ]
    assert result["role"] == "tool"
    assert result["tool_call_id"] == "call_1"
    assert orjson.loads(result["content"]) == {"ok": True, "data": {"name": "Priya", "office": "Lyon"}}


async def test_a_failing_tool_gives_the_model_an_error_envelope(
    model: OpenAIChatModel, scripted: ScriptedServer, runner: ToolRunner
) -> None:
    """A tool that fails is an `error` outcome, and the model reads its error envelope, then answers."""
    scripted.model.add(Reply(tool_calls=[find("nobody", "call_1")]))
    scripted.model.add(Reply("I found no one."))

    _, emitted = await run(model, runner)

    (finished,) = (e for e in emitted if isinstance(e, ToolFinished))
    assert finished.outcome.status == "error"
    result = orjson.loads(scripted.model.requests[1]["messages"][-1]["content"])
    assert result["ok"] is False
    assert result["error"]["code"] == "not_found"
    assert text_of(emitted) == "I found no one."


async def test_text_after_a_tool_round_starts_a_new_paragraph(
    model: OpenAIChatModel, scripted: ScriptedServer, runner: ToolRunner
) -> None:
    """Text written before a tool call and text written after it are separated by a blank line, and the first round's text goes back to the model with its call."""
    scripted.model.add(Reply("Let me look.", tool_calls=[find("Priya", "call_1")]))
    scripted.model.add(Reply("She is in Lyon."))

    _, emitted = await run(model, runner)

    assert text_of(emitted) == "Let me look.\n\nShe is in Lyon."
    assert scripted.model.requests[1]["messages"][2]["content"] == "Let me look."


async def test_after_max_tool_rounds_one_last_round_is_offered_no_tools(
    model: OpenAIChatModel, scripted: ScriptedServer, runner: ToolRunner, directory: Directory
) -> None:
    """A model that keeps calling tools gets `max_tool_rounds` rounds, then one request without tools, whose answer ends the loop; calls it makes there anyway are not run."""
    scripted.model.add(Reply(tool_calls=[find("Priya", "call_a")]))
    scripted.model.add(Reply(tool_calls=[find("Omar", "call_b")]))
    scripted.model.add(Reply("Enough looking.", tool_calls=[find("Jane", "call_c")]))

    finish, emitted = await run(model, runner, LoopSettings(model=SCRIPTED_CHAT_MODEL, max_tool_rounds=2))

    assert directory.asked == ["Priya", "Omar"]
    assert [e.call_id for e in emitted if isinstance(e, ToolStarted)] == ["call_a", "call_b"]
    assert [offered(body) for body in scripted.model.requests] == [["find_person"], ["find_person"], []]
    assert text_of(emitted) == "Enough looking."
    assert finish == "tool_calls"


async def test_a_fault_before_any_text_is_retried(model: OpenAIChatModel, scripted: ScriptedServer) -> None:
    """A retryable fault (HTTP 503, then a stream that stalls before its first chunk) is retried, and the user sees the one answer that came through."""
    scripted.model.add(Reply(fault=Fault.http(503)))
    scripted.model.add(Reply("never seen", fault=Fault.stall(after=0, seconds=30)))
    scripted.model.add(Reply("Third time lucky."))

    finish, emitted = await run(model, None)

    assert finish == "stop"
    assert text_of(emitted) == "Third time lucky."
    assert len(scripted.model.requests) == 3


async def test_the_retries_are_bounded(model: OpenAIChatModel, scripted: ScriptedServer) -> None:
    """After `retries` retries of a fault the error propagates: 1 + retries requests in all."""
    scripted.model.add(Reply(fault=Fault.http(503)), times=None)

    with pytest.raises(LLMUnavailable):
        await run(model, None, LoopSettings(model=SCRIPTED_CHAT_MODEL, retries=3, retry_base_delay=0.001))

    assert len(scripted.model.requests) == 4


async def test_a_fault_after_a_tool_round_but_before_text_is_retried_without_running_the_tools_again(
    model: OpenAIChatModel, scripted: ScriptedServer, runner: ToolRunner, directory: Directory
) -> None:
    """A fault in the round after the tools ran (no text yet) is retried with the same history, tool results included; the tool ran once."""
    scripted.model.add(Reply(tool_calls=[find("Priya", "call_1")]))
    scripted.model.add(Reply(fault=Fault.http(500)))
    scripted.model.add(Reply("She is in Lyon."))

    _, emitted = await run(model, runner)

    assert directory.asked == ["Priya"]
    assert text_of(emitted) == "She is in Lyon."
    _, failed, retried = scripted.model.requests
    assert retried["messages"] == failed["messages"]
    assert retried["messages"][-1]["role"] == "tool"


async def test_a_fault_once_text_was_emitted_is_not_retried(
    model: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """A stream cut after the user saw part of the answer fails the answer: no retry, the partial text stays emitted."""
    scripted.model.add(Reply(["Half", " an", " answer"], fault=Fault.cut(after=2)))
    scripted.model.add(Reply("never asked for"))

    emitted: list[AnswerEvent] = []
    with pytest.raises(LLMUnavailable) as raised:
        await run_loop(model, MESSAGES, None, FAST, emitted.append)

    assert raised.value.retryable
    assert text_of(emitted) == "Half"
    assert len(scripted.model.requests) == 1


async def test_a_stall_mid_answer_is_not_retried(model: OpenAIChatModel, scripted: ScriptedServer) -> None:
    """A stream that stalls after it began fails at once: the stall already took the user's patience."""
    scripted.model.add(Reply(["Slow", " then", " silent"], fault=Fault.stall(after=2, seconds=30)))
    scripted.model.add(Reply("never asked for"))

    emitted: list[AnswerEvent] = []
    with pytest.raises(LLMStalled):
        await run_loop(model, MESSAGES, None, FAST, emitted.append)

    assert text_of(emitted) == "Slow"
    assert len(scripted.model.requests) == 1


async def test_a_refusal_that_retrying_cannot_fix_is_not_retried(
    model: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """HTTP 400 (the request itself is wrong) propagates after one request."""
    scripted.model.add(Reply(fault=Fault.http(400)))
    scripted.model.add(Reply("never asked for"))

    with pytest.raises(LLMUnavailable) as raised:
        await run(model, None)

    assert not raised.value.retryable
    assert len(scripted.model.requests) == 1


async def test_a_providers_retry_after_is_capped_by_the_longest_delay(
    model: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """A 429 asking for 60 s is retried after `retry_max_delay`, not after a minute."""
    scripted.model.add(Reply(fault=Fault.http(429, retry_after=60)))
    scripted.model.add(Reply("Back again."))

    started = time.monotonic()
    _, emitted = await run(model, None, LoopSettings(model=SCRIPTED_CHAT_MODEL, retry_max_delay=0.05))

    assert time.monotonic() - started < 5
    assert text_of(emitted) == "Back again."
    assert len(scripted.model.requests) == 2


async def test_max_tokens_goes_to_the_model(model: OpenAIChatModel, scripted: ScriptedServer) -> None:
    """`LoopSettings.max_tokens` is sent with every request of the answer."""
    scripted.model.add(Reply("Short."))

    await run(model, None, LoopSettings(model=SCRIPTED_CHAT_MODEL, max_tokens=64))

    (body,) = scripted.model.requests
    assert 64 in (body.get("max_tokens"), body.get("max_completion_tokens"))
