"""The conversation window: bounded, carried over, and rendered as OpenAI messages."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import orjson

from vernis.context.window import ConversationWindow, WindowCache, WindowEntry
from vernis.services.persistence import StoredMessage


def test_window_keeps_only_the_last_n() -> None:
    """Appending past the size drops the oldest entries."""
    window = ConversationWindow(3)
    for number in range(5):
        window.append(WindowEntry("user", f"m{number}"))
    assert [entry.content for entry in window] == ["m2", "m3", "m4"]


def test_copy_is_independent() -> None:
    """A rolled-over conversation's copy of the window does not change the original."""
    window = ConversationWindow(4, [WindowEntry("user", "a")])
    copy = window.copy()
    copy.append(WindowEntry("assistant", "b"))
    assert len(window) == 1
    assert len(copy) == 2


def test_tool_calls_render_as_call_and_result_pairs() -> None:
    """An assistant entry with tool calls becomes a tool_calls message, one tool message each, then its text."""
    call = {
        "call_id": "c1",
        "tool_name": "lookup",
        "arguments": {"q": "x"},
        "status": "ok",
        "result": {"ok": True},
    }
    window = ConversationWindow(
        10, [WindowEntry("user", "find x"), WindowEntry("assistant", "Found it.", (call,))]
    )
    messages = window.to_messages()
    assert messages[0] == {"role": "user", "content": "find x"}
    assert messages[1]["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q":"x"}'}
    assert messages[2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": orjson.dumps({"ok": True}).decode(),
    }
    assert messages[3] == {"role": "assistant", "content": "Found it."}


def test_empty_failed_answer_is_left_out() -> None:
    """An assistant entry with no text and no calls (an answer that failed at once) adds no message."""
    window = ConversationWindow(10, [WindowEntry("user", "hi"), WindowEntry("assistant", "")])
    assert window.to_messages() == [{"role": "user", "content": "hi"}]


def test_cache_builds_from_stored_messages() -> None:
    """The cache rebuilds a window from stored messages, keeping only the last `size`."""
    conversation = uuid.uuid4()
    stored = [
        StoredMessage(
            id=uuid.uuid4(),
            conversation_id=conversation,
            position=position,
            role="user" if position % 2 == 0 else "assistant",
            content=f"m{position}",
            tool_calls=None,
            status="complete",
            client_message_id=None,
            created_at=datetime.now(UTC),
        )
        for position in range(7)
    ]
    cache = WindowCache(5)
    window = cache.build(conversation, stored)
    assert [entry.content for entry in window] == ["m2", "m3", "m4", "m5", "m6"]
    assert cache.get(conversation) is window
