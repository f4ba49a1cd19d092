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


def test_cache_is_bounded_by_the_bytes_it_holds() -> None:
    """The cache evicts the least recently used windows once the text they hold passes `max_bytes`, not by count."""
    cache = WindowCache(50, max_bytes=100_000)
    small = [uuid.uuid4() for _ in range(200)]
    for conversation in small:
        cache.build(conversation, [])
        cache.get(conversation).append(WindowEntry("user", "hi"))  # type: ignore[union-attr]
    assert len(cache) == 200  # 200 tiny windows fit in 100 KB
    big = uuid.uuid4()
    window = cache.build(big, [])
    for n in range(40):
        window.append(WindowEntry("assistant", "x" * 2_000, ({"call_id": f"c{n}", "result": "y" * 100},)))
    # Growing after it was put is accounted: the big window pushed the oldest small ones out.
    assert cache.get(big) is window
    assert cache.nbytes <= 100_000
    assert window.nbytes > 80_000
    assert cache.get(small[0]) is None
    assert cache.get(small[-1]) is not None


def test_a_window_larger_than_the_cache_is_not_kept() -> None:
    """A single window bigger than the whole budget is dropped from the cache (rebuilt from storage when needed)."""
    cache = WindowCache(50, max_bytes=10_000)
    conversation = uuid.uuid4()
    window = cache.build(conversation, [])
    window.append(WindowEntry("user", "x" * 20_000))
    assert cache.get(conversation) is None
    assert cache.nbytes == 0
    assert [entry.content for entry in window] == ["x" * 20_000]


def test_bytes_follow_entries_leaving_the_window() -> None:
    """A full window's byte count drops what its oldest entry held when a new one pushes it out."""
    window = ConversationWindow(2, [WindowEntry("user", "a" * 1000), WindowEntry("user", "b")])
    before = window.nbytes
    window.append(WindowEntry("user", "c"))
    assert window.nbytes == before - 999
