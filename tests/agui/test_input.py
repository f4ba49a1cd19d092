"""A `RunAgentInput` body as the run Vernis acts on (`vernis.agui.input`), with no server."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest

from vernis.agui.input import MAX_CONTEXT_CHARS, MAX_CONTEXT_ENTRIES, BadInput, parse_run_input

THREAD = str(uuid.uuid4())


def body(*messages: dict[str, Any], **fields: Any) -> bytes:
    return orjson.dumps({"threadId": THREAD, "runId": "r1", "messages": list(messages), **fields})


def refused(raw: bytes) -> BadInput:
    with pytest.raises(BadInput) as caught:
        parse_run_input(raw)
    return caught.value


def test_the_last_user_message_is_the_new_one_and_its_text_parts_are_joined() -> None:
    """Of the history the client sends, the last user message is the run's, by its id; a multimodal one gives its text parts."""
    parts = [{"type": "text", "text": "look at"}, {"type": "text", "text": "this"}]
    _, request = parse_run_input(
        body(
            {"id": "u1", "role": "user", "content": "old"},
            {"id": "a1", "role": "assistant", "content": "answer"},
            {"id": "u2", "role": "user", "content": parts},
        )
    )
    assert request.thread_id == uuid.UUID(THREAD)
    assert request.message is not None
    assert (request.message.id, request.message.content) == ("u2", "look at\nthis")
    assert request.results == []


def test_tool_messages_at_the_end_are_results_and_earlier_ones_history() -> None:
    """Only the tool messages that end `messages` are results (JSON content read as data, `error` a failed call); one before the last assistant message is history."""
    _, request = parse_run_input(
        body(
            {"id": "u1", "role": "user", "content": "q"},
            {"id": "t0", "role": "tool", "toolCallId": "old", "content": "{}"},
            {"id": "a1", "role": "assistant", "content": ""},
            {"id": "t1", "role": "tool", "toolCallId": "c1", "content": '{"rows": [1]}'},
            {"id": "t2", "role": "tool", "toolCallId": "c2", "content": "not json", "error": "boom"},
        )
    )
    assert [(r.call_id, r.ok, r.data, r.error) for r in request.results] == [
        ("c1", True, {"rows": [1]}, None),
        ("c2", False, "not json", "boom"),
    ]


def test_tools_become_page_tools_with_write_from_metadata() -> None:
    """`tools` are the page's tools; a missing schema is an empty object schema; `metadata.write` marks a write."""
    tools = [
        {"name": "navigate", "description": "Go"},
        {
            "name": "save",
            "description": "Save",
            "parameters": {"type": "object"},
            "metadata": {"write": True},
        },
    ]
    _, request = parse_run_input(body({"id": "u", "role": "user", "content": "hi"}, tools=tools))
    assert request.tools is not None
    assert [(t.name, dict(t.parameters), t.writes) for t in request.tools] == [
        ("navigate", {"type": "object", "properties": {}}, False),
        ("save", {"type": "object"}, True),
    ]


def test_context_is_bounded_and_a_route_entry_names_the_page() -> None:
    """Past MAX_CONTEXT_ENTRIES entries are dropped and a long value cut, both counted; a `route` entry with a path is the page, not context."""
    context = [{"description": "route", "value": "/contacts/42"}]
    context += [{"description": f"d{i}", "value": str(i)} for i in range(MAX_CONTEXT_ENTRIES + 5)]
    context[3] = {"description": "long", "value": "y" * (MAX_CONTEXT_CHARS + 10)}
    _, request = parse_run_input(body({"id": "u", "role": "user", "content": "hi"}, context=context))
    assert request.route == "/contacts/42"
    assert len(request.context) == MAX_CONTEXT_ENTRIES - 1
    assert ("long", "y" * MAX_CONTEXT_CHARS) in request.context
    assert request.context_dropped == 6 + 1


def test_bad_bodies_are_refused_with_their_status_and_field() -> None:
    """Not a RunAgentInput is 422 naming the field; a threadId that is not a UUID 400; nothing to do 400; a resume of a non-UUID interrupt 404; an over-long message 400."""
    assert refused(b"{}").status == 422
    missing = refused(orjson.dumps({"threadId": THREAD, "messages": []}))
    assert missing.status == 422
    assert "runId" in missing.message
    assert refused(b"not json").status == 422
    not_uuid = orjson.dumps(
        {"threadId": "t-1", "runId": "r", "messages": [{"id": "u", "role": "user", "content": "x"}]}
    )
    assert refused(not_uuid).status == 400
    assert refused(body({"id": "a", "role": "assistant", "content": "x"})).status == 400
    resume = [{"interruptId": "nope", "status": "resolved"}]
    assert refused(body(resume=resume)).status == 404
    too_long = refused(body({"id": "u", "role": "user", "content": "x" * 8001}))
    assert (too_long.status, too_long.code) == (400, "message_too_long")
    assert refused(body({"id": "", "role": "user", "content": "x"})).status == 422
