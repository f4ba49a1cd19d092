"""The conversation window: bounded, carried over, and rendered as OpenAI messages."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import orjson

from vernis.conversation import tokens
from vernis.conversation.store import StoredMessage
from vernis.conversation.summaries import SummaryInfo
from vernis.conversation.window import ConversationWindow, WindowCache, WindowEntry


def test_a_full_window_is_cut_at_once_and_then_grows_unchanged() -> None:
    """A window past its size is due; `drop` takes the oldest entries in one go, down to `keep`; the start then stays put while it fills again."""
    window = ConversationWindow(4, keep=2)
    for number in range(5):
        window.append(WindowEntry("user", f"m{number}"))
    assert window.due
    assert window.drop() == 3
    assert [entry.content for entry in window] == ["m3", "m4"]
    assert not window.due
    window.append(WindowEntry("user", "m5"))
    window.append(WindowEntry("user", "m6"))
    assert [entry.content for entry in window] == ["m3", "m4", "m5", "m6"]
    assert not window.due


def test_a_cut_window_starts_at_a_user_message() -> None:
    """When the cut would open the window on an answer, it moves back to the user message before it."""
    window = ConversationWindow(5, keep=3)
    for number in range(6):
        window.append(WindowEntry("user" if number % 2 == 0 else "assistant", f"m{number}"))
    # The last three are m3 (an answer), m4, m5: the window opens at m2, the user's message m3 answers.
    assert window.cut() == 2
    window.drop()
    assert [entry.content for entry in window] == ["m2", "m3", "m4", "m5"]


def test_a_cut_without_a_user_message_before_it_moves_forward() -> None:
    """A window of answers only before the cut opens at the first user message after it."""
    entries = [WindowEntry("assistant", f"a{number}") for number in range(5)]
    window = ConversationWindow(5, entries, keep=2)
    window.append(WindowEntry("user", "u"))
    window.drop()
    assert [entry.content for entry in window] == ["u"]


def test_a_window_never_compacted_stops_at_twice_its_size() -> None:
    """A window nobody cuts (no answer ran on it) drops its older messages by itself at twice its size: memory stays bounded."""
    window = ConversationWindow(4, keep=2)
    for number in range(9):
        window.append(WindowEntry("user", f"m{number}"))
    assert len(window) <= 8


def test_compacted_keeps_the_summary_and_the_rest() -> None:
    """`compacted` takes the summarised entries out, keeps the summary, and a copy carries both over."""
    ids = [uuid.uuid4() for _ in range(6)]
    window = ConversationWindow(
        5, [WindowEntry("user" if n % 2 == 0 else "assistant", f"m{n}", (), ids[n]) for n in range(6)], keep=2
    )
    summary = SummaryInfo("- the user said m0", ids[3], 4, datetime.now(UTC))
    window.compacted(summary, window.cut())
    assert [entry.content for entry in window] == ["m4", "m5"]
    assert window.summary is summary
    assert window.copy().summary is summary
    assert window.tokens == sum(entry.tokens for entry in window)


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
    """The cache rebuilds a window from stored messages; past its size it is due, and its cut keeps the newest."""
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
    assert window.due
    window.drop()
    assert [entry.content for entry in window][-1] == "m6"
    assert cache.get(conversation) is window


def test_cache_is_bounded_by_the_bytes_it_holds() -> None:
    """The cache evicts the least recently used windows once the text they hold passes `max_bytes`, not by count."""
    cache = WindowCache(50, max_bytes=200_000)
    small = [uuid.uuid4() for _ in range(200)]
    for conversation in small:
        cache.build(conversation, [])
        cache.get(conversation).append(WindowEntry("user", "hi"))  # type: ignore[union-attr]
    assert len(cache) == 200  # 200 tiny windows fit in 200 KB
    big = uuid.uuid4()
    window = cache.build(big, [])
    for n in range(40):
        window.append(WindowEntry("assistant", "x" * 2_000, ({"call_id": f"c{n}", "result": "y" * 100},)))
    # Growing after it was put is accounted: the big window pushed the oldest small ones out.
    assert cache.get(big) is window
    assert cache.nbytes <= 200_000
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
    """A cut window's byte count drops what its oldest entries held."""
    window = ConversationWindow(2, [WindowEntry("user", "a" * 1000), WindowEntry("user", "b")], keep=1)
    window.append(WindowEntry("user", "c"))
    window.drop()
    assert window.nbytes == WindowEntry("user", "c").nbytes


def words(count: int) -> str:
    """`count` tokens of text in `o200k_base` (" apple" is one token)."""
    return " apple" * count


def exchange(number: int, tokens: int) -> list[WindowEntry]:
    return [WindowEntry("user", f"q{number}"), WindowEntry("assistant", f"a{number}:" + words(tokens))]


def test_tokens_are_counted_with_o200k() -> None:
    """Entries count their tokens with tiktoken's o200k_base, not by characters: 800 letters x are 100 tokens, 200 words 200."""
    assert tokens.count("x" * 800) == 100
    assert WindowEntry("user", words(200)).tokens == 200


def test_a_window_past_its_token_budget_is_due_though_not_full() -> None:
    """Past `budget` tokens the window is due though it holds fewer than `size`; the cut keeps the last `keep` messages; below it, it grows unchanged at its start."""
    window = ConversationWindow(50, keep=4, budget=1_000)
    for number in range(4):
        for entry in exchange(number, 200):
            window.append(entry)
    assert not window.due
    assert [entry.content[:2] for entry in window] == ["q0", "a0", "q1", "a1", "q2", "a2", "q3", "a3"]
    for entry in exchange(4, 200):
        window.append(entry)  # 1,000+ tokens: over
    assert window.due
    window.drop()
    assert [entry.content[:2] for entry in window] == ["q3", "a3", "q4", "a4"]
    assert window.tokens == sum(entry.tokens for entry in window) <= 1_000


def test_the_newest_exchange_alone_past_the_budget_is_kept_whole() -> None:
    """When the last `keep` messages alone pass half the budget, older exchanges among them go too, down to the newest one, which stays whole."""
    window = ConversationWindow(50, keep=6, budget=1_000)
    for number in range(2):
        for entry in exchange(number, 100):
            window.append(entry)
    for entry in exchange(2, 1_500):
        window.append(entry)
    window.drop()
    assert [entry.content[:2] for entry in window] == ["q2", "a2"]
    window.append(WindowEntry("user", "q3"))
    window.drop()
    assert [entry.content[:2] for entry in window] == ["q3"]


def test_the_providers_count_makes_the_window_due_sooner() -> None:
    """When the provider counted more tokens for the history than the estimate, the budget counts the difference until the next cut."""
    window = ConversationWindow(50, keep=2, budget=1_000)
    for entry in exchange(0, 300):
        window.append(entry)
    assert not window.due
    window.observe(1_200)
    assert window.due
    window.drop()
    assert not window.due


def test_a_message_alone_past_the_budget_is_sent_cut_with_a_note() -> None:
    """A 6,000-character paste after a 40 KB tool result, past a 1,000-token budget: the result is cut to its first lines and the paste by halves, each saying so; nothing is dropped."""
    result = {"rows": [{"id": n, "name": f"contact {n}", "notes": words(20)} for n in range(200)]}
    call = {"call_id": "c1", "tool_name": "export", "arguments": {}, "status": "ok", "result": result}
    paste = "\n".join(f"line {n}:{words(10)}" for n in range(100))
    window = ConversationWindow(
        50,
        [
            WindowEntry("user", "export them"),
            WindowEntry("assistant", "Here.", (call,)),
            WindowEntry("user", paste),
        ],
        budget=1_000,
    )
    messages = window.to_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert "[cut to its first lines" in messages[2]["content"]
    assert "Vernis cut this message to fit the context budget" in messages[-1]["content"]
    assert messages[-1]["content"].startswith("line 0:")
    assert sum(tokens.count(m["content"] or "") for m in messages) <= 1_000


def test_a_window_built_from_storage_past_the_budget_is_due() -> None:
    """A window rebuilt from stored messages past the budget is due, and its cut keeps the newest exchanges within half of it."""
    entries = [entry for number in range(10) for entry in exchange(number, 100)]
    window = ConversationWindow(50, entries, keep=4, budget=500)
    assert window.due
    window.drop()
    assert window.tokens <= 250
    assert [entry.content[:2] for entry in window][-2:] == ["q9", "a9"]
    assert next(iter(window)).role == "user"


def test_messages_are_kept_between_requests_and_follow_appends_and_cuts() -> None:
    """`to_messages` gives a new list each time, with the same message dictionaries for the entries it already had (none made anew per request); an appended entry's messages follow at the end, tool calls as call and result pairs; after a cut the list starts at the first entry kept."""
    call = {"call_id": "c1", "tool_name": "search", "arguments": {"q": "acme"}, "result": {"ok": True}}
    window = ConversationWindow(4, [WindowEntry("user", "a"), WindowEntry("assistant", "b")], keep=2)
    first = window.to_messages()
    window.append(WindowEntry("user", "c"))
    window.append(WindowEntry("assistant", "d", (call,)))
    second = window.to_messages()
    assert second is not first
    assert all(old is new for old, new in zip(first, second, strict=False))
    assert [m["role"] for m in second] == ["user", "assistant", "user", "assistant", "tool", "assistant"]
    assert second[3]["tool_calls"][0]["function"] == {"name": "search", "arguments": '{"q":"acme"}'}
    assert second[4] == {"role": "tool", "tool_call_id": "c1", "content": '{"ok":true}'}
    second.append({"role": "user", "content": "not the window's"})
    assert len(window.to_messages()) == 6
    window.append(WindowEntry("user", "e"))
    window.drop()
    assert [m.get("content") for m in window.to_messages()] == ["c", None, '{"ok":true}', "d", "e"]
