"""`regenerate` and `edit_message` in process (vernis.session.versions): the last exchange written
again, the earlier version kept; the app's services, a recording outbox, the scripted model."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.session.conftest import App, AppFactory, Connect, Tab
from vernis.conversation.store import StoredMessage
from vernis.exceptions import NotFound, RateLimited, ResponseInProgress
from vernis.model.scripted import Reply
from vernis.model.scripted.scenarios import without_context
from vernis.session.send import send_user_message
from vernis.session.versions import NOTHING_TO_REGENERATE, ONLY_THE_LAST, edit_message, regenerate


def text(events: list[dict[str, Any]]) -> str:
    return "".join(event["content"] for event in events if event["type"] == "text_delta")


async def asked(tab: Tab, content: str) -> list[dict[str, Any]]:
    """`content` sent and answered (its first exchange's title too, so nothing arrives later)."""
    await send_user_message(tab.session, content, None, None)
    events = await tab.until("assistant_end")
    if any(event["type"] == "conversation_created" for event in events):
        await tab.until("title_updated")
    return events


async def stored(app: App, tab: Tab) -> list[StoredMessage]:
    assert tab.session.conversation is not None
    return await app.services.store.messages(tab.session.conversation.id)


def users_seen(app: App) -> list[list[tuple[str, str]]]:
    """Per model request: its messages after the system prompt, (role, content)."""
    return [
        [(m["role"], m["content"]) for m in without_context(body["messages"])[1:]]
        for body in app.chat_requests()
    ]


async def test_regenerate_appends_a_new_answer_and_keeps_the_earlier_one(app: App, connect: Connect) -> None:
    """`regenerate` streams a new answer stored right after the earlier one (both kept, both complete), and the model's window ends with the user message, without the earlier answer."""
    app.script("First try.", "question")
    app.script("Second try.", "question")
    tab = await connect()
    await asked(tab, "a question")

    await regenerate(tab.session, None)
    events = await tab.until("assistant_end")

    assert events[0]["type"] == "assistant_start"
    assert text(events) == "Second try."
    messages = await stored(app, tab)
    assert [(m.role, m.status, m.content) for m in messages] == [
        ("user", "complete", "a question"),
        ("assistant", "complete", "First try."),
        ("assistant", "complete", "Second try."),
    ]
    assert str(messages[2].id) == events[0]["message_id"]
    assert users_seen(app)[-1] == [("user", "a question")]


async def test_regenerate_with_nothing_answered_yet_is_not_found(app: App, connect: Connect) -> None:
    """On a pending session there is nothing to write again: NotFound with its sentence, nothing asked."""
    tab = await connect()

    with pytest.raises(NotFound) as refused:
        await regenerate(tab.session, None)

    assert refused.value.public_message == NOTHING_TO_REGENERATE
    assert app.chat_requests() == []


async def test_regenerate_while_the_answer_streams_is_response_in_progress(
    app: App, connect: Connect
) -> None:
    """While the conversation's answer still streams, `regenerate` raises ResponseInProgress and stores nothing."""
    app.script(Reply(["slow"] * 20, chunk_delay=0.05), "first")
    tab = await connect()
    await send_user_message(tab.session, "first", None, None)
    await tab.until("text_delta")

    with pytest.raises(ResponseInProgress):
        await regenerate(tab.session, None)

    await tab.until("assistant_end")
    assert [m.role for m in await stored(app, tab)] == ["user", "assistant"]


async def test_a_resent_regenerate_runs_once(app: App, connect: Connect) -> None:
    """`regenerate` with a client_message_id already carried out (a resend after a cut) does nothing."""
    tab = await connect()
    await asked(tab, "hello")
    await regenerate(tab.session, "regen-1")
    await tab.until("assistant_end")
    requests = len(app.chat_requests())

    await regenerate(tab.session, "regen-1")

    assert [m.role for m in await stored(app, tab)] == ["user", "assistant", "assistant"]
    assert len(app.chat_requests()) == requests


async def test_regenerate_counts_against_the_rate_limit(app_factory: AppFactory) -> None:
    """A regenerated answer costs a message: past the session's limit it raises RateLimited, nothing stored."""
    async with app_factory(rate_limit="1/60") as app:
        tab = await app.connect()
        await asked(tab, "hello")

        with pytest.raises(RateLimited):
            await regenerate(tab.session, None)

        assert [m.role for m in await stored(app, tab)] == ["user", "assistant"]


async def test_editing_the_last_message_supersedes_its_exchange_and_answers_the_new_text(
    app: App, connect: Connect
) -> None:
    """`edit_message` keeps the earlier exchange marked superseded, stores the edited message and its answer after it, and the model reads the edited text, not the earlier one."""
    app.script("About cats.", "cats")
    app.script("About dogs.", "dogs")
    tab = await connect()
    await asked(tab, "tell me about cats")
    user = (await stored(app, tab))[0]

    await edit_message(tab.session, user.id, "tell me about dogs", None)
    events = await tab.until("assistant_end")

    assert text(events) == "About dogs."
    messages = await stored(app, tab)
    assert [(m.role, m.status, m.content) for m in messages] == [
        ("user", "superseded", "tell me about cats"),
        ("assistant", "superseded", "About cats."),
        ("user", "complete", "tell me about dogs"),
        ("assistant", "complete", "About dogs."),
    ]
    assert users_seen(app)[-1] == [("user", "tell me about dogs")]


async def test_an_edit_keeps_the_exchanges_before_it_in_the_window(app: App, connect: Connect) -> None:
    """Editing the second message: the model reads the first exchange, then the edited message."""
    app.script("One.", "first")
    app.script("Two.", "second")
    app.script("Three.", "edited")
    tab = await connect()
    await asked(tab, "first")
    await asked(tab, "second")
    second = (await stored(app, tab))[2]

    await edit_message(tab.session, second.id, "edited", None)
    await tab.until("assistant_end")

    assert users_seen(app)[-1] == [("user", "first"), ("assistant", "One."), ("user", "edited")]


async def test_only_the_last_message_can_be_edited(app: App, connect: Connect) -> None:
    """An earlier message, or one of another conversation, cannot be edited: NotFound with its sentence, nothing stored or asked."""
    tab = await connect()
    await asked(tab, "first")
    await asked(tab, "second")
    first = (await stored(app, tab))[0]
    requests = len(app.chat_requests())

    for message_id in (first.id, uuid.uuid4()):
        with pytest.raises(NotFound) as refused:
            await edit_message(tab.session, message_id, "changed", None)
        assert refused.value.public_message == ONLY_THE_LAST

    assert [m.status for m in await stored(app, tab)] == ["complete"] * 4
    assert len(app.chat_requests()) == requests


async def test_an_edit_can_name_the_message_by_its_answers_id(app: App, connect: Connect) -> None:
    """A client that saw the exchange live only knows the answer's id: editing by it edits the user message."""
    tab = await connect()
    events = await asked(tab, "typo heer")

    await edit_message(tab.session, uuid.UUID(events[-1]["message_id"]), "typo here", None)
    await tab.until("assistant_end")

    users = [(m.status, m.content) for m in await stored(app, tab) if m.role == "user"]
    assert users == [("superseded", "typo heer"), ("complete", "typo here")]
