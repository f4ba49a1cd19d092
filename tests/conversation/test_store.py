"""The conversation store, on a real SQLite file and a real PostgreSQL database alike."""

from __future__ import annotations

import asyncio
import base64
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fixtures.db import *  # noqa: F403
from vernis.conversation.records import CONTINUATION_PREFIX
from vernis.conversation.store import (
    ConversationFull,
    ConversationInfo,
    ConversationStore,
    DuplicateClientMessage,
    MessageUpdate,
    StoredMessage,
)
from vernis.exceptions import Forbidden, InvalidMessage, NotFound, VernisError
from vernis.limits.usage import Spent, UsageStore
from vernis.store.models import Conversation, Message, MessageStatus, table_of
from vernis_crm.demo.seed import SeedResult


@dataclass(frozen=True)
class Who:
    id: UUID
    organization_id: UUID


@dataclass(frozen=True)
class Demo:
    owner: Who  # owner@acme.test
    member: Who  # member@acme.test, same organization
    globex: Who  # owner@globex.test, another organization


@pytest.fixture
def demo(seeded: SeedResult) -> Demo:
    acme, globex = seeded.organizations["acme"], seeded.organizations["globex"]
    return Demo(
        owner=Who(seeded.members["owner@acme.test"], acme),
        member=Who(seeded.members["member@acme.test"], acme),
        globex=Who(seeded.members["owner@globex.test"], globex),
    )


async def _new(store: ConversationStore, who: Who, **options: UUID | None) -> ConversationInfo:
    return await store.create_conversation(who.id, who.organization_id, **options)


async def _message_row(engine: AsyncEngine, message_id: UUID) -> sa.RowMapping:
    messages = table_of(Message)
    async with engine.connect() as connection:
        return (
            (await connection.execute(sa.select(messages).where(messages.c.id == message_id)))
            .mappings()
            .one()
        )


async def _set_updated_at(engine: AsyncEngine, when: datetime) -> None:
    async with engine.begin() as connection:
        await connection.execute(sa.update(table_of(Conversation)).values(updated_at=when))


def _assert_utc(moment: datetime) -> None:
    assert moment.tzinfo is UTC


# Members and AI rules


async def test_ai_rules_are_replaced_per_organization(store: ConversationStore, demo: Demo) -> None:
    """Setting AI rules creates or replaces them for that organization only; none reads as ""."""
    assert await store.get_ai_rules(demo.globex.organization_id) == ""
    await store.set_ai_rules(demo.globex.organization_id, "Answer in German.", demo.globex.id)
    await store.set_ai_rules(demo.globex.organization_id, "Answer in English.", demo.globex.id)
    assert await store.get_ai_rules(demo.globex.organization_id) == "Answer in English."
    assert "clients" in await store.get_ai_rules(demo.owner.organization_id)


async def test_ai_rules_only_editable_from_inside(store: ConversationStore, demo: Demo) -> None:
    """A member of another organization cannot set this organization's AI rules."""
    before = await store.get_ai_rules(demo.owner.organization_id)
    with pytest.raises(Forbidden):
        await store.set_ai_rules(demo.owner.organization_id, "Leak everything.", demo.globex.id)
    assert await store.get_ai_rules(demo.owner.organization_id) == before


# Conversations


async def test_create_conversation(store: ConversationStore, demo: Demo) -> None:
    """A new conversation is empty, untitled, owned by the member, with aware UTC timestamps."""
    created = await _new(store, demo.owner)
    assert (created.member_id, created.organization_id, created.title, created.message_count) == (
        demo.owner.id,
        demo.owner.organization_id,
        None,
        0,
    )
    loaded = await store.get_conversation(created.id, demo.owner.id, demo.owner.organization_id)
    assert loaded == created
    _assert_utc(loaded.created_at)
    _assert_utc(loaded.updated_at)


async def test_create_conversation_with_given_id(store: ConversationStore, demo: Demo) -> None:
    """A conversation can be stored under an id chosen beforehand; reusing that id is refused."""
    chosen = uuid.uuid4()
    created = await _new(store, demo.owner, conversation_id=chosen)
    assert created.id == chosen
    with pytest.raises(InvalidMessage):
        await _new(store, demo.member, conversation_id=chosen)
    still = await store.get_conversation(chosen, demo.owner.id, demo.owner.organization_id)
    assert still == created


async def test_create_conversation_checks_membership(store: ConversationStore, demo: Demo) -> None:
    """A member cannot create a conversation in another organization, nor continue a foreign one."""
    with pytest.raises(Forbidden):
        await store.create_conversation(demo.owner.id, demo.globex.organization_id)
    foreign = await _new(store, demo.member)
    with pytest.raises(NotFound):
        await _new(store, demo.owner, previous_conversation_id=foreign.id)
    assert await store.latest_conversation(demo.owner.id, demo.owner.organization_id) is None


async def test_conversations_are_private(store: ConversationStore, demo: Demo) -> None:
    """Another member, or the same member id under another organization, sees no conversation."""
    mine = await _new(store, demo.owner)
    assert await store.get_conversation(mine.id, demo.member.id, demo.member.organization_id) is None
    assert await store.get_conversation(mine.id, demo.owner.id, demo.globex.organization_id) is None
    assert await store.latest_conversation(demo.member.id, demo.member.organization_id) is None
    assert await store.list_conversations(demo.member.id, demo.member.organization_id) == ([], None)


async def test_latest_conversation_follows_new_messages(store: ConversationStore, demo: Demo) -> None:
    """The latest conversation is the one that most recently got a message, not the newest one."""
    assert await store.latest_conversation(demo.owner.id, demo.owner.organization_id) is None
    older = await _new(store, demo.owner)
    newer = await _new(store, demo.owner)
    latest = await store.latest_conversation(demo.owner.id, demo.owner.organization_id)
    assert latest is not None
    assert latest.id == newer.id
    await store.add_message(older.id, "user", "back to this one")
    latest = await store.latest_conversation(demo.owner.id, demo.owner.organization_id)
    assert latest is not None
    assert (latest.id, latest.message_count) == (older.id, 1)
    assert latest.updated_at > older.updated_at


async def test_list_conversations_pages(store: ConversationStore, demo: Demo) -> None:
    """Pages run from the most recently updated, and the cursors walk all of them exactly once."""
    created = [await _new(store, demo.owner) for _ in range(5)]
    await _new(store, demo.member)  # someone else's: never listed
    seen: list[ConversationInfo] = []
    cursor: str | None = None
    pages = 0
    while True:
        page, cursor = await store.list_conversations(
            demo.owner.id, demo.owner.organization_id, before=cursor, limit=2
        )
        seen += page
        pages += 1
        if cursor is None:
            break
    assert pages == 3
    assert [c.id for c in seen] == [c.id for c in reversed(created)]
    for conversation in seen:
        _assert_utc(conversation.updated_at)
    page, cursor = await store.list_conversations(demo.owner.id, demo.owner.organization_id, limit=5)
    assert (len(page), cursor) == (5, None)
    for limit in (0, 101):
        with pytest.raises(ValueError, match="limit"):
            await store.list_conversations(demo.owner.id, demo.owner.organization_id, limit=limit)


async def test_the_listed_count_leaves_earlier_versions_out(store: ConversationStore, demo: Demo) -> None:
    """The picker's count is what the conversation shows: an answer written again and an edited exchange are not counted; an answer that continues the one before it is."""
    conversation = await _new(store, demo.owner)
    add = store.add_message
    await add(conversation.id, "user", "hello")  # 0: an exchange edited later
    await add(conversation.id, "assistant", "hi")  # 1
    await store.supersede(conversation.id, 0)
    await add(conversation.id, "user", "hello again")  # 2
    await add(conversation.id, "assistant", "first try")  # 3: written again by 4
    await add(conversation.id, "assistant", "second try")  # 4
    await add(conversation.id, "user", "approve it")  # 5
    await add(conversation.id, "assistant", "shall I?")  # 6: continued by 7, not a version
    await add(conversation.id, "assistant", "done", client_message_id=f"{CONTINUATION_PREFIX}approval:1")  # 7
    (listed,), _ = await store.list_conversations(demo.owner.id, demo.owner.organization_id)
    assert (listed.id, listed.message_count) == (conversation.id, 5)  # 2, 4, 5, 6, 7
    stored = await store.get_conversation(conversation.id, demo.owner.id, demo.owner.organization_id)
    assert stored is not None
    assert stored.message_count == 8


async def test_list_conversations_breaks_ties_by_id(
    engine: AsyncEngine, store: ConversationStore, demo: Demo
) -> None:
    """Conversations updated at the same instant order by id, descending, across page boundaries."""
    created = [await _new(store, demo.owner) for _ in range(7)]
    await _set_updated_at(engine, datetime(2025, 6, 1, 12, 0, 0, 500, tzinfo=UTC))
    seen: list[UUID] = []
    cursor: str | None = None
    while True:
        page, cursor = await store.list_conversations(
            demo.owner.id, demo.owner.organization_id, before=cursor, limit=3
        )
        seen += [c.id for c in page]
        if cursor is None:
            break
    assert seen == sorted((c.id for c in created), reverse=True)
    latest = await store.latest_conversation(demo.owner.id, demo.owner.organization_id)
    assert latest is not None
    assert latest.id == seen[0]


@pytest.mark.parametrize(
    "cursor",
    [
        "not a cursor!",
        base64.urlsafe_b64encode(b"2025-01-01T00:00:00+00:00").decode(),
        base64.urlsafe_b64encode(b"yesterday|" + uuid.uuid4().hex.encode()).decode(),
        base64.urlsafe_b64encode(b"2025-01-01T00:00:00|" + uuid.uuid4().hex.encode()).decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
    # Fixed ids: the cursors hold random ids, and every pytest-xdist worker must collect the same tests.
    ids=["not-base64", "no-id", "not-a-time", "naive-time", "not-text"],
)
async def test_malformed_cursor_is_invalid_message(store: ConversationStore, demo: Demo, cursor: str) -> None:
    """A cursor the server did not hand out is refused as an invalid message, never a crash."""
    with pytest.raises(InvalidMessage):
        await store.list_conversations(demo.owner.id, demo.owner.organization_id, before=cursor)


async def test_rename_conversation(store: ConversationStore, demo: Demo) -> None:
    """A rename strips and cuts the title to 255 characters and does not move the conversation."""
    conversation = await _new(store, demo.owner)
    renamed = await store.rename_conversation(
        conversation.id, demo.owner.id, demo.owner.organization_id, "  " + "x" * 300 + "  "
    )
    assert renamed is not None
    assert renamed.title == "x" * 255
    assert renamed.updated_at == conversation.updated_at
    with pytest.raises(InvalidMessage):
        await store.rename_conversation(conversation.id, demo.owner.id, demo.owner.organization_id, "   ")
    assert (
        await store.rename_conversation(conversation.id, demo.member.id, demo.member.organization_id, "Mine")
        is None
    )
    again = await store.get_conversation(conversation.id, demo.owner.id, demo.owner.organization_id)
    assert again is not None
    assert again.title == "x" * 255


async def test_set_title_keeps_updated_at(store: ConversationStore, demo: Demo) -> None:
    """A generated title is cut to 255 characters and leaves `updated_at`; a blank one is ignored."""
    conversation = await _new(store, demo.owner)
    await store.set_title(conversation.id, "Booking follow-ups " * 20)
    titled = await store.get_conversation(conversation.id, demo.owner.id, demo.owner.organization_id)
    assert titled is not None
    assert titled.title == ("Booking follow-ups " * 20).strip()[:255]
    assert titled.updated_at == conversation.updated_at
    await store.set_title(conversation.id, "   ")
    kept = await store.get_conversation(conversation.id, demo.owner.id, demo.owner.organization_id)
    assert kept == titled


async def test_delete_conversation(store: ConversationStore, demo: Demo) -> None:
    """Deleting removes the conversation and its messages; its rollover successor keeps working."""
    full = await _new(store, demo.owner)
    await store.add_message(full.id, "user", "hello", client_message_id="c-1")
    await store.add_message(full.id, "assistant", "hi")
    successor = await _new(store, demo.owner, previous_conversation_id=full.id)
    assert successor.previous_conversation_id == full.id

    assert await store.delete_conversation(full.id, demo.owner.id, demo.owner.organization_id)
    assert await store.get_conversation(full.id, demo.owner.id, demo.owner.organization_id) is None
    assert await store.messages(full.id) == []
    assert await store.find_by_client_message_id(demo.owner.id, demo.owner.organization_id, "c-1") is None
    after = await store.get_conversation(successor.id, demo.owner.id, demo.owner.organization_id)
    assert after is not None
    assert after.previous_conversation_id is None
    stored = await store.add_message(successor.id, "user", "still here")
    assert stored.position == 0
    assert not await store.delete_conversation(full.id, demo.owner.id, demo.owner.organization_id)


async def test_delete_foreign_conversation_is_refused(store: ConversationStore, demo: Demo) -> None:
    """Another member's delete returns False and leaves the conversation and its messages alone."""
    conversation = await _new(store, demo.owner)
    await store.add_message(conversation.id, "user", "hello")
    assert not await store.delete_conversation(conversation.id, demo.member.id, demo.member.organization_id)
    assert not await store.delete_conversation(conversation.id, demo.owner.id, demo.globex.organization_id)
    assert len(await store.messages(conversation.id)) == 1


# Messages


async def test_add_message_takes_next_position(store: ConversationStore, demo: Demo) -> None:
    """Each message takes the next position; the count and `updated_at` of the conversation follow."""
    conversation = await _new(store, demo.owner)
    tool_calls = [
        {
            "call_id": "call_1",
            "tool_name": "search_contacts",
            "arguments": {"query": "Smith"},
            "status": "ok",
            "result": {"ok": True, "data": [{"id": "c1", "name": "Ann Smith"}]},
        }
    ]
    announced = uuid.uuid4()
    first = await store.add_message(conversation.id, "user", "Find Ann", client_message_id="m-1")
    second = await store.add_message(
        conversation.id, "assistant", "Found her.", message_id=announced, tool_calls=tool_calls, model="m"
    )
    assert (first.position, second.position, second.id) == (0, 1, announced)
    assert await store.messages(conversation.id) == [first, second]
    assert second.tool_calls == tool_calls
    _assert_utc(second.created_at)
    after = await store.get_conversation(conversation.id, demo.owner.id, demo.owner.organization_id)
    assert after is not None
    assert after.message_count == 2
    assert after.updated_at >= second.created_at > conversation.updated_at


async def test_add_message_without_tool_calls_stores_null(
    engine: AsyncEngine, store: ConversationStore, demo: Demo
) -> None:
    """A message without tool calls stores SQL NULL (not JSON null) and reads back as None."""
    conversation = await _new(store, demo.owner)
    message = await store.add_message(conversation.id, "user", "hi")
    tool_calls_json = table_of(Message).c.tool_calls_json
    async with engine.connect() as connection:
        found = await connection.scalar(sa.select(sa.func.count()).where(tool_calls_json.is_(None)))
    assert found == 1
    assert (await store.messages(conversation.id))[0].tool_calls is None
    assert message.tool_calls is None


async def test_add_message_validates_its_arguments(store: ConversationStore, demo: Demo) -> None:
    """An unknown conversation is NotFound; an unknown role or status is a programming error."""
    with pytest.raises(NotFound):
        await store.add_message(uuid.uuid4(), "user", "hi")
    conversation = await _new(store, demo.owner)
    with pytest.raises(ValueError, match="role"):
        await store.add_message(conversation.id, "system", "hi")
    with pytest.raises(ValueError, match="status"):
        await store.add_message(conversation.id, "assistant", "hi", status="done")
    assert await store.messages(conversation.id) == []


async def test_duplicate_client_message_stores_nothing(store: ConversationStore, demo: Demo) -> None:
    """A repeated client message id in one conversation raises DuplicateClientMessage and stores nothing."""
    conversation = await _new(store, demo.owner)
    first = await store.add_message(conversation.id, "user", "hello", client_message_id="m-1")
    with pytest.raises(DuplicateClientMessage) as raised:
        await store.add_message(conversation.id, "user", "hello again", client_message_id="m-1")
    assert isinstance(raised.value, VernisError)
    assert (raised.value.message_id, raised.value.client_message_id) == (first.id, "m-1")
    assert await store.messages(conversation.id) == [first]
    after = await store.get_conversation(conversation.id, demo.owner.id, demo.owner.organization_id)
    assert after is not None
    assert after.message_count == 1
    other = await _new(store, demo.owner)
    assert (await store.add_message(other.id, "user", "hello", client_message_id="m-1")).position == 0
    await store.add_message(conversation.id, "assistant", "one")
    await store.add_message(conversation.id, "assistant", "two")
    assert [m.position for m in await store.messages(conversation.id)] == [0, 1, 2]


async def test_concurrent_adds_get_distinct_positions(store: ConversationStore, demo: Demo) -> None:
    """Twenty concurrent adds to one conversation take positions 0..19 and leave the count at 20."""
    conversation = await _new(store, demo.owner)
    stored = await asyncio.gather(
        *(store.add_message(conversation.id, "user", f"message {n}") for n in range(20))
    )
    assert sorted(m.position for m in stored) == list(range(20))
    in_order = await store.messages(conversation.id)
    assert [m.position for m in in_order] == list(range(20))
    assert {m.id for m in in_order} == {m.id for m in stored}
    after = await store.get_conversation(conversation.id, demo.owner.id, demo.owner.organization_id)
    assert after is not None
    assert after.message_count == 20


async def test_concurrent_duplicates_store_one(store: ConversationStore, demo: Demo) -> None:
    """Five concurrent adds with one client message id store exactly one message."""
    conversation = await _new(store, demo.owner)
    outcomes = await asyncio.gather(
        *(store.add_message(conversation.id, "user", "hi", client_message_id="same") for _ in range(5)),
        return_exceptions=True,
    )
    stored = [o for o in outcomes if isinstance(o, StoredMessage)]
    duplicates = [o for o in outcomes if isinstance(o, DuplicateClientMessage)]
    assert (len(stored), len(duplicates)) == (1, 4)
    assert {d.message_id for d in duplicates} == {stored[0].id}
    assert await store.messages(conversation.id) == stored


@pytest.fixture(params=["engine", "fastest"])
def exchanges(request: pytest.FixtureRequest, engine: AsyncEngine) -> ConversationStore:
    """The store through the async engine, and through the app's fastest transactions (on PostgreSQL,
    asyncpg directly)."""
    if request.param == "engine":
        return ConversationStore(engine)
    return ConversationStore(engine, transactions=request.getfixturevalue("transactions"))


async def test_concurrent_exchanges_take_distinct_positions(exchanges: ConversationStore, demo: Demo) -> None:
    """Ten exchanges started at once in one conversation: each user message and its answer's row take two consecutive positions, 0..19 in all, and the count is 20."""
    conversation = await _new(exchanges, demo.owner)
    answers = [uuid.uuid4() for _ in range(10)]
    users = await asyncio.gather(
        *(
            exchanges.add_exchange(conversation.id, f"m{n}", answer_id=a, model="m")
            for n, a in enumerate(answers)
        )
    )
    stored = {m.id: m for m in await exchanges.messages(conversation.id)}
    assert sorted(m.position for m in stored.values()) == list(range(20))
    for user, answer_id in zip(users, answers, strict=True):
        assert stored[user.id].position == user.position
        assert (stored[user.id].role, stored[user.id].content) == ("user", user.content)
        assert (stored[answer_id].position, stored[answer_id].status) == (user.position + 1, "streaming")
        assert stored[answer_id].role == "assistant"
    after = await exchanges.get_conversation(conversation.id, demo.owner.id, demo.owner.organization_id)
    assert after is not None
    assert after.message_count == 20


async def test_a_resent_exchange_is_stored_once(exchanges: ConversationStore, demo: Demo) -> None:
    """Five exchanges sent at once with one client message id store one user message and one answer row; the other four raise DuplicateClientMessage naming it."""
    conversation = await _new(exchanges, demo.owner)
    outcomes = await asyncio.gather(
        *(
            exchanges.add_exchange(
                conversation.id, "hi", answer_id=uuid.uuid4(), model="m", client_message_id="c-1"
            )
            for _ in range(5)
        ),
        return_exceptions=True,
    )
    stored = [o for o in outcomes if isinstance(o, StoredMessage)]
    duplicates = [o for o in outcomes if isinstance(o, DuplicateClientMessage)]
    assert (len(stored), len(duplicates)) == (1, 4), outcomes
    assert {d.message_id for d in duplicates} == {stored[0].id}
    assert [m.role for m in await exchanges.messages(conversation.id)] == ["user", "assistant"]


async def test_an_exchange_beyond_the_bound_or_in_no_conversation_stores_nothing(
    exchanges: ConversationStore, demo: Demo
) -> None:
    """With a bound of 4 messages, two exchanges fit and the third raises ConversationFull storing nothing; an unknown conversation raises NotFound."""
    conversation = await _new(exchanges, demo.owner)
    for n in range(2):
        await exchanges.add_exchange(conversation.id, f"m{n}", answer_id=uuid.uuid4(), model="m", limit=4)
    with pytest.raises(ConversationFull):
        await exchanges.add_exchange(
            conversation.id, "one too many", answer_id=uuid.uuid4(), model="m", limit=4
        )
    assert len(await exchanges.messages(conversation.id)) == 4
    with pytest.raises(NotFound):
        await exchanges.add_exchange(uuid.uuid4(), "nowhere", answer_id=uuid.uuid4(), model="m")


async def test_final_rows_and_their_companions_are_one_transaction(
    exchanges: ConversationStore, engine: AsyncEngine, demo: Demo
) -> None:
    """`update_messages(..., also=...)` writes the answers' rows and the other statements together (an answer's usage row is there with its final row), and when one of those fails, neither is written."""
    conversation = await _new(exchanges, demo.owner)
    answer_id = uuid.uuid4()
    await exchanges.add_exchange(conversation.id, "hi", answer_id=answer_id, model="m")
    usage = UsageStore(engine)
    day = datetime.now(UTC).date()
    spent = Spent(demo.owner.organization_id, demo.owner.id, day, "m", 10, 5, 0)
    final = [MessageUpdate(answer_id, "Done.", None, MessageStatus.COMPLETE)]
    bad_row = {**usage.rows([spent])[1][0], "member_id": None}  # NOT NULL: the insert fails
    with pytest.raises(sa.exc.IntegrityError):
        await exchanges.update_messages(final, also=[(usage.upsert, [bad_row])])
    assert (await _message_row(engine, answer_id))["status"] == "streaming"
    assert await usage.member_tokens(demo.owner.id, day) == 0
    await exchanges.update_messages(final, also=[usage.rows([spent, spent])])
    assert (await _message_row(engine, answer_id))["status"] == "complete"
    assert await usage.member_tokens(demo.owner.id, day) == 30


async def test_update_message_changes_only_given_fields(
    engine: AsyncEngine, store: ConversationStore, demo: Demo
) -> None:
    """An update changes exactly the fields given, and bumps the message's `updated_at`."""
    conversation = await _new(store, demo.owner)
    message = await store.add_message(conversation.id, "assistant", "Partial", status="streaming", model="a")
    before = await _message_row(engine, message.id)
    await store.update_message(message.id, content="Partial answer", prompt_tokens=12)
    middle = await _message_row(engine, message.id)
    assert (middle["content"], middle["status"], middle["prompt_tokens"], middle["model"]) == (
        "Partial answer",
        "streaming",
        12,
        "a",
    )
    assert middle["updated_at"] > before["updated_at"]
    tool_calls: list[dict[str, Any]] = [
        {"call_id": "c", "tool_name": "t", "arguments": {}, "status": "ok", "result": None}
    ]
    await store.update_message(
        message.id, tool_calls=tool_calls, status="complete", completion_tokens=30, model="b"
    )
    after = await _message_row(engine, message.id)
    assert (after["content"], after["status"], after["prompt_tokens"], after["completion_tokens"]) == (
        "Partial answer",
        "complete",
        12,
        30,
    )
    assert (after["tool_calls_json"], after["model"]) == (tool_calls, "b")
    await store.update_message(message.id)
    assert await _message_row(engine, message.id) == after
    with pytest.raises(ValueError, match="status"):
        await store.update_message(message.id, status="finished")


async def test_last_messages_stay_in_order(store: ConversationStore, demo: Demo) -> None:
    """`last=N` returns only the N most recent messages, still oldest first."""
    conversation = await _new(store, demo.owner)
    for n in range(6):
        await store.add_message(conversation.id, "user" if n % 2 == 0 else "assistant", f"m{n}")
    assert [m.content for m in await store.messages(conversation.id, last=3)] == ["m3", "m4", "m5"]
    assert len(await store.messages(conversation.id, last=50)) == 6
    assert await store.messages(conversation.id, last=0) == []
    assert await store.messages(uuid.uuid4()) == []


async def test_find_by_client_message_id(store: ConversationStore, demo: Demo) -> None:
    """A client message id is found across the member's conversations, and only theirs."""
    await _new(store, demo.owner)
    second = await _new(store, demo.owner)
    sent = await store.add_message(second.id, "user", "hi", client_message_id="tab-1:42")
    assert (
        await store.find_by_client_message_id(demo.owner.id, demo.owner.organization_id, "tab-1:42") == sent
    )
    assert (
        await store.find_by_client_message_id(demo.member.id, demo.member.organization_id, "tab-1:42") is None
    )
    assert (
        await store.find_by_client_message_id(demo.owner.id, demo.globex.organization_id, "tab-1:42") is None
    )
    assert (
        await store.find_by_client_message_id(demo.owner.id, demo.owner.organization_id, "tab-1:43") is None
    )


async def test_recover_interrupted_fails_streaming_messages(
    engine: AsyncEngine, store: ConversationStore, demo: Demo
) -> None:
    """At startup every message left `streaming` becomes `failed`, keeping the text written so far."""
    conversation = await _new(store, demo.owner)
    await store.add_message(conversation.id, "user", "Write a long answer")
    cut = await store.add_message(conversation.id, "assistant", "The first half", status="streaming")
    other = await _new(store, demo.member)
    await store.add_message(other.id, "assistant", "Also cut", status="streaming")
    assert await store.recover_interrupted() == 2
    messages = await store.messages(conversation.id)
    assert [(m.status, m.content) for m in messages] == [
        ("complete", "Write a long answer"),
        ("failed", "The first half"),
    ]
    assert messages[1].id == cut.id
    assert await store.recover_interrupted() == 0


async def test_recover_interrupted_spares_live_answers(
    engine: AsyncEngine, store: ConversationStore, demo: Demo
) -> None:
    """With `stale_after`, an answer another instance flushed recently stays `streaming`."""
    conversation = await _new(store, demo.owner)
    stale = await store.add_message(conversation.id, "assistant", "old", status="streaming")
    live = await store.add_message(conversation.id, "assistant", "new", status="streaming")
    messages = table_of(Message)
    async with engine.begin() as connection:
        await connection.execute(
            sa.update(messages)
            .where(messages.c.id == stale.id)
            .values(updated_at=datetime.now(UTC) - timedelta(minutes=5))
        )
    assert await store.recover_interrupted(stale_after=timedelta(seconds=30)) == 1
    statuses = {m.id: m.status for m in await store.messages(conversation.id)}
    assert statuses == {stale.id: "failed", live.id: "streaming"}
