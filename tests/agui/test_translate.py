"""The sans-I/O translation of Vernis events into AG-UI events (`vernis.agui.translate`)."""

from __future__ import annotations

from typing import Any

import orjson
from ag_ui.core import Event, TextMessageContentEvent
from pydantic import TypeAdapter

from vernis.agui.translate import RunTranslator, question_schema, sse

EVENT = TypeAdapter(Event)


def wire(translator: RunTranslator, *frames: dict[str, Any]) -> list[dict[str, Any]]:
    """Every AG-UI event of `frames` as it goes on the wire, each checked against the models."""
    out = []
    for seq, frame in enumerate(frames, start=1):
        for event in translator.feed({**frame, "seq": seq}):
            data = orjson.loads(sse(event, seq).split("data: ", 1)[1])
            EVENT.validate_python(data)
            out.append(data)
    return out


def test_text_after_a_tool_round_is_a_new_message_and_reasoning_is_closed_before_text() -> None:
    """Reasoning opens and closes its own message; text before and after a tool call are two messages; the call carries the answer's message as parent."""
    run = RunTranslator("t", "r")
    events = wire(
        run,
        {"type": "assistant_start", "message_id": "m1"},
        {"type": "reasoning_delta", "content": "hmm"},
        {"type": "text_delta", "content": "Let me look."},
        {"type": "tool_call_started", "call_id": "c1", "tool_name": "search", "arguments": {"q": "x"}},
        {
            "type": "tool_call_completed",
            "call_id": "c1",
            "tool_name": "search",
            "status": "ok",
            "result": {"ok": True},
        },
        {"type": "text_delta", "content": "Found it."},
        {"type": "assistant_end", "message_id": "m1", "stopped": False},
    )
    assert [e["type"] for e in events] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]
    starts = [e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_START"]
    assert starts[0] == "m1"
    assert starts[1] != "m1"
    assert events[8]["parentMessageId"] == "m1"
    assert orjson.loads(events[9]["delta"]) == {"q": "x"}
    assert run.done
    assert run.finish().model_dump(by_alias=True) == {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}


def test_a_question_becomes_an_input_required_interrupt_with_a_schema() -> None:
    """`question_required` ends the run with an input_required interrupt whose responseSchema describes the answers by question type."""
    run = RunTranslator("t", "r")
    questions = [
        {"id": "size", "label": "Size", "type": "choice", "options": ["S", "M"], "required": True},
        {"id": "when", "label": "When", "type": "date"},
    ]
    wire(
        run,
        {"type": "assistant_start", "message_id": "m1"},
        {
            "type": "question_required",
            "question_id": "q1",
            "call_id": "c1",
            "title": "A few details",
            "questions": questions,
        },
        {"type": "assistant_end", "message_id": "m1", "stopped": False},
    )
    finished = run.finish().model_dump(mode="json", by_alias=True)
    (interrupt,) = finished["outcome"]["interrupts"]
    assert interrupt["reason"] == "input_required"
    assert interrupt["toolCallId"] == "c1"
    answers = interrupt["responseSchema"]["properties"]["answers"]
    assert answers["properties"]["size"]["enum"] == ["S", "M"]
    assert answers["required"] == ["size"]
    assert question_schema([])["required"] == ["answers"]


def test_an_error_ends_the_run_with_run_error_and_its_code() -> None:
    """An `error` published during the answer makes the run end with RUN_ERROR carrying the Vernis code."""
    run = RunTranslator("t", "r")
    wire(
        run,
        {"type": "assistant_start", "message_id": "m1"},
        {"type": "error", "code": "llm_unavailable", "message": "The model is unavailable."},
        {"type": "assistant_end", "message_id": "m1", "stopped": False},
    )
    assert run.finish().model_dump(by_alias=True) == {
        "type": "RUN_ERROR",
        "code": "llm_unavailable",
        "message": "The model is unavailable.",
    }


def test_a_page_tool_call_is_told_by_the_id_the_page_answers_and_ends_the_run() -> None:
    """A page tool's call shows once, when the page is asked, by the broker's call id (not the model's), and ends the run with a plain RUN_FINISHED."""
    run = RunTranslator("t", "r", frozenset({"navigate"}))
    events = wire(
        run,
        {"type": "assistant_start", "message_id": "m1"},
        {
            "type": "tool_call_started",
            "call_id": "model-1",
            "tool_name": "navigate",
            "arguments": {"path": "/"},
        },
        {"type": "client_tool_call", "call_id": "ct_9", "tool_name": "navigate", "arguments": {"path": "/"}},
    )
    assert [e["type"] for e in events] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert events[0]["toolCallId"] == "ct_9"
    assert run.done
    finished = run.finish().model_dump(by_alias=True)
    assert "outcome" not in finished
    assert run.pending == ["ct_9"]
    later = RunTranslator("t", "r2", frozenset({"navigate"}))
    completed = {"type": "tool_call_completed", "call_id": "model-1", "tool_name": "navigate", "status": "ok"}
    assert wire(later, completed) == []


def test_a_resumed_approval_ends_the_run_at_its_result_unless_an_answer_runs() -> None:
    """A run that resumed approvals ends when their calls completed, but follows an answer that started first to its end."""
    run = RunTranslator("t", "r")
    run.await_calls({"c1"})
    wire(
        run, {"type": "tool_call_completed", "call_id": "c1", "tool_name": "w", "status": "ok", "result": {}}
    )
    assert run.done
    following = RunTranslator("t", "r")
    following.await_calls({"c1"})
    wire(
        following,
        {"type": "assistant_start", "message_id": "m2"},
        {"type": "tool_call_completed", "call_id": "c1", "tool_name": "w", "status": "ok", "result": {}},
    )
    assert not following.done


def test_reopen_starts_again_the_text_message_a_resumed_client_was_reading() -> None:
    """After priming with what a client had, `reopen` gives the open text message's start by the same id, and nothing once it closed."""
    run = RunTranslator("t", "r")
    wire(run, {"type": "assistant_start", "message_id": "m1"}, {"type": "text_delta", "content": "Hel"})
    (start,) = run.reopen()
    assert start.model_dump(by_alias=True) == {
        "type": "TEXT_MESSAGE_START",
        "messageId": "m1",
        "role": "assistant",
    }
    wire(run, {"type": "assistant_end", "message_id": "m1", "stopped": False})
    assert run.reopen() == []


def test_a_text_delta_is_encoded_directly_as_its_model_would_be_and_old_seqs_are_dropped() -> None:
    """The direct encoding of TEXT_MESSAGE_CONTENT gives the model's own SSE bytes (quotes, control characters, non-ASCII), and an event at or below the last seq gives nothing."""
    run = RunTranslator("t", "r", seq=10)
    assert run.frame({"type": "assistant_start", "message_id": "m1", "seq": 9}) == ""
    run.frame({"type": "assistant_start", "message_id": "m1", "seq": 11})
    run.frame({"type": "text_delta", "content": "a", "seq": 12})
    for seq, content in enumerate(
        ['say "hi"\n', "tab\there \\ slash", "é ✓ 🙂 \u2028", "\x00\x1f"], start=13
    ):
        direct = run.frame({"type": "text_delta", "content": content, "seq": seq})
        assert direct == sse(TextMessageContentEvent(message_id="m1", delta=content), seq)
    assert run.frame({"type": "text_delta", "content": "again", "seq": 13}) == ""
    assert run.seq == 16


def test_a_stopped_run_is_cancelled_only_for_a_client_that_said_its_protocol_version() -> None:
    """A stopped answer ends the run with outcome cancelled for a 1.x client, and with a plain RUN_FINISHED for a client that sent no protocolVersion (a 0.x one, whose schema refuses `cancelled`)."""
    frames = (
        {"type": "assistant_start", "message_id": "m1"},
        {"type": "assistant_end", "message_id": "m1", "stopped": True},
    )
    current, older = RunTranslator("t", "r"), RunTranslator("t", "r", versioned=False)
    wire(current, *frames)
    wire(older, *frames)
    assert current.finish().model_dump(by_alias=True)["outcome"] == {"type": "cancelled"}
    assert "outcome" not in older.finish().model_dump(by_alias=True)
