"""The conversation window: bounded, carried over, and rendered as OpenAI messages."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import orjson

from vernis.conversation.store import StoredMessage
from vernis.conversation.window import ConversationWindow, WindowCache, WindowEntry


def test_a_full_window_drops_its_oldest_at_once() -> None:
    """Appending past the size drops the oldest entries in one go, down to `keep`; the start then stays put while it fills again."""
    window = ConversationWindow(4, keep=2)
    for number in range(5):
        window.append(WindowEntry("user", f"m{number}"))
    assert [entry.content for entry in window] == ["m3", "m4"]
    window.append(WindowEntry("user", "m5"))
    window.append(WindowEntry("user", "m6"))
    assert [entry.content for entry in window] == ["m3", "m4", "m5", "m6"]


def test_a_dropped_window_starts_at_a_user_message() -> None:
    """When the cut would open the window on an answer, it moves back to the user message before it."""
    window = ConversationWindow(5, keep=3)
    for number in range(6):
        window.append(WindowEntry("user" if number % 2 == 0 else "assistant", f"m{number}"))
    # The last three are m3 (an answer), m4, m5: the window opens at m2, the user's message m3 answers.
    assert [entry.content for entry in window] == ["m2", "m3", "m4", "m5"]


def test_a_cut_without_a_user_message_before_it_moves_forward() -> None:
    """A window of answers only before the cut opens at the first user message after it."""
    entries = [WindowEntry("assistant", f"a{number}") for number in range(5)]
    window = ConversationWindow(5, entries, keep=2)
    window.append(WindowEntry("user", "u"))
    assert [entry.content for entry in window] == ["u"]


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
    """A full window's byte count drops what its oldest entries held when a new one pushes them out."""
    window = ConversationWindow(2, [WindowEntry("user", "a" * 1000), WindowEntry("user", "b")], keep=1)
    window.append(WindowEntry("user", "c"))
    assert window.nbytes == WindowEntry("user", "c").nbytes


def exchange(number: int, chars: int) -> list[WindowEntry]:
    return [WindowEntry("user", f"q{number}"), WindowEntry("assistant", f"a{number}:" + "x" * chars)]


def test_a_window_past_its_token_budget_drops_at_once_like_a_full_one() -> None:
    """Past `budget` estimated tokens (four characters each) the window drops to its last `keep` messages at once, though it holds fewer than `size`; below it, it grows unchanged at its start."""
    window = ConversationWindow(50, keep=4, budget=1_000)
    for number in range(4):
        for entry in exchange(number, 800):  # about 200 tokens an exchange
            window.append(entry)
    assert [entry.content[:2] for entry in window] == ["q0", "a0", "q1", "a1", "q2", "a2", "q3", "a3"]
    for entry in exchange(4, 800):
        window.append(entry)  # 1,000+ tokens: over
    assert [entry.content[:2] for entry in window] == ["q3", "a3", "q4", "a4"]
    assert window.tokens == sum(entry.tokens for entry in window) <= 1_000


def test_the_newest_exchange_alone_past_the_budget_is_kept_whole() -> None:
    """When the last `keep` messages alone pass the budget, older exchanges among them go too, down to the newest one, which stays whole."""
    window = ConversationWindow(50, keep=6, budget=1_000)
    for number in range(2):
        for entry in exchange(number, 400):
            window.append(entry)
    for entry in exchange(2, 6_000):  # a 6,000-character answer: 1,500 tokens on its own
        window.append(entry)
    assert [entry.content[:2] for entry in window] == ["q2", "a2"]
    window.append(WindowEntry("user", "q3"))
    assert [entry.content[:2] for entry in window] == ["q3"]


def test_a_window_built_from_storage_fits_the_budget() -> None:
    """A window rebuilt from stored messages keeps only the newest exchanges that fit the budget."""
    entries = [entry for number in range(10) for entry in exchange(number, 400)]
    window = ConversationWindow(50, entries, keep=4, budget=500)
    assert window.tokens <= 500
    assert [entry.content[:2] for entry in window][-2:] == ["q9", "a9"]
    assert next(iter(window)).role == "user"
