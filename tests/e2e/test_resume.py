"""Answers belong to the conversation, not the socket (SPEC §4): resume, replay, stop from anywhere."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from typing import Any

import pytest

from tests.data import store_of
from tests.fixtures.server import Vernis, VernisFactory, text_of, types_of
from vernis.answers import registry
from vernis.conversation.store import StoredMessage
from vernis.model.scripted import Reply

WORDS = " ".join(f"w{n}" for n in range(60))


async def stored(vernis: Vernis, conversation_id: str) -> list[StoredMessage]:
    async with store_of(vernis) as store:
        return await store.messages(uuid.UUID(conversation_id))


async def wait_for_status(
    vernis: Vernis, conversation_id: str, status: str, timeout: float = 10, *, with_text: bool = False
) -> StoredMessage:
    """The conversation's last message once it is an answer with `status` (and, `with_text`, some text)."""
    async with asyncio.timeout(timeout):
        while True:
            messages = await stored(vernis, conversation_id)
            last = messages[-1] if messages else None
            if (
                last
                and last.role == "assistant"
                and last.status == status
                and (last.content or not with_text)
            ):
                return last
            await asyncio.sleep(0.05)


def rebuild(events: list[dict[str, Any]], message_id: str) -> str:
    """The answer's text as a client shows it: history replaces, a resumed start restarts, deltas append."""
    text = ""
    current = None
    for event in events:
        if event["type"] == "history_message" and event["message_id"] == message_id:
            text = event["content"]
        elif event["type"] == "assistant_start":
            current = event["message_id"]
            if current == message_id:
                text = ""
        elif event["type"] == "text_delta" and current == message_id:
            text += event["content"]
    return text


async def test_closing_the_socket_does_not_cancel_the_answer(vernis: Vernis) -> None:
    """The asking socket closes mid-answer; the answer still runs to the end and is stored complete."""
    vernis.scripted.add(Reply(WORDS, chunk_delay=0.01), match="long")
    async with vernis.opened() as client:
        await client.send("user_message", content="a long one")
        events = await client.until("text_delta")
    conversation_id = events[0]["conversation_id"]
    message = await wait_for_status(vernis, conversation_id, "complete")
    assert message.content == WORDS


async def test_reconnect_mid_answer_resumes_with_nothing_lost_or_doubled(vernis: Vernis) -> None:
    """A client reconnecting mid-answer gets the history, a resumed start with the text so far, then the live rest."""
    vernis.scripted.add(Reply(WORDS, chunk_delay=0.02), match="long")
    async with vernis.opened() as client:
        await client.send("user_message", content="a long one")
        first = await client.until("text_delta")
        first += [await client.recv() for _ in range(5)]
    async with vernis.connect() as client:
        events = await client.until("assistant_end")
    kinds = types_of(events)
    assert kinds[:4] == ["conversation_loaded", "history_message", "history_end", "assistant_start"]
    assert events[1]["role"] == "user"
    assert events[3]["resumed"] is True
    message_id = events[3]["message_id"]
    assert message_id == first[1]["message_id"]
    assert rebuild(events, message_id) == WORDS
    assert events[2]["seq"] == events[3]["seq"] - 1
    seqs = [e["seq"] for e in events[3:]]
    assert seqs == sorted(set(seqs))
    message = await wait_for_status(vernis, events[0]["conversation_id"], "complete")
    assert message.content == WORDS


async def test_second_tab_joining_mid_answer_gets_the_same_answer(vernis: Vernis) -> None:
    """Another tab loading the conversation mid-answer ends with exactly the text of the first tab."""
    vernis.scripted.add(Reply(WORDS, chunk_delay=0.02), match="long")
    async with vernis.opened() as first, vernis.opened() as second:
        await first.send("user_message", content="a long one")
        started = await first.until("text_delta")
        await second.send("load_conversation", conversation_id=started[0]["conversation_id"])
        joined = await second.until("assistant_end")
        whole = started + await first.until("assistant_end")
    message_id = started[1]["message_id"]
    assert text_of(whole) == WORDS
    assert rebuild(joined, message_id) == WORDS


async def test_after_seq_sends_exactly_the_missed_events(vernis: Vernis) -> None:
    """Reconnecting with after_seq inside the window gets exactly the events after it, in order, then the live rest."""
    vernis.scripted.add(Reply(WORDS, chunk_delay=0.02), match="long")
    async with vernis.opened() as client:
        await client.send("user_message", content="a long one")
        seen = await client.until("text_delta")
        seen += [await client.recv() for _ in range(3)]
    conversation_id = seen[0]["conversation_id"]
    # While this tab is away the answer goes on: another tab shows it five events past the cut.
    async with vernis.connect(query=f"?conversation_id={conversation_id}") as watcher:
        while (await watcher.recv()).get("seq", 0) <= seen[-1]["seq"] + 5:
            pass
    async with vernis.connect(
        query=f"?conversation_id={conversation_id}&after_seq={seen[-1]['seq']}"
    ) as client:
        loaded = await client.recv()
        rest = await client.until("assistant_end")
    assert loaded == {
        "type": "conversation_loaded",
        "conversation_id": conversation_id,
        "title": None,
        "resumed": True,
    }
    seqs = [e["seq"] for e in rest]
    assert seqs == list(range(seen[-1]["seq"] + 1, seen[-1]["seq"] + 1 + len(rest)))
    assert text_of(seen) + text_of(rest) == WORDS


async def test_after_seq_outside_the_window_reloads_everything(vernis: Vernis) -> None:
    """A resume the server cannot serve exactly gives the full history with resumed: false."""
    async with vernis.opened() as client:
        events = await client.answer("hello")
        await client.until("title_updated")
        conversation_id = events[0]["conversation_id"]
        await client.send("load_conversation", conversation_id=conversation_id, after_seq=1)
        loaded, _, assistant, end = await client.expect(
            "conversation_loaded", "history_message", "history_message", "history_end"
        )
    assert loaded["resumed"] is False
    assert assistant["content"] == text_of(events)
    assert end["seq"] >= events[-1]["seq"]


async def test_stop_from_another_tab(vernis: Vernis) -> None:
    """A second tab showing the conversation stops the answer; both tabs see assistant_end stopped, the partial is stored."""
    vernis.scripted.add(Reply(WORDS, chunk_delay=0.03), match="long")
    async with vernis.opened() as first, vernis.opened() as second:
        await first.send("user_message", content="a long one")
        started = await first.until("text_delta")
        conversation_id = started[0]["conversation_id"]
        await second.send("load_conversation", conversation_id=conversation_id)
        await second.until("text_delta")
        await second.send("stop")
        end_second = (await second.until("assistant_end"))[-1]
        whole = started + await first.until("assistant_end")
    assert end_second["stopped"] is True
    assert whole[-1]["stopped"] is True
    message = await wait_for_status(vernis, conversation_id, "stopped")
    assert message.content == text_of(whole)
    assert 0 < len(message.content) < len(WORDS)


async def test_partial_answer_is_flushed_while_streaming(vernis: Vernis) -> None:
    """While an answer streams, storage holds its text so far (flushed about once a second), marked streaming."""
    vernis.scripted.add(Reply(WORDS, chunk_delay=0.05), match="long")
    async with vernis.opened() as client:
        await client.send("user_message", content="a long one")
        events = await client.until("text_delta")
        # Its row exists from the start (empty); within about a second it holds the text so far.
        message = await wait_for_status(
            vernis, events[0]["conversation_id"], "streaming", timeout=2.5, with_text=True
        )
        assert message.content
        assert WORDS.startswith(message.content)
        assert message.id == uuid.UUID(events[1]["message_id"])
        await client.until("assistant_end")


async def test_more_answers_than_one_flush_takes_are_all_flushed(
    vernis: Vernis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five answers streaming at once, the flush writing two a transaction (FLUSH_ROWS): within about a second each one's row holds its text so far, marked streaming, and each ends complete."""
    monkeypatch.setattr(registry, "FLUSH_ROWS", 2)
    vernis.scripted.add(Reply(WORDS, chunk_delay=0.05), match="long", times=None)
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(vernis.opened()) for _ in range(5)]
        for client in clients:
            await client.send("new_conversation")
            await client.until("history_end")
            await client.send("user_message", content="a long one")
        conversations = [(await client.until("text_delta"))[0]["conversation_id"] for client in clients]
        for conversation_id in conversations:
            message = await wait_for_status(vernis, conversation_id, "streaming", timeout=2.5, with_text=True)
            assert WORDS.startswith(message.content)
        for client in clients:
            await client.until("assistant_end")
    for conversation_id in conversations:
        assert (await wait_for_status(vernis, conversation_id, "complete")).content == WORDS


async def test_one_answer_at_a_time_across_tabs(vernis: Vernis) -> None:
    """While one tab's answer streams, a message from another tab in that conversation gets response_in_progress."""
    vernis.scripted.add(Reply(WORDS, chunk_delay=0.02), match="long")
    async with vernis.opened() as first, vernis.opened() as second:
        await first.send("user_message", content="a long one")
        started = await first.until("text_delta")
        await second.send("load_conversation", conversation_id=started[0]["conversation_id"])
        await second.until("text_delta")
        await second.send("user_message", content="me too")
        events = await second.until("error")
        assert events[-1]["code"] == "response_in_progress"
        await first.until("assistant_end")
        # Read to the end like a browser tab; an unread websockets client stops reading its socket.
        await second.until("assistant_end")


async def cut_and_resume(vernis: Vernis, rng: random.Random, use_after_seq: bool) -> tuple[str, str, str]:
    """One run: cut the socket after a random number of events, reconnect, rebuild the answer."""
    async with vernis.opened() as client:
        await client.send("new_conversation")
        await client.until("history_end")
        await client.send("user_message", content="a long one")
        seen: list[dict[str, Any]] = []
        for _ in range(rng.randint(1, 40)):
            seen.append(await client.recv())
            if seen[-1]["type"] == "assistant_end":
                break
    conversation_id = seen[0]["conversation_id"]
    message_id = next((e["message_id"] for e in seen if e["type"] == "assistant_start"), None)
    if rng.random() < 0.3:
        await asyncio.sleep(rng.uniform(0, 0.05))
    query = f"?conversation_id={conversation_id}"
    if use_after_seq:
        query += f"&after_seq={seen[-1]['seq']}"
    async with vernis.connect(query=query) as client:
        events = [await client.recv()]
        if events[0].get("resumed") is not True:
            events += await client.until("history_end")
        answer_done = any(e["type"] == "assistant_end" for e in seen) or any(
            e["type"] == "history_message" and e["role"] == "assistant" for e in events
        )
        if not answer_done:
            events += await client.until("assistant_end")
    if message_id is None:
        message_id = next(
            e["message_id"]
            for e in events
            if e["type"] in ("assistant_start", "history_message")
            and e.get("role", "assistant") == "assistant"
        )
    if use_after_seq and events[0].get("resumed") is True:
        text = rebuild(seen, message_id) + text_of(events)
    else:
        text = rebuild(events, message_id)
    message = await wait_for_status(vernis, conversation_id, "complete")
    return text, message.content, str(message.id)


@pytest.mark.slow
async def test_200_random_cuts_lose_nothing_and_double_nothing(vernis_factory: VernisFactory) -> None:
    """Cutting the socket at 200 random points and reconnecting (half with after_seq) always rebuilds exactly the stored answer."""
    rng = random.Random(20261122)
    async with vernis_factory(rate_limit="10000/60", member_rate_limit="10000/60") as vernis:
        vernis.scripted.add(
            Reply(" ".join(f"t{n}" for n in range(30)), chunk_delay=0.001), match="long", times=None
        )
        mismatches = []
        for run in range(200):
            text, stored_text, _ = await cut_and_resume(vernis, rng, use_after_seq=run % 2 == 0)
            if text != stored_text:
                mismatches.append((run, text, stored_text))
    assert mismatches == []
