"""The session picker's use-cases in process (vernis.session.conversations): open, load, list, rename,
delete, stop, feedback, each as the session's member only."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from tests.session.conftest import App, Connect, Tab
from vernis.conversation.store import ConversationInfo
from vernis.exceptions import MessageBlocked, NotFound
from vernis.model.scripted import Reply
from vernis.session.conversations import (
    delete_conversation,
    find_conversation,
    give_feedback,
    list_conversations,
    load,
    open_session,
    rename_conversation,
    stop_answer,
)
from vernis.session.send import send_user_message
from vernis.store.models import Message, table_of


async def answered(tab: Tab, content: str) -> list[dict[str, Any]]:
    """`content` sent and answered, through the first exchange's title."""
    await send_user_message(tab.session, content, None, None)
    received = await tab.until("assistant_end")
    if any(event["type"] == "conversation_created" for event in received):
        received += await tab.until("title_updated")
    return received


def shown(tab: Tab) -> ConversationInfo:
    assert tab.session.conversation is not None
    return tab.session.conversation


async def add_conversations(app: App, tab: Tab, count: int) -> list[uuid.UUID]:
    """`count` stored conversations of the tab's member, oldest first."""
    member, store = tab.session.member, app.services.store
    ids = []
    for number in range(count):
        conversation = await store.create_conversation(member.id, member.organization_id)
        await store.rename_conversation(conversation.id, member.id, member.organization_id, f"Topic {number}")
        ids.append(conversation.id)
    return ids


async def test_a_session_of_a_member_without_conversations_opens_pending(connect: Connect) -> None:
    """With nothing stored the session opens pending: conversation_loaded and history_end without a conversation."""
    tab = await connect()

    await open_session(tab.session, None, None)

    assert tab.rest() == [
        {"type": "conversation_loaded", "conversation_id": None, "title": None},
        {"type": "history_end", "conversation_id": None},
    ]
    assert tab.session.conversation is None


async def test_a_session_opens_the_latest_conversation_or_the_one_asked_for(
    app: App, connect: Connect
) -> None:
    """Without a conversation asked for, a new session shows the member's latest; asked for one of theirs, that one."""
    tab = await connect()
    await answered(tab, "first topic")
    first = shown(tab)
    tab.session.show_pending()
    await answered(tab, "second topic")
    second = shown(tab)

    latest, chosen = await connect(), await connect()
    await open_session(latest.session, None, None)
    await open_session(chosen.session, str(first.id), None)

    assert shown(latest).id == second.id
    assert latest.rest()[0]["conversation_id"] == str(second.id)
    assert shown(chosen).id == first.id
    history = [e["content"] for e in chosen.rest() if e["type"] == "history_message" and e["role"] == "user"]
    assert history == ["first topic"]


async def test_asking_for_a_foreign_or_malformed_conversation_says_not_found_and_opens_the_latest(
    app: App, connect: Connect
) -> None:
    """A conversation of another organization's member, or an id that is no id, gets an error not_found, then the member's latest conversation."""
    stranger = await connect("owner@globex.test")
    await answered(stranger, "globex secrets")
    tab = await connect()
    await answered(tab, "mine")
    mine = shown(tab)

    for requested in (str(shown(stranger).id), "not-an-id"):
        opening = await connect()
        await open_session(opening.session, requested, None)
        received = opening.rest()
        assert received[0]["type"] == "error"
        assert received[0]["code"] == "not_found"
        assert received[1]["conversation_id"] == str(mine.id)
        assert "globex secrets" not in str(received)


async def test_open_session_resumes_after_a_seq_given_as_text(app: App, connect: Connect) -> None:
    """The socket's `after_seq` query parameter (text) resumes the asked conversation: conversation_loaded says resumed, no history follows."""
    tab = await connect()
    received = await answered(tab, "hello")
    opening = await connect()

    await open_session(opening.session, str(shown(tab).id), str(received[-1]["seq"]))

    assert opening.rest() == [
        {
            "type": "conversation_loaded",
            "conversation_id": str(shown(tab).id),
            "title": received[-1]["title"],
            "resumed": True,
        }
    ]


async def test_load_switches_the_session_to_the_conversation(app: App, connect: Connect) -> None:
    """`load` replays one of the member's conversations and shows it; another member's is NotFound, the session staying where it was."""
    tab = await connect()
    await answered(tab, "first topic")
    first = shown(tab)
    tab.session.show_pending()
    await answered(tab, "second topic")
    tab.rest()

    await load(tab.session, first.id, None)

    assert shown(tab).id == first.id
    assert tab.rest()[0]["type"] == "conversation_loaded"
    stranger = await connect("owner@acme.test")
    with pytest.raises(NotFound):
        await load(stranger.session, first.id, None)
    assert stranger.session.conversation is None
    assert stranger.rest() == []


async def test_the_list_pages_twenty_conversations_at_a_time_newest_first(app: App, connect: Connect) -> None:
    """The list holds the member's 20 most recently updated conversations, newest first, with a cursor to the next page, which holds the rest; no other member's."""
    tab = await connect()
    ids = await add_conversations(app, tab, 23)
    stranger = await connect("owner@acme.test")
    await add_conversations(app, stranger, 1)

    await list_conversations(tab.session, None)
    (first,) = tab.rest()
    await list_conversations(tab.session, first["next_before"])
    (second,) = tab.rest()

    assert first["type"] == second["type"] == "conversation_list"
    listed = [item["conversation_id"] for item in first["conversations"] + second["conversations"]]
    assert listed == [str(i) for i in reversed(ids)]
    assert len(first["conversations"]) == 20
    assert first["next_before"] is not None
    assert second.get("next_before") is None
    assert first["conversations"][0]["title"] == "Topic 22"


async def test_a_rename_is_stored_and_told_to_every_session_showing_it(app: App, connect: Connect) -> None:
    """Renaming stores the title and publishes title_updated to the sessions showing the conversation, and to the renaming one even when it shows another."""
    tab = await connect()
    await answered(tab, "hello")
    conversation = shown(tab)
    watching = await connect()
    watching.session.show(conversation)
    renaming = await connect()

    await rename_conversation(renaming.session, conversation.id, "Quarterly plans")

    for each in (tab, watching, renaming):
        (told,) = await each.until("title_updated")
        assert (told["conversation_id"], told["title"]) == (str(conversation.id), "Quarterly plans")
    member = tab.session.member
    stored = await app.services.store.get_conversation(conversation.id, member.id, member.organization_id)
    assert stored is not None
    assert stored.title == "Quarterly plans"


async def test_a_title_passes_the_guards_and_anothers_conversation_cannot_be_renamed(
    app: App, connect: Connect
) -> None:
    """A title holding an API key is refused (MessageBlocked, not saved); another member's conversation is NotFound; the title stays."""
    tab = await connect()
    received = await answered(tab, "hello")
    conversation = shown(tab)

    with pytest.raises(MessageBlocked):
        await rename_conversation(tab.session, conversation.id, "key AKIAIOSFODNN7EXAMPLE")
    stranger = await connect("owner@acme.test")
    with pytest.raises(NotFound):
        await rename_conversation(stranger.session, conversation.id, "Mine now")

    member = tab.session.member
    stored = await app.services.store.get_conversation(conversation.id, member.id, member.organization_id)
    assert stored is not None
    assert stored.title == received[-1]["title"]


async def test_deleting_the_shown_conversation_stops_its_answer_and_leaves_the_session_pending(
    app: App, connect: Connect
) -> None:
    """Deleting a conversation whose answer streams stops the answer first, deletes it, puts the session showing it back to pending and sends the new list."""
    app.script(Reply(["word"] * 200, chunk_delay=0.02), "long")
    tab = await connect()
    await answered(tab, "short first")
    kept = shown(tab)
    tab.session.show_pending()
    await send_user_message(tab.session, "a long one", None, None)
    await tab.until("text_delta")
    doomed = shown(tab)

    await delete_conversation(tab.session, doomed.id)

    received = tab.rest()
    assert [e["type"] for e in received][-3:] == ["conversation_loaded", "history_end", "conversation_list"]
    assert any(e["type"] == "assistant_end" and e["stopped"] for e in received)
    assert tab.session.conversation is None
    assert [item["conversation_id"] for item in received[-1]["conversations"]] == [str(kept.id)]
    assert app.services.answers.running(doomed.id) is None
    with pytest.raises(NotFound):
        await find_conversation(tab.session, doomed.id)


async def test_another_members_conversation_cannot_be_deleted(app: App, connect: Connect) -> None:
    """Deleting another member's conversation is NotFound and deletes nothing."""
    tab = await connect()
    await answered(tab, "hello")
    stranger = await connect("owner@acme.test")

    with pytest.raises(NotFound):
        await delete_conversation(stranger.session, shown(tab).id)

    assert (await find_conversation(tab.session, shown(tab).id)).id == shown(tab).id


async def test_stop_ends_the_shown_answer_and_keeps_what_was_written(app: App, connect: Connect) -> None:
    """`stop` ends the streaming answer: assistant_end says stopped, and the answer is stored stopped with the text written so far."""
    app.script(Reply(["word "] * 200, chunk_delay=0.02), "long")
    tab = await connect()
    await send_user_message(tab.session, "a long one", None, None)
    await tab.until("text_delta")

    await stop_answer(tab.session)

    received = await tab.until("assistant_end")
    assert received[-1]["stopped"] is True
    _, answer = await app.services.store.messages(shown(tab).id)
    assert answer.status == "stopped"
    assert answer.content.startswith("word ")
    assert len(answer.content) < len("word ") * 200


async def feedback_of(app: App, message_id: uuid.UUID) -> tuple[str | None, str | None]:
    table = table_of(Message)
    async with app.services.engine.connect() as connection:
        row = (
            await connection.execute(
                sa.select(table.c.feedback_rating, table.c.feedback_comment).where(table.c.id == message_id)
            )
        ).one()
    return row.feedback_rating, row.feedback_comment


async def test_feedback_is_stored_on_the_members_answer_only(app: App, connect: Connect) -> None:
    """A rating with its comment is stored on the member's answer (a card number in the comment redacted); rating another member's answer is NotFound."""
    tab = await connect()
    received = await answered(tab, "hello")
    answer_id = uuid.UUID(next(e["message_id"] for e in received if e["type"] == "assistant_end"))

    await give_feedback(tab.session, answer_id, "down", "Wrong card 4111 1111 1111 1111")

    assert await feedback_of(app, answer_id) == ("down", "Wrong card [CARD_REDACTED]")
    stranger = await connect("owner@acme.test")
    with pytest.raises(NotFound):
        await give_feedback(stranger.session, answer_id, "up", None)
    assert await feedback_of(app, answer_id) == ("down", "Wrong card [CARD_REDACTED]")
