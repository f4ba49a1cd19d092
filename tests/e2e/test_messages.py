"""What the socket does with each frame (SPEC §3, §4): errors, limits, one answer at a time."""

from __future__ import annotations

import orjson

from tests.data import demo_member, store_of
from tests.fixtures.server import Vernis, VernisFactory, text_of
from vernis.model.scripted import Reply


async def stored_messages(vernis: Vernis, email: str = "member@acme.test") -> list[tuple[str, str, str]]:
    async with store_of(vernis) as store:
        member = demo_member(vernis, email)
        conversations, _ = await store.list_conversations(member.id, member.organization_id, limit=100)
        rows = []
        for conversation in reversed(conversations):
            rows += [(m.role, m.content, m.status) for m in await store.messages(conversation.id)]
        return rows


async def test_malformed_frames_get_errors_and_the_socket_stays_open(vernis: Vernis) -> None:
    """Bad JSON, unknown types, bad fields, binary frames and over-long content each get one error; ping still works."""
    async with vernis.opened() as client:
        cases = [
            ("{oops", "invalid_message"),
            ('"just a string"', "invalid_message"),
            ('{"type": "teleport"}', "invalid_message"),
            ('{"type": "user_message"}', "invalid_message"),
            ('{"type": "user_message", "content": 42}', "invalid_message"),
            ('{"type": "load_conversation", "conversation_id": "not-a-uuid"}', "invalid_message"),
            (orjson.dumps({"type": "user_message", "content": "x" * 8001}).decode(), "message_too_long"),
        ]
        for frame, code in cases:
            await client.send_raw(frame)
            (error,) = await client.expect("error")
            assert error["code"] == code, frame
            assert "Traceback" not in error["message"]
        await client.send_raw(b'{"type": "ping"}')
        (binary,) = await client.expect("error")
        assert binary["code"] == "invalid_message"
        await client.send("ping")
        await client.expect("pong")
    assert await stored_messages(vernis) == []


async def test_eleventh_message_in_a_minute_is_rate_limited_and_not_stored(vernis: Vernis) -> None:
    """Ten messages in 60 s are answered; the eleventh gets rate_limited with retry_after_ms and is neither answered nor stored."""
    async with vernis.opened() as client:
        for number in range(10):
            events = await client.answer(f"message {number}")
            assert events[-1]["type"] == "assistant_end"
        await client.send("user_message", content="one too many")
        error = (await client.until("error"))[-1]
        assert error["code"] == "rate_limited"
        assert 0 < error["retry_after_ms"] <= 60_000
        await client.silent(0.3)
    stored = await stored_messages(vernis)
    assert [content for role, content, _ in stored if role == "user"] == [f"message {n}" for n in range(10)]


async def test_member_limit_spans_all_sockets(vernis_factory: VernisFactory) -> None:
    """The per-member limit counts messages from all of that member's sockets."""
    async with (
        vernis_factory(member_rate_limit="3/60") as vernis,
        vernis.opened() as first,
        vernis.opened() as second,
    ):
        await first.answer("one")
        await second.send("load_conversation", conversation_id=(await stored_ids(vernis))[0])
        await second.until("history_end")
        await second.answer("two")
        await first.until("assistant_end")
        await first.answer("three")
        await second.until("assistant_end")
        await second.send("user_message", content="four")
        error = (await second.until("error"))[-1]
        assert error["code"] == "rate_limited"
        assert error["retry_after_ms"] > 0


async def stored_ids(vernis: Vernis, email: str = "member@acme.test") -> list[str]:
    async with store_of(vernis) as store:
        member = demo_member(vernis, email)
        conversations, _ = await store.list_conversations(member.id, member.organization_id)
        return [str(c.id) for c in conversations]


async def test_second_message_while_answering_is_response_in_progress(vernis: Vernis) -> None:
    """A message sent while the answer streams gets response_in_progress; the answer finishes untouched."""
    vernis.scripted.add(Reply("one two three four five six", chunk_delay=0.05), match="slow")
    async with vernis.opened() as client:
        await client.send("user_message", content="slow please")
        await client.until("text_delta")
        await client.send("user_message", content="are you done?")
        events = await client.until("assistant_end")
        errors = [e for e in events if e["type"] == "error"]
        assert [e["code"] for e in errors] == ["response_in_progress"]
    stored = await stored_messages(vernis)
    assert [(role, content) for role, content, _ in stored] == [
        ("user", "slow please"),
        ("assistant", "one two three four five six"),
    ]


async def test_repeated_client_message_id_is_answered_once(vernis: Vernis) -> None:
    """The same client_message_id sent twice (a resend after reconnect) is stored and answered once."""
    async with vernis.opened() as client:
        await client.answer("book a cleaning", client_message_id="c-1")
        # The title comes in the background: awaited here, so that it cannot reach the next socket.
        await client.until("title_updated")
    async with vernis.opened() as client:
        await client.send("user_message", content="book a cleaning", client_message_id="c-1")
        await client.silent(0.5)
        await client.send("ping")
        await client.expect("pong")
    stored = await stored_messages(vernis)
    assert [role for role, _, _ in stored] == ["user", "assistant"]


async def test_new_conversation_is_pending_until_the_first_message(vernis: Vernis) -> None:
    """new_conversation stores nothing; the next message creates and announces the conversation."""
    async with vernis.opened() as client:
        await client.answer("first topic")
        await client.send("new_conversation")
        loaded, end = await client.expect("conversation_loaded", "history_end")
        assert loaded["conversation_id"] is None
        assert end["conversation_id"] is None
        assert len(await stored_ids(vernis)) == 1
        events = await client.answer("second topic")
        assert events[0]["type"] == "conversation_created"
    assert len(await stored_ids(vernis)) == 2


async def test_stop_ends_the_answer_and_keeps_what_was_written(vernis: Vernis) -> None:
    """stop cancels the answer: assistant_end says stopped, and the partial text is stored as stopped."""
    vernis.scripted.add(Reply(" ".join(f"w{n}" for n in range(200)), chunk_delay=0.02), match="long")
    async with vernis.opened() as client:
        await client.send("user_message", content="a long answer please")
        before = await client.until("text_delta")
        await client.send("stop")
        events = before + await client.until("assistant_end")
        assert events[-1]["stopped"] is True
        written = text_of(events)
        assert written
        # Nothing of the answer arrives after assistant_end (a title may).
        later = await client.drain(0.3)
        assert {event["type"] for event in later} <= {"title_updated"}
    stored = await stored_messages(vernis)
    assert stored[-1] == ("assistant", written, "stopped")


async def test_events_of_one_answer_are_numbered_in_order(vernis: Vernis) -> None:
    """Every event of a conversation, answers and titles alike, carries the next seq: one more than the last."""
    async with vernis.opened() as client:
        first = await client.answer("one")
        first += await client.until("title_updated")
        second = await client.answer("two")
        seqs = [e["seq"] for e in first + second]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
