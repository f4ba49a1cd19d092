"""Conversations over the socket (SPEC §4): rollover, the window, the picker commands, tenancy."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.data import demo_member, store_of
from tests.fixtures.server import Vernis, VernisFactory
from vernis.model.scripted.scenarios import without_context


def chat_requests(vernis: Vernis) -> list[dict[str, Any]]:
    """The chat requests the model received (title requests left out)."""
    return [body for body in vernis.scripted.requests if body["model"] == vernis.settings.llm_model]


async def test_rollover_at_50_carries_the_context(vernis_factory: VernisFactory) -> None:
    """The 26th message of a 50-message conversation rolls over to a linked conversation, and the model still sees the recent earlier messages (the window, now full, cut to the last ones at once)."""
    async with vernis_factory(rate_limit="1000/60", member_rate_limit="1000/60") as vernis:
        async with vernis.opened() as client:
            first_id = None
            for number in range(25):
                events = await client.answer(f"fact {number}: the code is {number * 7}")
                if number == 0:
                    first_id = events[0]["conversation_id"]
            await client.send("user_message", content="what was fact 24?")
            events = await client.until("assistant_end")
            rolled = events[0]
            assert rolled["type"] == "conversation_loaded"
            assert rolled["rolled_over_from"] == first_id
            assert rolled["conversation_id"] != first_id

        request = chat_requests(vernis)[-1]
        history = without_context([m for m in request["messages"] if m["role"] != "system"])
        assert history[-1] == {"role": "user", "content": "what was fact 24?"}
        assert {"role": "user", "content": "fact 24: the code is 168"} in history
        # 51 messages in the window: the last 10 kept (VERNIS_CONTEXT_KEEP_RECENT), from the user's.
        assert history[0] == {"role": "user", "content": "fact 20: the code is 140"}
        assert len(history) == 11

        async with store_of(vernis) as store:
            member = demo_member(vernis)
            new = await store.get_conversation(
                uuid.UUID(rolled["conversation_id"]), member.id, member.organization_id
            )
            old = await store.get_conversation(uuid.UUID(first_id or ""), member.id, member.organization_id)
            assert new is not None
            assert old is not None
            assert new.previous_conversation_id == old.id
            assert (old.message_count, new.message_count) == (50, 2)


async def test_window_never_exceeds_50_messages(vernis_factory: VernisFactory) -> None:
    """However long a conversation runs, no model request carries more than 50 prior messages; a full window is cut to its last messages at once, then grows again from there."""
    async with (
        vernis_factory(rate_limit="1000/60", member_rate_limit="1000/60", rollover_messages=200) as vernis,
        vernis.opened() as client,
    ):
        for number in range(30):
            await client.answer(f"message {number}")
    sizes = [len([m for m in body["messages"] if m["role"] != "system"]) for body in chat_requests(vernis)]
    # 49 messages at the 25th; the 26th would make 51: cut to the last 10, from message 20 on.
    assert sizes == [*range(1, 50, 2), *range(11, 20, 2)]
    last = without_context([m for m in chat_requests(vernis)[-1]["messages"] if m["role"] != "system"])
    assert last[0] == {"role": "user", "content": "message 20"}


async def test_window_is_rebuilt_from_storage_after_reconnect(vernis: Vernis) -> None:
    """After a reconnect (a new server would do the same), the next request carries the stored exchange."""
    async with vernis.opened() as client:
        await client.answer("my favourite colour is teal")
    async with vernis.opened() as client:
        await client.answer("what is my favourite colour?")
    history = [m for m in chat_requests(vernis)[-1]["messages"] if m["role"] != "system"]
    assert history[0] == {"role": "user", "content": "my favourite colour is teal"}
    assert history[1]["role"] == "assistant"
    assert len(history) == 3


async def test_list_returns_20_most_recent_with_a_cursor(vernis: Vernis) -> None:
    """list_conversations gives the 20 most recently updated, then the rest with next_before."""
    async with store_of(vernis) as store:
        member = demo_member(vernis)
        created = []
        for number in range(23):
            conversation = await store.create_conversation(member.id, member.organization_id)
            await store.add_message(conversation.id, "user", f"topic {number}")
            created.append(str(conversation.id))
    async with vernis.opened() as client:
        await client.send("list_conversations")
        (page,) = await client.expect("conversation_list")
        ids = [c["conversation_id"] for c in page["conversations"]]
        assert ids == created[::-1][:20]
        assert page["conversations"][0]["message_count"] == 1
        assert page["next_before"]
        await client.send("list_conversations", before=page["next_before"])
        (rest,) = await client.expect("conversation_list")
        assert [c["conversation_id"] for c in rest["conversations"]] == created[::-1][20:]
        assert rest.get("next_before") is None
        await client.send("list_conversations", before="garbage!")
        (error,) = await client.expect("error")
        assert error["code"] == "invalid_message"


async def test_load_rename_delete_and_feedback(vernis: Vernis) -> None:
    """A conversation can be loaded, renamed (title_updated), rated, and deleted (gone from the list, not loadable)."""
    async with vernis.opened() as client:
        first = await client.answer("about invoices")
        await client.until("title_updated")
        first_id = first[0]["conversation_id"]
        answer_id = first[-1]["message_id"]
        await client.send("new_conversation")
        await client.until("history_end")
        await client.answer("about appointments")
        await client.until("title_updated")  # the second conversation's, before switching away

        await client.send("load_conversation", conversation_id=first_id)
        loaded, _, _, end = await client.expect(
            "conversation_loaded", "history_message", "history_message", "history_end"
        )
        assert loaded["conversation_id"] == first_id

        await client.send("rename_conversation", conversation_id=first_id, title="  Invoices  ")
        (renamed,) = await client.expect("title_updated")
        assert (renamed["conversation_id"], renamed["title"]) == (first_id, "Invoices")
        assert renamed["seq"] > end["seq"]

        await client.send("feedback", message_id=answer_id, rating="up", comment="helpful")
        await client.send("feedback", message_id=str(uuid.uuid4()), rating="down")
        (error,) = await client.expect("error")
        assert error["code"] == "not_found"

        await client.send("delete_conversation", conversation_id=first_id)
        pending, _, listing = await client.expect("conversation_loaded", "history_end", "conversation_list")
        assert pending["conversation_id"] is None
        assert first_id not in [c["conversation_id"] for c in listing["conversations"]]
        assert len(listing["conversations"]) == 1
        await client.send("load_conversation", conversation_id=first_id)
        (gone,) = await client.expect("error")
        assert gone["code"] == "not_found"


async def test_query_parameter_opens_the_named_conversation(vernis: Vernis) -> None:
    """?conversation_id= opens that conversation instead of the latest; an unknown one falls back with not_found."""
    async with vernis.opened() as client:
        first = await client.answer("first")
        await client.send("new_conversation")
        await client.until("history_end")
        await client.answer("second")
    first_id = first[0]["conversation_id"]
    async with vernis.connect(query=f"?conversation_id={first_id}") as client:
        loaded = (await client.until("history_end"))[0]
        assert loaded["conversation_id"] == first_id
    async with vernis.connect(query=f"?conversation_id={uuid.uuid4()}") as client:
        events = await client.until("history_end")
        assert events[0] == {"type": "error", "code": "not_found", "message": events[0]["message"]}
        assert events[1]["conversation_id"] not in (None, first_id)


async def test_tenants_never_see_each_other(vernis: Vernis) -> None:
    """A Globex owner cannot load, rename, delete or rate an Acme member's conversation: not_found, nothing changes."""
    async with vernis.opened() as client:
        events = await client.answer("acme secret plans")
    acme_id, answer_id = events[0]["conversation_id"], events[-1]["message_id"]
    async with vernis.opened("owner@globex.test") as intruder:
        for command, fields in [
            ("load_conversation", {"conversation_id": acme_id}),
            ("rename_conversation", {"conversation_id": acme_id, "title": "mine"}),
            ("delete_conversation", {"conversation_id": acme_id}),
            ("feedback", {"message_id": answer_id, "rating": "down"}),
        ]:
            await intruder.send(command, **fields)
            (error,) = await intruder.expect("error")
            assert error["code"] == "not_found"
            assert "acme" not in error["message"].lower()
        await intruder.send("list_conversations")
        (listing,) = await intruder.expect("conversation_list")
        assert listing["conversations"] == []
    async with vernis.connect() as client:
        loaded = (await client.until("history_end"))[0]
        assert loaded["conversation_id"] == acme_id
        assert loaded["title"] != "mine"


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
async def test_first_exchange_and_replay_on_postgres(vernis: Vernis) -> None:
    """On PostgreSQL, a first message is created, streamed, stored and titled, and a reconnect replays it."""
    async with vernis.opened() as client:
        events = await client.answer("hello from postgres")
        (title,) = await client.expect("title_updated")
    async with vernis.connect() as client:
        loaded, user, assistant, _ = await client.expect(
            "conversation_loaded", "history_message", "history_message", "history_end"
        )
    assert loaded["conversation_id"] == events[0]["conversation_id"]
    assert loaded["title"] == title["title"]
    assert user["content"] == "hello from postgres"
    assert assistant["message_id"] == events[-1]["message_id"]
    assert assistant["status"] == "complete"
