"""Upstream faults and provider quirks through the whole server (SPEC §9).

Each test drives a real Vernis over a real socket while the scripted model, on its own port,
misbehaves the way real providers do. Faults before the first token are retried into a normal
answer; faults after it end the answer with `llm_unavailable` and store the partial text as
`failed`, never `complete`. Storage is read back the way a client sees it: a reconnect's replay.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from tests.fixtures.server import Client, Vernis, VernisFactory, text_of, types_of
from tests.utils import free_port, squash
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Fault, Quirk, Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import last_user_text
from vernis.tools import Tool, ToolContext, Toolkit
from vernis.tools.catalog import Catalog


def is_chat(body: Mapping[str, Any]) -> bool:
    return body.get("model") == SCRIPTED_CHAT_MODEL


def chat_about(word: str) -> Callable[[Mapping[str, Any]], bool]:
    """Matches chat requests (not title requests) whose last user message contains `word`."""
    return lambda body: is_chat(body) and word in last_user_text(body)


def chat_requests(vernis: Vernis) -> list[dict[str, Any]]:
    return [body for body in vernis.scripted.requests if is_chat(body)]


async def first_answer(client: Client, content: str) -> list[dict[str, Any]]:
    """Send a conversation's first message; returns its events through `assistant_end`.

    Also reads the `title_updated` that follows every first exchange (even a failed one), so that
    nothing of this conversation is still in flight when a test reconnects to read the replay.
    """
    events = await client.answer(content)
    (title,) = await client.expect("title_updated")
    assert title["conversation_id"] == events[0]["conversation_id"]
    return events


async def replay(vernis: Vernis, email: str = "member@acme.test") -> list[dict[str, Any]]:
    """The `history_message` events a fresh socket gets for the member's latest conversation."""
    async with vernis.connect(email) as client:
        events = await client.until("history_end")
    assert events[0]["type"] == "conversation_loaded"
    return [e for e in events if e["type"] == "history_message"]


def assert_failed_after_text(events: list[dict[str, Any]], partial: str) -> dict[str, Any]:
    """The answer streamed `partial`, then ended with `llm_unavailable`; returns the error event."""
    assert squash(types_of(events)) == [
        "conversation_created",
        "assistant_start",
        "text_delta",
        "error",
        "assistant_end",
    ]
    assert text_of(events) == partial
    error, end = events[-2], events[-1]
    assert error["code"] == "llm_unavailable"
    assert end["stopped"] is False
    assert end["message_id"] == events[1]["message_id"]
    return error


async def assert_stored(vernis: Vernis, user: str, content: str, status: str) -> None:
    """The conversation holds exactly the user message and one assistant message in `status`."""
    history = await replay(vernis)
    assert [(m["role"], m["content"]) for m in history] == [("user", user), ("assistant", content)]
    assert history[1]["status"] == status


# --- faults before the first token: retried --------------------------------------------------


async def test_429_with_retry_after_is_retried_after_the_delay(vernis: Vernis) -> None:
    """A 429 with Retry-After before the first token is retried after that delay; the answer completes normally."""
    arrivals: list[float] = []

    def clock(body: Mapping[str, Any]) -> bool:
        if is_chat(body):
            arrivals.append(time.monotonic())
        return False

    vernis.scripted.add(Reply(), match=clock, times=None)
    vernis.scripted.add(Reply(fault=Fault.http(429, retry_after=1)), match=is_chat)
    vernis.scripted.add("Here are your calls.", match=is_chat)
    async with vernis.opened() as client:
        events = await first_answer(client, "show my calls")
    assert squash(types_of(events)) == [
        "conversation_created",
        "assistant_start",
        "text_delta",
        "assistant_end",
    ]
    assert text_of(events) == "Here are your calls."
    assert len(arrivals) == 2
    # The client's own backoff without the header would be at most 0.5 s.
    assert arrivals[1] - arrivals[0] >= 0.95
    await assert_stored(vernis, "show my calls", "Here are your calls.", "complete")


async def test_500_twice_then_success_is_one_normal_answer(vernis: Vernis) -> None:
    """Two HTTP 500s before the first token are retried; the user sees one normal answer, stored once."""
    vernis.scripted.add(Reply(fault=Fault.http(500)), match=is_chat, times=2)
    vernis.scripted.add("All good now.", match=is_chat)
    async with vernis.opened() as client:
        events = await first_answer(client, "status please")
    assert squash(types_of(events)) == [
        "conversation_created",
        "assistant_start",
        "text_delta",
        "assistant_end",
    ]
    assert text_of(events) == "All good now."
    assert [e.reply.fault is not None for e in vernis.scripted.exchanges if is_chat(e.body)] == [
        True,
        True,
        False,
    ]
    await assert_stored(vernis, "status please", "All good now.", "complete")


@pytest.mark.parametrize(
    "fault", [Fault.error_mid_stream(after=1), Fault.cut(after=1)], ids=["error-object", "cut"]
)
async def test_stream_fault_before_the_first_token_is_retried(vernis: Vernis, fault: Fault) -> None:
    """An error object or a cut connection before any text is retried; the user sees one normal answer."""
    vernis.scripted.add(Reply("never shown", fault=fault), match=is_chat)
    vernis.scripted.add("Second try worked.", match=is_chat)
    async with vernis.opened() as client:
        events = await first_answer(client, "try it")
    assert squash(types_of(events)) == [
        "conversation_created",
        "assistant_start",
        "text_delta",
        "assistant_end",
    ]
    assert text_of(events) == "Second try worked."
    assert len(chat_requests(vernis)) == 2
    await assert_stored(vernis, "try it", "Second try worked.", "complete")


async def test_500_on_every_attempt_ends_in_llm_unavailable(vernis_factory: VernisFactory) -> None:
    """A model that answers 500 to every attempt ends the answer with `llm_unavailable` and no text, never complete."""
    async with vernis_factory(llm_max_retries=1) as vernis:
        vernis.scripted.add(Reply(fault=Fault.http(500, retry_after=0.01)), match=is_chat, times=None)
        async with vernis.opened() as client:
            events = await first_answer(client, "anyone there?")
        assert types_of(events) == ["conversation_created", "assistant_start", "error", "assistant_end"]
        assert events[2]["code"] == "llm_unavailable"
        assert len(chat_requests(vernis)) > 1  # retried before giving up
        await assert_stored(vernis, "anyone there?", "", "failed")


# --- faults after the first token: llm_unavailable, partial stored as failed -----------------


async def test_error_object_mid_stream_after_text_fails_the_answer(vernis: Vernis) -> None:
    """An error object under HTTP 200 after some text ends with `llm_unavailable`; the partial text is stored failed."""
    vernis.scripted.add(
        Reply("One two three four five", fault=Fault.error_mid_stream(after=3)), match=is_chat
    )
    async with vernis.opened() as client:
        events = await first_answer(client, "count for me")
    error = assert_failed_after_text(events, "One two")
    # The provider's own words stay in the logs.
    assert "502" not in error["message"]
    assert "upstream provider" not in error["message"]
    await assert_stored(vernis, "count for me", "One two", "failed")


@pytest.mark.parametrize("keepalive", [None, 0.1], ids=["silent", "comment-keepalives"])
async def test_stall_after_text_ends_within_the_stall_timeout(
    vernis_factory: VernisFactory, keepalive: float | None
) -> None:
    """A stream that stops after some text (even one kept alive by `:` comments) ends with `llm_unavailable` within the stall timeout."""
    stall = 0.5
    async with vernis_factory(llm_stall_timeout=stall) as vernis:
        vernis.scripted.add(
            Reply("Alpha beta gamma delta", fault=Fault.stall(after=3, seconds=30, keepalive=keepalive)),
            match=is_chat,
        )
        async with vernis.opened() as client:
            await client.send("user_message", content="tell me slowly")
            events = await client.expect("conversation_created", "assistant_start")
            # The text before the stall: one delta, or one per read of the stream.
            while text_of(events) != "Alpha beta":
                events += await client.expect("text_delta")
            # The stalled chunk is due now: the error must come well before the default 2 s timeout.
            events += await client.expect("error", "assistant_end", timeout=stall + 1.0)
            await client.expect("title_updated")
        assert_failed_after_text(events, "Alpha beta")
        (exchange,) = [e for e in vernis.scripted.exchanges if is_chat(e.body)]
        # The upstream request was closed, not left hanging.
        await asyncio.wait_for(exchange.disconnected.wait(), 2)
        await assert_stored(vernis, "tell me slowly", "Alpha beta", "failed")


async def test_connection_cut_mid_answer_fails_the_answer(vernis: Vernis) -> None:
    """A connection cut after some text ends with `llm_unavailable`; the partial text is stored failed."""
    vernis.scripted.add(Reply("Red green blue yellow", fault=Fault.cut(after=3)), match=is_chat)
    async with vernis.opened() as client:
        events = await first_answer(client, "name colours")
    assert_failed_after_text(events, "Red green")
    await assert_stored(vernis, "name colours", "Red green", "failed")


async def test_stream_without_finish_reason_is_failed_never_complete(vernis: Vernis) -> None:
    """A stream that ends with [DONE] but no finish_reason is a truncated answer: `llm_unavailable`, stored failed."""
    vernis.scripted.add(Reply("Every word arrived here", fault=Fault.truncated()), match=is_chat)
    async with vernis.opened() as client:
        events = await first_answer(client, "say it all")
    assert_failed_after_text(events, "Every word arrived here")
    await assert_stored(vernis, "say it all", "Every word arrived here", "failed")


# --- the operator's faults: the message names the setting ------------------------------------


async def test_no_model_reachable_is_llm_not_configured_naming_the_base_url(
    vernis_factory: VernisFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """With nothing listening at the base URL, the answer is `llm_not_configured`: a plain sentence to the user, VERNIS_LLM_BASE_URL in the operator's log."""
    caplog.set_level(logging.WARNING, logger="vernis")
    async with vernis_factory(llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_max_retries=0) as vernis:
        async with vernis.opened() as client:
            events = await first_answer(client, "hello?")
        assert types_of(events) == ["conversation_created", "assistant_start", "error", "assistant_end"]
        assert events[2]["code"] == "llm_not_configured"
        assert events[2]["message"] == "The assistant is not available right now. Please try again later."
        assert "VERNIS_" not in events[2]["message"]
        assert "check VERNIS_LLM_BASE_URL" in caplog.text
        assert vernis.scripted.requests == []
        history = await replay(vernis)
        assert [(m["role"], m["content"], m["status"]) for m in history] == [
            ("user", "hello?", "complete"),
            ("assistant", "", "failed"),
        ]


async def test_http_401_is_llm_unavailable_naming_the_api_key(
    vernis: Vernis, caplog: pytest.LogCaptureFixture
) -> None:
    """An HTTP 401 is not retried and ends with `llm_unavailable`: a plain sentence to the user, VERNIS_LLM_API_KEY in the operator's log."""
    caplog.set_level(logging.WARNING, logger="vernis")
    vernis.scripted.add(Reply(fault=Fault.http(401)), match=is_chat, times=None)
    async with vernis.opened() as client:
        events = await first_answer(client, "hi")
    assert types_of(events) == ["conversation_created", "assistant_start", "error", "assistant_end"]
    assert events[2]["code"] == "llm_unavailable"
    assert events[2]["message"] == "The assistant could not answer just now. Please try again."
    assert "Incorrect API key" not in events[2]["message"]
    assert "check VERNIS_LLM_API_KEY" in caplog.text
    assert "HTTP 401" in caplog.text
    assert len(chat_requests(vernis)) == 1


async def test_each_answer_is_stored_exactly_once_whatever_the_fault(vernis: Vernis) -> None:
    """Answers retried, failed mid-stream and plain each leave exactly one assistant message in the replay."""
    vernis.scripted.add(Reply(fault=Fault.http(500, retry_after=0.01)), match=is_chat)
    vernis.scripted.add("First answer.", match=chat_about("first"))
    vernis.scripted.add(
        Reply("Second answer cut", fault=Fault.error_mid_stream(after=3)), match=chat_about("second")
    )
    vernis.scripted.add("Third answer.", match=chat_about("third"))
    async with vernis.opened() as client:
        await first_answer(client, "first question")
        for content in ("second question", "third question"):
            events = await client.answer(content)
            assert types_of(events).count("assistant_end") == 1
    history = await replay(vernis)
    assert [(m["role"], m["content"], m["status"]) for m in history] == [
        ("user", "first question", "complete"),
        ("assistant", "First answer.", "complete"),
        ("user", "second question", "complete"),
        ("assistant", "Second answer", "failed"),
        ("user", "third question", "complete"),
        ("assistant", "Third answer.", "complete"),
    ]
    assert len({m["message_id"] for m in history}) == 6


# --- provider quirks ---------------------------------------------------------------------------


class Query(BaseModel):
    q: str


class Probe:
    """A real read tool that records every run."""

    def __init__(self) -> None:
        self.runs: list[str] = []

    async def lookup(self, ctx: ToolContext[None], args: Query) -> dict[str, Any]:
        self.runs.append(args.q)
        return {"found": args.q}

    def catalog(self) -> Catalog:
        lookup = Tool(
            "lookup_contact", "Contacts", "Find a contact.", Query, "contact:list", False, self.lookup
        )
        return Catalog([Toolkit("probe", tools=[lookup], role_grants={"member": ["contact:list"]})])


@pytest.mark.parametrize(
    "quirks",
    [Quirk.WHOLE_TOOL_CALLS, Quirk.REPEAT_TOOL_CHUNK, Quirk.WHOLE_TOOL_CALLS | Quirk.REPEAT_TOOL_CHUNK],
    ids=["whole", "repeat", "whole+repeat"],
)
async def test_tool_call_quirks_run_the_tool_once(vernis_factory: VernisFactory, quirks: Quirk) -> None:
    """Whole tool calls in one chunk and repeated tool-call chunks give one call with its arguments once, run once."""
    probe = Probe()
    async with vernis_factory(catalog=probe.catalog()) as vernis:
        call = ScriptedToolCall("lookup_contact", {"q": "Priya Raman"}, call_id="call_q1")
        vernis.scripted.add(Reply(tool_calls=[call], quirks=quirks), match=is_chat)
        vernis.scripted.add("Priya is in your contacts.", match=is_chat)
        async with vernis.opened() as client:
            events = await first_answer(client, "find Priya")
        assert squash(types_of(events)) == [
            "conversation_created",
            "assistant_start",
            "tool_call_started",
            "tool_call_completed",
            "text_delta",
            "assistant_end",
        ]
        started, completed = events[2], events[3]
        assert (started["call_id"], started["tool_name"], started["arguments"]) == (
            "call_q1",
            "lookup_contact",
            {"q": "Priya Raman"},
        )
        assert completed["status"] == "ok"
        assert completed["result"] == {"ok": True, "data": {"found": "Priya Raman"}}
        assert probe.runs == ["Priya Raman"]
        follow_up = chat_requests(vernis)[1]["messages"]
        assert [m["tool_call_id"] for m in follow_up if m["role"] == "tool"] == ["call_q1"]


@pytest.mark.parametrize(
    "quirks",
    [
        Quirk.DOUBLE_FINISH,
        Quirk.COMMENT_LINES,
        Quirk.NO_USAGE,
        Quirk.REASONING,
        Quirk.DOUBLE_FINISH | Quirk.COMMENT_LINES | Quirk.NO_USAGE | Quirk.REASONING,
    ],
    ids=["double-finish", "comments", "no-usage", "reasoning", "all"],
)
async def test_text_quirks_give_the_text_once_and_complete(vernis: Vernis, quirks: Quirk) -> None:
    """A doubled finish chunk, comment lines, missing usage or reasoning text: the answer text arrives once, without reasoning (which goes apart, as reasoning_delta, SPEC §19), stored complete."""
    answer = "You have three calls today."
    reasoning = "SECRET-REASONING the user wants calls"
    vernis.scripted.add(Reply(answer, quirks=quirks, reasoning=reasoning), match=is_chat)
    async with vernis.opened() as client:
        events = await first_answer(client, "calls today?")
    assert squash(types_of(events)) == [
        "conversation_created",
        "assistant_start",
        "reasoning_delta",
        "text_delta",
        "assistant_end",
    ]
    assert text_of(events) == answer
    assert "".join(e["content"] for e in events if e["type"] == "reasoning_delta") == reasoning
    assert all("SECRET-REASONING" not in str(e) for e in events if e["type"] != "reasoning_delta")
    await assert_stored(vernis, "calls today?", answer, "complete")
