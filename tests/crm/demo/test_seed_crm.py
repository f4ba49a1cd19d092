"""The demo CRM (`seed_demo`): realistic volumes for Acme Dental, a smaller separate Globex, the
same rows on every fresh database, nothing added or brought back by a second run, dates in the
last 90 days, normalized phone numbers and notifications for every member."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlmodel import SQLModel

import vernis_crm
from tests.fixtures.db import *  # noqa: F403
from vernis.store.engine import create_engine
from vernis.store.migrate import upgrade
from vernis.store.models import Member, table_of
from vernis_crm.demo.seed import SeedResult, demo_id, seed_demo
from vernis_crm.models import (
    Analyzer,
    Call,
    Contact,
    ContactEmail,
    ContactNote,
    ContactPhone,
    ContactTag,
    KnowledgeItem,
    Notification,
    PhoneNumber,
    Plan,
    PlanTemplate,
    SmsMessage,
    Tag,
    Task,
    TextAgent,
    VoiceAgent,
    to_e164,
)

PINNED = datetime(2025, 3, 14, 15, 26, 53, tzinfo=UTC)
CRM_TABLES = [
    table
    for table in SQLModel.metadata.sorted_tables
    if table.name not in {"organization", "member", "organization_ai_rules"} and "organization_id" in table.c
    and not table.name.startswith(("assistant_", "audit_"))
]  # fmt: skip

# (model, Acme range, Globex range)
VOLUMES: list[tuple[type[SQLModel], tuple[int, int], tuple[int, int]]] = [
    (Contact, (280, 320), (35, 45)),
    (Call, (2300, 2700), (200, 300)),
    (SmsMessage, (1800, 2200), (150, 250)),
    (PlanTemplate, (4, 4), (1, 1)),
    (Plan, (35, 45), (3, 8)),
    (Task, (50, 70), (8, 15)),
    (PhoneNumber, (3, 3), (1, 1)),
    (VoiceAgent, (2, 2), (1, 1)),
    (Analyzer, (2, 2), (1, 1)),
    (TextAgent, (1, 1), (1, 1)),
    (KnowledgeItem, (8, 12), (1, 5)),
    (ContactNote, (100, 500), (5, 60)),
    (Notification, (90, 110), (10, 20)),
]


async def _count(connection: AsyncConnection, table: sa.FromClause, *where: Any) -> int:
    statement = sa.select(sa.func.count()).select_from(table).where(*where)
    return (await connection.execute(statement)).scalar_one()


async def _dump(engine: AsyncEngine) -> dict[str, list[tuple[Any, ...]]]:
    """Every CRM row (and every notification), in primary-key order."""
    async with engine.connect() as connection:
        return {
            table.name: [
                tuple(row)
                for row in await connection.execute(sa.select(table).order_by(*table.primary_key.columns))
            ]
            for table in CRM_TABLES
        }


async def _fresh_engine(url: str) -> AsyncEngine:
    assert vernis_crm.toolkit.migrations is not None
    await upgrade(url, branches=[vernis_crm.toolkit.migrations])
    return create_engine(url)


async def test_acme_and_globex_have_realistic_volumes(engine: AsyncEngine, seeded: SeedResult) -> None:
    """Acme Dental holds hundreds of contacts, thousands of calls and messages; Globex a smaller set of its own."""
    acme, globex = seeded.organizations["acme"], seeded.organizations["globex"]
    async with engine.connect() as connection:
        for model, (acme_low, acme_high), (globex_low, globex_high) in VOLUMES:
            table = table_of(model)
            in_acme = await _count(connection, table, table.c.organization_id == acme)
            in_globex = await _count(connection, table, table.c.organization_id == globex)
            assert acme_low <= in_acme <= acme_high, (model.__name__, in_acme)
            assert globex_low <= in_globex <= globex_high, (model.__name__, in_globex)
        for table in CRM_TABLES:
            assert await _count(connection, table) == seeded.rows[table.name], table.name


async def test_the_data_set_is_varied(engine: AsyncEngine, seeded: SeedResult) -> None:
    """Calls, messages, tasks and plans cover every status; contacts have tags, companies, e-mails and notes."""
    acme = seeded.organizations["acme"]
    calls, sms, tasks, plans = (table_of(model) for model in (Call, SmsMessage, Task, Plan))
    async with engine.connect() as connection:

        async def spread(table: sa.Table, column: str) -> Counter[str]:
            rows = await connection.execute(
                sa.select(table.c[column], sa.func.count())
                .where(table.c.organization_id == acme)
                .group_by(table.c[column])
            )
            return Counter(dict(rows.all()))

        call_status = await spread(calls, "status")
        assert set(call_status) == {"answered", "missed", "voicemail", "failed"}
        assert call_status["answered"] > call_status["missed"] > call_status["failed"]
        assert set(await spread(calls, "direction")) == {"inbound", "outbound"}
        assert set(await spread(sms, "status")) == {"received", "sent", "delivered", "failed", "queued"}
        assert set(await spread(tasks, "status")) == {"open", "done", "dismissed"}
        assert set(await spread(plans, "status")) == {"active", "completed", "cancelled"}
        assert len(await spread(tasks, "assignee_id")) >= 3
        tag_names = set(
            (
                await connection.execute(
                    sa.select(table_of(Tag).c.name).where(table_of(Tag).c.organization_id == acme)
                )
            ).scalars()
        )
        assert {"patient", "lead", "vip", "insurance-pending"} <= tag_names
        answered = await connection.execute(
            sa.select(calls.c.duration_seconds, calls.c.summary).where(
                calls.c.organization_id == acme, calls.c.status == "answered", calls.c.contact_id.is_not(None)
            )
        )
        durations, summaries = zip(*answered.all(), strict=True)
        assert min(durations) > 0
        assert max(durations) > 600
        assert all(summaries)
        assert len(set(summaries)) > 100
        contacts = table_of(Contact)
        companies = (
            await connection.execute(
                sa.select(sa.func.count(sa.distinct(contacts.c.company))).where(
                    contacts.c.organization_id == acme
                )
            )
        ).scalar_one()
        assert companies > 10
        no_duration = await _count(
            connection, calls, calls.c.status.in_(["missed", "failed"]), calls.c.duration_seconds != 0
        )
        assert no_duration == 0


async def test_same_rows_on_every_fresh_database(engine: AsyncEngine, empty_database_url: str) -> None:
    """Two fresh databases seeded at the same moment hold identical rows with the same ids."""
    first = await seed_demo(engine, now=PINNED)
    other = await _fresh_engine(empty_database_url)
    try:
        second = await seed_demo(other, now=PINNED)
        assert await _dump(engine) == await _dump(other)
    finally:
        await other.dispose()
    assert dict(first.entities) == dict(second.entities)
    assert dict(first.rows) == dict(second.rows)
    assert first.inserted == second.inserted > 7000
    assert first.anchor == second.anchor == PINNED.replace(minute=0, second=0)


async def test_ids_do_not_depend_on_the_day(engine: AsyncEngine, empty_database_url: str) -> None:
    """A seed on another day writes the same ids (only the dates move), so runs on different days agree."""
    await seed_demo(engine, now=PINNED)
    other = await _fresh_engine(empty_database_url)
    try:
        later = await seed_demo(other, now=PINNED + timedelta(days=3, hours=7))
        today, in_three_days = await _dump(engine), await _dump(other)
    finally:
        await other.dispose()
    assert later.anchor == datetime(2025, 3, 17, 22, 0, tzinfo=UTC)
    for table in CRM_TABLES:
        keys = len(table.primary_key.columns)
        assert [row[:keys] for row in today[table.name]] == [row[:keys] for row in in_three_days[table.name]]
    calls = {row[0]: row for row in today["call"]}
    moved = {row[0]: row for row in in_three_days["call"]}
    started = list(table_of(Call).c.keys()).index("started_at")
    shifts = {moved[id_][started] - calls[id_][started] for id_ in calls}
    assert timedelta(days=3) in shifts


async def test_well_known_rows_are_named_by_their_natural_key(
    engine: AsyncEngine, seeded: SeedResult
) -> None:
    """SeedResult names one row of each kind per organization, with the ids `demo_id` derives, in that organization."""
    entities = seeded.entities
    assert entities["acme:contact:Jane Cooper"] == demo_id("contact", "acme:Jane Cooper")
    assert entities["globex:contact:Jane Cooper"] == demo_id("contact", "globex:Jane Cooper")
    models: dict[str, type[SQLModel]] = {
        "contact": Contact,
        "call": Call,
        "sms": SmsMessage,
        "plan": Plan,
        "plan_template": PlanTemplate,
        "task": Task,
        "phone_number": PhoneNumber,
        "voice_agent": VoiceAgent,
        "analyzer": Analyzer,
        "text_agent": TextAgent,
        "knowledge_item": KnowledgeItem,
        "tag": Tag,
    }
    for slug in ("acme", "globex"):
        kinds = {key.split(":")[1] for key in entities if key.startswith(f"{slug}:")}
        assert kinds == set(models), slug
    async with engine.connect() as connection:
        for key, id_ in entities.items():
            slug, kind, _ = key.split(":", 2)
            table = table_of(models[kind])
            owner = (
                await connection.execute(sa.select(table.c.organization_id).where(table.c.id == id_))
            ).scalar_one()
            assert owner == seeded.organizations[slug], key


async def test_jane_cooper_exists_in_both_tenants_apart(engine: AsyncEngine, seeded: SeedResult) -> None:
    """Each organization has its own Jane Cooper: different ids, e-mails and phones, and her call, message, plan and task in her own tenant."""
    contacts, emails, phones = table_of(Contact), table_of(ContactEmail), table_of(ContactPhone)
    acme_jane, globex_jane = (
        seeded.entities["acme:contact:Jane Cooper"],
        seeded.entities["globex:contact:Jane Cooper"],
    )
    assert acme_jane != globex_jane
    async with engine.connect() as connection:
        named = (
            await connection.execute(
                sa.select(contacts.c.organization_id, contacts.c.id).where(
                    contacts.c.first_name == "Jane", contacts.c.last_name == "Cooper"
                )
            )
        ).all()
        assert sorted(named) == sorted(
            [(seeded.organizations["acme"], acme_jane), (seeded.organizations["globex"], globex_jane)]
        )
        details = {}
        for jane in (acme_jane, globex_jane):
            details[jane] = (
                set(
                    (
                        await connection.execute(sa.select(emails.c.email).where(emails.c.contact_id == jane))
                    ).scalars()
                ),
                set(
                    (
                        await connection.execute(
                            sa.select(phones.c.number_e164).where(phones.c.contact_id == jane)
                        )
                    ).scalars()
                ),
            )
        assert details[acme_jane][0].isdisjoint(details[globex_jane][0])
        assert details[acme_jane][1].isdisjoint(details[globex_jane][1])
        for slug, jane in (("acme", acme_jane), ("globex", globex_jane)):
            for kind, model in (("call", Call), ("sms", SmsMessage), ("plan", Plan)):
                table = table_of(model)
                row = (
                    await connection.execute(
                        sa.select(table).where(table.c.id == seeded.entities[f"{slug}:{kind}:Jane Cooper"])
                    )
                ).one()
                assert row.contact_id == jane, (slug, kind)


async def test_no_row_points_into_another_tenant(engine: AsyncEngine, seeded: SeedResult) -> None:
    """Every reference between demo rows (contacts, lines, agents, members, plans) stays within one organization."""
    references: list[tuple[type[SQLModel], str, type[SQLModel]]] = [
        (Call, "contact_id", Contact),
        (Call, "phone_number_id", PhoneNumber),
        (Call, "agent_id", VoiceAgent),
        (SmsMessage, "contact_id", Contact),
        (SmsMessage, "phone_number_id", PhoneNumber),
        (SmsMessage, "sender_id", Member),
        (Task, "contact_id", Contact),
        (Task, "assignee_id", Member),
        (Task, "plan_id", Plan),
        (Plan, "assignee_id", Member),
        (PhoneNumber, "voice_agent_id", VoiceAgent),
        (PhoneNumber, "text_agent_id", TextAgent),
        (ContactNote, "author_id", Member),
        (Notification, "member_id", Member),
    ]
    async with engine.connect() as connection:
        for model, column, target_model in references:
            table, target = table_of(model), table_of(target_model)
            linked = await _count(connection, table.join(target, table.c[column] == target.c.id))
            crossing = await _count(
                connection,
                table.join(target, table.c[column] == target.c.id),
                table.c.organization_id != target.c.organization_id,
            )
            assert linked > 0, (model.__name__, column)
            assert crossing == 0, (model.__name__, column)


async def test_second_seed_inserts_nothing_and_brings_nothing_back(
    engine: AsyncEngine, seeded: SeedResult
) -> None:
    """Re-seeding inserts no row: an organization that has its CRM keeps what people deleted or changed since."""
    contacts, tags = table_of(Contact), table_of(Tag)
    robert = seeded.entities["acme:contact:Robert Fox"]
    async with engine.begin() as connection:
        await connection.execute(sa.delete(contacts).where(contacts.c.id == robert))
        await connection.execute(
            sa.update(tags).where(tags.c.id == seeded.entities["acme:tag:vip"]).values(name="v.i.p.")
        )
    before = await _dump(engine)
    again = await seed_demo(engine)
    assert again.inserted == 0
    assert await _dump(engine) == before
    assert dict(again.entities) == dict(seeded.entities)


async def test_an_organization_without_its_crm_gets_it_on_the_next_seed(
    engine: AsyncEngine, seeded: SeedResult
) -> None:
    """Once Globex's CRM is gone, the next seed writes it again, row for row, and leaves Acme's alone."""
    globex = seeded.organizations["globex"]
    before = await _dump(engine)
    async with engine.begin() as connection:
        globex_rows = sum(
            [await _count(connection, table, table.c.organization_id == globex) for table in CRM_TABLES]
        )
        for table in reversed(CRM_TABLES):
            await connection.execute(sa.delete(table).where(table.c.organization_id == globex))
    again = await seed_demo(engine, now=seeded.anchor)
    assert 300 < again.inserted == globex_rows
    assert await _dump(engine) == before


async def test_events_fall_in_the_last_90_days(engine: AsyncEngine, seeded: SeedResult) -> None:
    """Calls, messages, plans and notifications happened in the 90 days up to the seed's anchor (its hour); nothing is in the future."""
    now = datetime.now(UTC)
    window = (seeded.anchor - timedelta(days=90), seeded.anchor)
    assert seeded.anchor <= now
    async with engine.connect() as connection:
        for model, column in (
            (Call, "started_at"),
            (SmsMessage, "created_at"),
            (Plan, "started_at"),
            (Notification, "created_at"),
            (ContactNote, "created_at"),
        ):
            table = table_of(model)
            earliest, latest = (
                await connection.execute(
                    sa.select(sa.func.min(table.c[column]), sa.func.max(table.c[column]))
                )
            ).one()
            assert earliest.tzinfo is not None
            if model is not ContactNote:
                assert window[0] < earliest, model.__name__
            assert latest <= window[1], model.__name__
        calls = table_of(Call)
        last_week = await _count(connection, calls, calls.c.started_at > seeded.anchor - timedelta(days=7))
        assert last_week > 100
        plans, notifications, tasks = table_of(Plan), table_of(Notification), table_of(Task)
        assert await _count(connection, plans, plans.c.completed_at > seeded.anchor) == 0
        assert await _count(connection, plans, plans.c.completed_at < plans.c.started_at) == 0
        assert (
            await _count(connection, notifications, notifications.c.read_at < notifications.c.created_at) == 0
        )
        assert await _count(connection, notifications, notifications.c.read_at > seeded.anchor) == 0
        assert await _count(connection, tasks, tasks.c.completed_at > seeded.anchor) == 0
        assert await _count(connection, tasks, tasks.c.created_at > seeded.anchor) == 0


async def test_calls_happen_in_local_business_hours(engine: AsyncEngine, seeded: SeedResult) -> None:
    """Acme's calls are placed in New York time: daytime on the main line, evenings and early mornings on the after-hours line, never on a Sunday."""
    calls = table_of(Call)
    zone = ZoneInfo("America/New_York")
    after_hours = seeded.entities["acme:phone_number:After-hours line"]
    async with engine.connect() as connection:
        rows = (
            await connection.execute(
                sa.select(calls.c.started_at, calls.c.phone_number_id).where(
                    calls.c.organization_id == seeded.organizations["acme"]
                )
            )
        ).all()
    for started, line in rows:
        local = started.astimezone(zone)
        assert local.weekday() != 6
        minute = local.hour * 60 + local.minute
        if line == after_hours:
            assert not 8 * 60 <= minute < 17 * 60 + 30
        else:
            assert 8 * 60 <= minute < 17 * 60 + 30


async def test_tasks_fall_due_around_today(engine: AsyncEngine, seeded: SeedResult) -> None:
    """Open tasks include overdue ones, ones due today and ones ahead (in the organization's time zone), for several members."""
    tasks = table_of(Task)
    zone = ZoneInfo("America/New_York")
    today = seeded.anchor.astimezone(zone).date()
    async with engine.connect() as connection:
        rows = (
            await connection.execute(
                sa.select(tasks.c.due_at, tasks.c.assignee_id).where(
                    tasks.c.organization_id == seeded.organizations["acme"], tasks.c.status == "open"
                )
            )
        ).all()
    days = Counter((due.astimezone(zone).date() - today).days for due, _ in rows)
    assert sum(count for day, count in days.items() if day < 0) >= 3
    assert days[0] >= 3
    assert sum(count for day, count in days.items() if day > 0) >= 5
    member = seeded.members["member@acme.test"]
    assert sum(1 for _, assignee in rows if assignee == member) >= 5


async def test_phone_numbers_are_typed_variously_and_stored_normalized(
    engine: AsyncEngine, seeded: SeedResult
) -> None:
    """Contact phones keep many typed formats and each one's E.164 form; e-mails are lowercase with one primary per contact."""
    phones, emails = table_of(ContactPhone), table_of(ContactEmail)
    country = {seeded.organizations["acme"]: "1", seeded.organizations["globex"]: "49"}
    async with engine.connect() as connection:
        rows = (
            await connection.execute(
                sa.select(phones.c.organization_id, phones.c.number, phones.c.number_e164)
            )
        ).all()
        addresses = (await connection.execute(sa.select(emails.c.email))).scalars().all()
        primaries = (
            await connection.execute(
                sa.select(emails.c.contact_id, sa.func.count())
                .where(emails.c.is_primary)
                .group_by(emails.c.contact_id)
            )
        ).all()
        lines = (await connection.execute(sa.select(table_of(PhoneNumber).c.number))).scalars().all()
    shapes = set()
    for organization, typed, e164 in rows:
        assert re.fullmatch(r"\+[1-9]\d{7,14}", e164), e164
        assert to_e164(typed, country[organization]) == e164, typed
        shapes.add(re.sub(r"\d", "9", typed))
    assert len(shapes) >= 8
    assert len({e164 for _, _, e164 in rows}) == len(rows)
    assert all(re.fullmatch(r"\+[1-9]\d{7,14}", number) for number in lines)
    assert all(address == address.lower() and "@" in address for address in addresses)
    assert all(count == 1 for _, count in primaries)


async def test_every_member_has_notifications(engine: AsyncEngine, seeded: SeedResult) -> None:
    """Each Acme member has about 25 notifications of every kind, some unread; Globex's owner has its own; links lead to rows of the same organization."""
    notifications, members = table_of(Notification), table_of(Member)
    routes: dict[str, type[SQLModel]] = {"contacts": Contact, "calls": Call, "tasks": Task, "plans": Plan}
    async with engine.connect() as connection:
        rows = (
            await connection.execute(
                sa.select(members.c.email, notifications).join(
                    members, members.c.id == notifications.c.member_id
                )
            )
        ).all()
        per_member: dict[str, list[Any]] = {}
        for row in rows:
            per_member.setdefault(row.email, []).append(row)
        assert set(per_member) == set(seeded.members)
        for email, mine in per_member.items():
            kinds = Counter(row.kind for row in mine)
            unread = sum(1 for row in mine if row.read_at is None)
            if email.endswith("@acme.test"):
                assert len(mine) == 25, email
                assert set(kinds) == {"missed_call", "new_sms", "task_due", "plan_completed", "mention"}, (
                    email
                )
            else:
                assert len(mine) == 15
                assert {"missed_call", "new_sms", "task_due"} <= set(kinds)
            assert 0 < unread < len(mine), email
            for row in mine:
                match = re.fullmatch(r"/(contacts|calls|tasks|plans)/([0-9a-f-]{36})", row.link)
                assert match, row.link
                table = table_of(routes[match[1]])
                owner = (
                    await connection.execute(
                        sa.select(table.c.organization_id).where(table.c.id == uuid.UUID(match[2]))
                    )
                ).scalar_one()
                assert owner == row.organization_id, row.link


async def test_jane_waits_for_an_answer_and_the_outbox_holds_queued_texts(
    engine: AsyncEngine, seeded: SeedResult
) -> None:
    """Jane Cooper's last message is her unanswered inbound SMS; a few outbound texts sit queued from the last hour, with a sender."""
    sms = table_of(SmsMessage)
    jane = seeded.entities["acme:contact:Jane Cooper"]
    async with engine.connect() as connection:
        last = (
            await connection.execute(
                sa.select(sms).where(sms.c.contact_id == jane).order_by(sms.c.created_at.desc()).limit(1)
            )
        ).one()
        queued = (await connection.execute(sa.select(sms).where(sms.c.status == "queued"))).all()
    assert last.id == seeded.entities["acme:sms:Jane Cooper"]
    assert (last.direction, last.status) == ("inbound", "received")
    assert 3 <= len(queued) <= 10
    for row in queued:
        assert row.direction == "outbound"
        assert row.sender_id is not None
        assert seeded.anchor - timedelta(hours=1) <= row.created_at <= seeded.anchor


async def test_infrastructure_is_wired(engine: AsyncEngine, seeded: SeedResult) -> None:
    """Acme's main line has a voice agent, the text agent and both analyzers; templates have steps; tags are linked to contacts."""
    lines = table_of(PhoneNumber)
    main = seeded.entities["acme:phone_number:Main line"]
    async with engine.connect() as connection:
        line = (await connection.execute(sa.select(lines).where(lines.c.id == main))).one()
        analyzers = await connection.execute(
            sa.text("SELECT count(*) FROM phone_number_analyzer WHERE phone_number_id = :id").bindparams(
                sa.bindparam("id", main, type_=sa.Uuid())
            )
        )
        steps = (await connection.execute(sa.select(table_of(PlanTemplate).c.steps))).scalars().all()
        tagged = await _count(connection, table_of(ContactTag))
    assert line.voice_agent_id == seeded.entities["acme:voice_agent:Front Desk Ava"]
    assert line.text_agent_id == seeded.entities["acme:text_agent:SMS Concierge"]
    assert analyzers.scalar_one() == 2
    assert all(len(template) >= 3 and {"day", "channel", "action"} <= set(template[0]) for template in steps)
    assert tagged > 300


@pytest.mark.parametrize("slug", ["acme", "globex"])
async def test_contact_names_are_unique_within_an_organization(
    engine: AsyncEngine, seeded: SeedResult, slug: str
) -> None:
    """No two contacts of one organization share a full name, so a name finds one contact."""
    contacts = table_of(Contact)
    async with engine.connect() as connection:
        names = (
            await connection.execute(
                sa.select(contacts.c.first_name, contacts.c.last_name).where(
                    contacts.c.organization_id == seeded.organizations[slug]
                )
            )
        ).all()
    assert len(names) == len(set(names))
