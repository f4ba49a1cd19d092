"""Two Vernis instances on one PostgreSQL and one Redis (SPEC §10), each a real uvicorn server with
its own app, hub and connections; clients connect to either, as behind a load balancer without
sticky sessions.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.data import add_notification, is_read
from tests.e2e.test_approvals import audit, preview
from tests.e2e.test_resume import rebuild, stored, wait_for_status
from tests.fixtures.redis import OwnRedis
from tests.fixtures.server import Client, Vernis, VernisFactory, text_of
from vernis.model.scripted import Reply
from vernis.model.scripted.scenarios import last_user_text, without_context

WORDS = " ".join(f"w{n}" for n in range(80))


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """Several instances share one PostgreSQL."""
    name: str = request.param
    return name


Pair = tuple[Vernis, Vernis]


async def show(client: Client, conversation_id: str) -> None:
    """The tab loads the conversation (as the other tab's history), through its history's end."""
    await client.send("load_conversation", conversation_id=conversation_id)
    await client.until("history_end")


@pytest.fixture
def pair(vernis_factory: VernisFactory, redis_url: str, redis_prefix: str) -> object:
    @asynccontextmanager
    async def start(**settings: object) -> AsyncIterator[Pair]:
        shared = {"redis_url": redis_url, "redis_prefix": redis_prefix, **settings}
        async with vernis_factory(**shared) as one, vernis_factory(**shared) as two:
            yield one, two

    return start


async def test_a_tab_on_the_other_instance_sees_every_delta_in_order(pair: object) -> None:
    """A tab on instance B showing the conversation receives the answer running on A: the same deltas, in order, seqs growing, none twice."""
    async with pair() as (one, two):  # type: ignore[operator]
        one.scripted.add(Reply(WORDS, chunk_delay=0.01), match="long")
        async with one.opened() as asking, two.opened() as watching:
            await asking.send("user_message", content="a long one")
            started = await asking.until("text_delta")
            conversation_id = started[0]["conversation_id"]
            await watching.send("load_conversation", conversation_id=conversation_id)
            seen = await watching.until("assistant_end")
            asked = started + await asking.until("assistant_end")
        assert text_of(asked) == WORDS
        assert rebuild(seen, asked[-1]["message_id"]) == WORDS
        seqs = [e["seq"] for e in seen if "seq" in e and e["type"] != "history_end"]
        assert seqs == sorted(set(seqs))


async def test_resume_on_the_other_instance_at_random_cut_points(pair: object) -> None:
    """Cut on A at a random point of the answer, resumed on B with after_seq: the client's text equals the stored text, nothing lost or doubled (5 cuts)."""
    rng = random.Random(11)
    async with pair() as (one, two):  # type: ignore[operator]
        for _ in range(5):
            one.scripted.add(Reply(WORDS, chunk_delay=0.01), match="long")
            async with one.opened() as client:
                await client.send("new_conversation")
                await client.until("history_end")
                await client.send("user_message", content="a long one")
                events = await client.until("assistant_start")
                for _ in range(rng.randrange(1, 60)):
                    events.append(await client.recv())
            conversation_id = events[0]["conversation_id"]
            message_id = next(e["message_id"] for e in events if e["type"] == "assistant_start")
            last_seq = max(e["seq"] for e in events if "seq" in e)
            query = f"?conversation_id={conversation_id}&after_seq={last_seq}"
            async with two.connect(query=query) as resumed:
                events += await resumed.until("assistant_end")
            assert rebuild(events, message_id) == WORDS
            message = await wait_for_status(one, conversation_id, "complete")
            assert message.content == WORDS


async def test_one_answer_per_conversation_across_instances(pair: object) -> None:
    """While an answer runs on A, a message for that conversation sent through B gets response_in_progress."""
    async with pair() as (one, two):  # type: ignore[operator]
        one.scripted.add(Reply(WORDS, chunk_delay=0.02), match="long")
        async with one.opened() as first, two.opened() as second:
            await first.send("user_message", content="a long one")
            started = await first.until("text_delta")
            await second.send("load_conversation", conversation_id=started[0]["conversation_id"])
            await second.until("text_delta")
            await second.send("user_message", content="me too")
            events = await second.until("error")
            assert events[-1]["code"] == "response_in_progress"
            await first.until("assistant_end")
            await second.until("assistant_end")


async def test_stop_from_the_other_instance(pair: object) -> None:
    """`stop` sent to B stops the answer running on A: both tabs see assistant_end stopped, the partial text is stored stopped."""
    async with pair() as (one, two):  # type: ignore[operator]
        one.scripted.add(Reply(WORDS, chunk_delay=0.03), match="long")
        async with one.opened() as first, two.opened() as second:
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
        message = await wait_for_status(one, conversation_id, "stopped")
        assert message.content == text_of(whole)
        assert 0 < len(message.content) < len(WORDS)


async def test_two_tabs_on_two_instances_approving_at_once_write_once(pair: object) -> None:
    """The same preview approved at the same moment from a tab on A and a tab on B: the write runs once, one tab gets the result and the other not_found."""
    async with pair() as (one, two):  # type: ignore[operator]
        notification_id = await add_notification(one)
        async with one.opened() as first:
            confirmation, events = await preview(first, one, notification_id)
            conversation_id = events[0]["conversation_id"]
            async with two.opened() as second:
                await show(second, conversation_id)
                command = {"confirmation_id": confirmation["confirmation_id"], "approved": True}
                await asyncio.gather(
                    first.send("confirm_tool", **command), second.send("confirm_tool", **command)
                )
                # A loaded machine may take a while to answer both: quiet for longer than usual.
                outcomes = [e["type"] for e in await first.drain(1.5) + await second.drain(0.5)]
        assert await is_read(one, notification_id)
        assert await audit(one) == [("mark_notification_read", "ok")]
        assert outcomes.count("error") == 1, outcomes


async def test_the_member_rate_limit_holds_across_instances(pair: object) -> None:
    """With a member limit of 2 messages a minute, one message through A and one through B pass, the third (through A) is refused with retry_after_ms."""
    async with pair(member_rate_limit="2/60") as (one, two):  # type: ignore[operator]
        async with one.opened() as first, two.opened() as second:
            await first.answer("hello")
            await second.send("new_conversation")
            await second.until("history_end")
            await second.answer("hello again")
            await first.send("user_message", content="and again")
            refused = (await first.until("error"))[-1]
        assert refused["code"] == "rate_limited"
        assert refused["retry_after_ms"] > 0


async def test_the_socket_cap_holds_across_instances(pair: object) -> None:
    """With two sockets per member, one on A and one on B are accepted and a third on either is refused (HTTP 403)."""
    async with pair(max_sockets_per_member=2) as (one, two):  # type: ignore[operator]
        async with one.opened(), two.opened():
            for instance in (one, two):
                with pytest.raises(Exception, match="403"):
                    async with instance.connect():
                        pass
        # Closed sockets leave the count: a new one is accepted again.
        async with two.opened():
            pass


async def test_stored_answers_of_both_instances_are_one_history(pair: object) -> None:
    """An exchange on A, then a message on B in the same conversation: B's answer is asked with A's exchange in its context."""
    async with pair() as (one, two):  # type: ignore[operator]
        async with one.opened() as first:
            events = await first.answer("remember the word apricot")
            conversation_id = events[0]["conversation_id"]
        async with two.opened() as second:
            await show(second, conversation_id)
            await second.answer("which word?")
        last_request = one.scripted.requests[-1]
        contents = [m.get("content") for m in last_request["messages"]]
        assert "remember the word apricot" in contents
        messages = await stored(one, conversation_id)
        assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
        assert uuid.UUID(conversation_id)


async def test_an_instance_reads_anew_a_conversation_the_other_added_to(pair: object) -> None:
    """A answers, then B answers in the same conversation, then A again on the socket that stayed open: A's request holds B's exchange (A held the conversation's window in memory, and B's lease came between), and A's next one holds all three."""
    async with pair() as (one, two):  # type: ignore[operator]
        async with one.opened() as first:
            events = await first.answer("remember the word apricot")
            conversation_id = events[0]["conversation_id"]
            async with two.opened() as second:
                await show(second, conversation_id)
                await second.answer("remember the word banana")
            await first.until("assistant_end")  # B's answer, seen live on A
            await first.answer("which words?")
            await first.answer("and once more?")
        asked = [
            [m.get("content") for m in without_context(request["messages"])]
            for request in one.scripted.requests
            if last_user_text(request) in ("which words?", "and once more?")
            and request["messages"][-1]["role"] == "user"
        ]
        assert len(asked) == 2
        for contents in asked:
            assert {"remember the word apricot", "remember the word banana"} <= set(contents)
        assert "which words?" in asked[1]


async def test_an_approval_resolved_on_the_other_instance_reaches_the_next_request(pair: object) -> None:
    """A preview shown on A and approved on B: A's next request carries the approved call's stored result, not the preview it held in memory."""
    async with pair() as (one, two):  # type: ignore[operator]
        notification_id = await add_notification(one)
        async with one.opened() as first:
            confirmation, events = await preview(first, one, notification_id)
            conversation_id = events[0]["conversation_id"]
            async with two.opened() as second:
                await show(second, conversation_id)
                await second.send(
                    "confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True
                )
                (done,) = await second.expect("tool_call_completed")
                assert done["status"] == "ok"
            await first.until("tool_call_completed")  # the outcome, seen live on A
            await first.until("assistant_end")  # then the answer that read it, from B
            await first.answer("is it done?")
        (request,) = [
            r
            for r in one.scripted.requests
            if r["messages"][-1]["role"] == "user" and last_user_text(r) == "is it done?"
        ]
        results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        assert len(results) == 1
        assert '"read":true' in results[0]


async def test_redis_down_refuses_new_answers_keeps_sockets_and_recovers(
    vernis_factory: VernisFactory, own_redis: OwnRedis
) -> None:
    """Redis killed: the open socket stays, a new message gets error unavailable and is not stored; Redis back: a message is answered again, with no restart."""
    async with vernis_factory(redis_url=own_redis.url, redis_prefix="outage:") as vernis:
        async with vernis.opened() as client:
            conversation_id = (await client.answer("hello"))[0]["conversation_id"]
            await client.until("title_updated")
            own_redis.kill()
            await client.send("user_message", content="are you there?")
            refused = (await client.until("error"))[-1]
            assert refused["code"] == "unavailable"
            await client.send("ping")
            await client.until("pong")
            own_redis.start()
            answered = await client.answer_once_available("and now?")
            assert answered[-1]["stopped"] is False
        messages = await stored(vernis, conversation_id)
        users = [m.content for m in messages if m.role == "user"]
        assert users == ["hello", "and now?"]


async def test_the_next_message_sent_on_reading_the_end_is_answered(pair: object) -> None:
    """In Redis mode, messages sent the moment the previous assistant_end is read are answered with no error, 20 times in a row across two instances (the race it guards against is proved deterministically by tests/services/test_shared_state.py::test_the_lease_goes_with_the_end_of_the_answer_in_redis; this one passed with that race put back)."""
    async with pair() as (one, two), one.opened() as first, two.opened() as second:  # type: ignore[operator]
        for n in range(10):
            for client in (first, second):
                events = await client.answer(f"message {n}")
                assert [e for e in events if e["type"] == "error"] == []
