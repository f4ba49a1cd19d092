"""`send_user_message` in process (vernis.session.send): the app's services, a session with a
recording outbox, the scripted model on loopback; no server, no socket."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest

from tests.session.conftest import App, AppFactory, Connect, Tab
from tests.utils import squash
from vernis.conversation.store import StoredMessage
from vernis.exceptions import MessageBlocked, RateLimited, ResponseInProgress
from vernis.model.scripted import Fault, Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import context_text, last_user_text, without_context
from vernis.pages import PageRequest
from vernis.session.conversations import delete_conversation
from vernis.session.send import send_user_message


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def text(events: list[dict[str, Any]]) -> str:
    return "".join(event["content"] for event in events if event["type"] == "text_delta")


async def ask(tab: Tab, content: str, **options: Any) -> list[dict[str, Any]]:
    """Send `content`; the events through its `assistant_end`."""
    await send_user_message(tab.session, content, options.get("page"), options.get("client_message_id"))
    return await tab.until("assistant_end")


async def stored(app: App, conversation_id: str | uuid.UUID) -> list[StoredMessage]:
    return await app.services.store.messages(uuid.UUID(str(conversation_id)))


async def test_a_first_message_creates_the_conversation_and_streams_and_stores_its_answer(
    app: App, connect: Connect
) -> None:
    """On a pending session the first message stores a new conversation, shows it, streams the answer (start, deltas, end) and stores the exchange complete."""
    app.script(Reply(["Hello", " Ada."]), "hello")
    tab = await connect()
    assert tab.session.conversation is None

    events = await ask(tab, "hello there")

    assert squash(types(events)) == ["conversation_created", "assistant_start", "text_delta", "assistant_end"]
    conversation_id = events[0]["conversation_id"]
    assert tab.session.conversation is not None
    assert str(tab.session.conversation.id) == conversation_id
    assert text(events) == "Hello Ada."
    assert events[-1]["stopped"] is False
    messages = await stored(app, conversation_id)
    assert [(m.role, m.status, m.content) for m in messages] == [
        ("user", "complete", "hello there"),
        ("assistant", "complete", "Hello Ada."),
    ]
    assert str(messages[1].id) == events[1]["message_id"] == events[-1]["message_id"]
    # The first exchange gets a title, told to the session like any event of its conversation.
    (titled,) = [e for e in await tab.until("title_updated") if e["type"] == "title_updated"]
    assert titled["conversation_id"] == conversation_id


async def test_the_model_reads_the_system_prompt_and_the_conversation_so_far(
    app: App, connect: Connect
) -> None:
    """A second message's request holds the system prompt naming the member, then the first exchange, then the new message."""
    app.script("Blue.", "colour")
    app.script("You asked about a colour.", "what did I ask")
    tab = await connect()
    await ask(tab, "favourite colour?")

    await ask(tab, "what did I ask?")

    first, second = app.chat_requests()
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    system, *conversation = second["messages"]
    assert system["role"] == "system"
    assert tab.session.member.name in system["content"]
    # The turn's context (the date) opens the new message only (SPEC §19).
    assert conversation[-1]["content"].startswith("<context>\n## Now\n")
    assert without_context(conversation) == [
        {"role": "user", "content": "favourite colour?"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "what did I ask?"},
    ]


async def test_a_resent_client_message_id_is_answered_once(app: App, connect: Connect) -> None:
    """The same client_message_id sent again (a resend after a reconnect) stores nothing and asks no model."""
    tab = await connect()
    events = await ask(tab, "only once", client_message_id="c-1")
    requests = len(app.chat_requests())

    await send_user_message(tab.session, "only once", None, "c-1")

    messages = await stored(app, events[0]["conversation_id"])
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].client_message_id == "c-1"
    assert len(app.chat_requests()) == requests


async def test_a_message_while_the_conversation_answers_is_refused_and_not_stored(
    app: App, connect: Connect
) -> None:
    """While an answer streams, another message in the conversation (from another tab too) raises ResponseInProgress and stores nothing."""
    app.script(Reply(["slow"] * 20, chunk_delay=0.05), "first")
    tab = await connect()
    await send_user_message(tab.session, "first", None, None)
    started = await tab.until("text_delta")
    other = await connect()
    other.session.show(tab.session.conversation)

    for asking in (tab, other):
        with pytest.raises(ResponseInProgress):
            await send_user_message(asking.session, "second", None, None)

    await tab.until("assistant_end")
    messages = await stored(app, started[0]["conversation_id"])
    assert [m.content for m in messages if m.role == "user"] == ["first"]
    assert len(app.chat_requests()) == 1


async def test_over_the_rate_limit_nothing_is_stored_and_no_model_is_asked(app_factory: AppFactory) -> None:
    """Past the session's rate limit the message raises RateLimited with a retry delay; no row, no request."""
    async with app_factory(rate_limit="1/60") as app:
        tab = await app.connect()
        events = await ask(tab, "one")

        with pytest.raises(RateLimited) as refused:
            await send_user_message(tab.session, "two", None, None)

        assert refused.value.retry_after_ms > 0
        assert [m.content for m in await stored(app, events[0]["conversation_id"])] == ["one", text(events)]
        assert len(app.chat_requests()) == 1


async def test_a_blocked_message_is_refused_before_anything_is_stored(app: App, connect: Connect) -> None:
    """A message holding an API key raises MessageBlocked with a sentence; no conversation is created, no model asked."""
    tab = await connect()

    with pytest.raises(MessageBlocked) as blocked:
        await send_user_message(tab.session, "Save AKIAIOSFODNN7EXAMPLE on Jane's file", None, None)

    assert "credential" in blocked.value.public_message
    assert "AKIA" not in blocked.value.public_message
    assert tab.session.conversation is None
    assert tab.rest() == []
    assert app.chat_requests() == []


async def test_a_card_number_reaches_the_model_and_the_store_redacted(app: App, connect: Connect) -> None:
    """A card number is replaced before the store and the model see the message, and the model is told so."""
    tab = await connect()

    events = await ask(tab, "Charge 4111 1111 1111 1111 for the renewal")

    (request,) = app.chat_requests()
    assert last_user_text(request) == "Charge [CARD_REDACTED] for the renewal"
    assert "payment card number in your message was hidden" in context_text(request)
    user, _ = await stored(app, events[0]["conversation_id"])
    assert user.content == "Charge [CARD_REDACTED] for the renewal"


async def test_a_full_conversation_rolls_over_into_a_linked_one_with_the_same_context(
    app_factory: AppFactory,
) -> None:
    """With rollover_messages=4 the third message goes to a new conversation linked to the full one (conversation_loaded rolled_over_from), and the model still reads the earlier exchanges."""
    async with app_factory(rollover_messages=4) as app:
        tab = await app.connect()
        first = await ask(tab, "fact one")
        await ask(tab, "fact two")

        events = await ask(tab, "what were the facts?")

        full = first[0]["conversation_id"]
        # (The first exchange's title may come before it.)
        (loaded,) = [e for e in events if e["type"] == "conversation_loaded"]
        assert loaded["rolled_over_from"] == full
        assert loaded["conversation_id"] != full
        assert tab.session.conversation is not None
        assert str(tab.session.conversation.id) == loaded["conversation_id"]
        assert len(await stored(app, full)) == 4
        assert [m.content for m in await stored(app, loaded["conversation_id"])][:1] == [
            "what were the facts?"
        ]
        users = [
            m["content"] for m in without_context(app.chat_requests()[-1]["messages"]) if m["role"] == "user"
        ]
        assert users == ["fact one", "fact two", "what were the facts?"]


async def test_a_conversation_deleted_from_another_tab_gets_the_message_in_a_new_one(
    app: App, connect: Connect
) -> None:
    """When the shown conversation was deleted meanwhile, the message starts a new conversation instead of failing."""
    tab = await connect()
    first = await ask(tab, "hello")
    await tab.until("title_updated")
    other = await connect()
    await delete_conversation(other.session, uuid.UUID(first[0]["conversation_id"]))

    events = await ask(tab, "still there?")

    created = events[0]
    assert created["type"] == "conversation_created"
    assert created["conversation_id"] != first[0]["conversation_id"]
    user, _ = await stored(app, created["conversation_id"])
    assert user.content == "still there?"


async def test_the_answer_runs_the_members_tools_and_stores_the_calls(app: App, connect: Connect) -> None:
    """A tool call of the model runs the member's CRM tool: its cards stream between the text, and the stored answer keeps the call with its result."""
    app.script(
        Reply(tool_calls=[ScriptedToolCall("search_contacts", {"query": "Jane Cooper"}, call_id="call_1")]),
        "find Jane",
    )
    app.scripted.model.add(
        "Jane Cooper is at Acme.", match=lambda body: body["messages"][-1]["role"] == "tool"
    )
    tab = await connect()

    events = await ask(tab, "find Jane please")

    kinds = types(events)
    assert kinds.index("tool_call_started") < kinds.index("tool_call_completed") < kinds.index("text_delta")
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert (completed["call_id"], completed["status"]) == ("call_1", "ok")
    assert completed["result"]["ok"] is True
    assert "Jane Cooper" in orjson.dumps(completed["result"]["data"]).decode()
    _, answer = await stored(app, events[0]["conversation_id"])
    assert answer.content == "Jane Cooper is at Acme."
    assert answer.tool_calls is not None
    assert [(call["call_id"], call["status"]) for call in answer.tool_calls] == [("call_1", "ok")]


async def test_a_page_the_member_is_on_is_named_to_the_model(app: App, connect: Connect) -> None:
    """A message sent from a contact's page names that contact in the turn's context (resolved as the member), not in the system prompt."""
    jane = app.seed.entities["acme:contact:Jane Cooper"]
    tab = await connect()

    await ask(tab, "who is this?", page=PageRequest(f"/contacts/{jane}", "contact", str(jane)))

    (request,) = app.chat_requests()
    assert "Jane Cooper" in context_text(request)
    assert "Jane Cooper" not in request["messages"][0]["content"]


async def test_a_failing_model_ends_the_answer_with_an_error_and_stores_it_failed(
    app_factory: AppFactory,
) -> None:
    """When the model fails (no retries left), the session gets an llm_unavailable error then assistant_end, and the answer is stored failed."""
    async with app_factory(llm_max_retries=0) as app:
        app.script(Reply(fault=Fault.http(500)), "fail")
        tab = await app.connect()

        events = await ask(tab, "fail please")

        assert types(events)[-2:] == ["error", "assistant_end"]
        assert events[-2]["code"] == "llm_unavailable"
        _, answer = await stored(app, events[0]["conversation_id"])
        assert answer.status == "failed"
