"""The CRM tables as migrated: tenant-checked references, cascades, the constraints that keep rows
valid, the indexes the tools' queries use, and E.164 normalization."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import SQLModel

from tests.fixtures.db import *  # noqa: F403
from vernis.store.models import Member, Organization, UTCDateTime, table_of
from vernis_crm.models import (
    Analyzer,
    Call,
    Contact,
    ContactEmail,
    ContactNote,
    ContactPhone,
    ContactTag,
    PhoneNumber,
    PhoneNumberAnalyzer,
    Plan,
    PlanTemplate,
    SmsMessage,
    Tag,
    Task,
    VoiceAgent,
    to_e164,
)

NOW = datetime(2025, 3, 14, 15, 0, tzinfo=UTC)


def _row(model: type[SQLModel], **values: Any) -> dict[str, Any]:
    """The row `model(**values)` would write, its Python defaults filled in."""
    return model(**values).model_dump()


async def _insert(engine: AsyncEngine, model: type[SQLModel], **values: Any) -> dict[str, Any]:
    row = _row(model, **values)
    async with engine.begin() as connection:
        await connection.execute(sa.insert(table_of(model)), [row])
    return row


async def _refused(engine: AsyncEngine, model: type[SQLModel], **values: Any) -> None:
    with pytest.raises(sa.exc.IntegrityError):
        await _insert(engine, model, **values)


async def _count(engine: AsyncEngine, model: type[SQLModel], *where: Any) -> int:
    async with engine.connect() as connection:
        statement = sa.select(sa.func.count()).select_from(table_of(model)).where(*where)
        return (await connection.execute(statement)).scalar_one()


@dataclass
class Tenant:
    organization: uuid.UUID
    member: uuid.UUID
    contact: uuid.UUID
    tag: uuid.UUID
    template: uuid.UUID
    analyzer: uuid.UUID
    phone_number: uuid.UUID
    agent: uuid.UUID


async def _tenant(engine: AsyncEngine, slug: str) -> Tenant:
    organization = (await _insert(engine, Organization, name=slug.title(), external_id=slug))["id"]
    member = (
        await _insert(
            engine, Member, organization_id=organization, external_id="m1", email=f"m@{slug}.test", name="M N"
        )
    )["id"]
    agent = (await _insert(engine, VoiceAgent, organization_id=organization, name="Ava", voice="ava"))["id"]
    return Tenant(
        organization=organization,
        member=member,
        contact=(await _insert(engine, Contact, organization_id=organization, first_name="Jane"))["id"],
        tag=(await _insert(engine, Tag, organization_id=organization, name="vip"))["id"],
        template=(await _insert(engine, PlanTemplate, organization_id=organization, name="Recall"))["id"],
        analyzer=(await _insert(engine, Analyzer, organization_id=organization, name="Quality"))["id"],
        phone_number=(
            await _insert(
                engine,
                PhoneNumber,
                organization_id=organization,
                number="+12125550100",
                label="Main",
                voice_agent_id=agent,
            )
        )["id"],
        agent=agent,
    )


@pytest.fixture
async def tenants(engine: AsyncEngine) -> tuple[Tenant, Tenant]:
    """Two organizations, each with a member, a contact, a tag, a plan template, an analyzer, a voice
    agent and a phone number."""
    return await _tenant(engine, "acme"), await _tenant(engine, "globex")


@pytest.mark.parametrize(
    ("typed", "country_code", "e164"),
    [
        ("+1 (212) 555-0147", "1", "+12125550147"),
        ("(212) 555-0147", "1", "+12125550147"),
        ("212.555.0147", "1", "+12125550147"),
        ("1-212-555-0147", "1", "+12125550147"),
        ("2125550147", "1", "+12125550147"),
        ("0012125550147", "49", "+12125550147"),
        ("030 23125101", "49", "+493023125101"),
        ("030/23125-101", "49", "+493023125101"),
        ("+49 (0)30 23125101", "1", "+493023125101"),
        ("0151 23456789", "49", "+4915123456789"),
        (" +44 20 7946 0958 ", "1", "+442079460958"),
        ("555-0147", "1", None),
        ("212-555-0147 ext. 4", "1", None),
        ("call me", "1", None),
        ("+1 212 555 0147 0147 01", "1", None),
        ("", "1", None),
        ("+0212555014", "1", None),
    ],
)
def test_to_e164(typed: str, country_code: str, e164: str | None) -> None:
    """Numbers typed in the common formats normalize to one E.164 form; what cannot be one gives None."""
    assert to_e164(typed, country_code) == e164


async def test_children_cannot_hang_off_another_organizations_row(
    engine: AsyncEngine, tenants: tuple[Tenant, Tenant]
) -> None:
    """Notes, e-mails, phones, tags, plans and a phone's analyzers referring to another organization's row are refused."""
    acme, globex = tenants
    org = acme.organization
    await _refused(engine, ContactNote, organization_id=org, contact_id=globex.contact, body="x")
    await _refused(engine, ContactEmail, organization_id=org, contact_id=globex.contact, email="a@b.c")
    await _refused(
        engine, ContactPhone, organization_id=org, contact_id=globex.contact, number="1", number_e164="+1"
    )
    await _refused(engine, ContactTag, organization_id=org, contact_id=acme.contact, tag_id=globex.tag)
    await _refused(engine, ContactTag, organization_id=org, contact_id=globex.contact, tag_id=acme.tag)
    await _refused(engine, Plan, organization_id=org, template_id=globex.template, contact_id=acme.contact)
    await _refused(engine, Plan, organization_id=org, template_id=acme.template, contact_id=globex.contact)
    await _refused(
        engine,
        PhoneNumberAnalyzer,
        organization_id=org,
        phone_number_id=acme.phone_number,
        analyzer_id=globex.analyzer,
    )
    # The same rows within one organization are fine.
    await _insert(engine, ContactTag, organization_id=org, contact_id=acme.contact, tag_id=acme.tag)
    await _insert(engine, Plan, organization_id=org, template_id=acme.template, contact_id=acme.contact)
    await _insert(
        engine,
        PhoneNumberAnalyzer,
        organization_id=org,
        phone_number_id=acme.phone_number,
        analyzer_id=acme.analyzer,
    )


async def test_one_primary_email_and_phone_per_contact(
    engine: AsyncEngine, tenants: tuple[Tenant, Tenant]
) -> None:
    """A contact may have many e-mail addresses and phone numbers but only one primary of each."""
    acme, _ = tenants
    base = {"organization_id": acme.organization, "contact_id": acme.contact}
    await _insert(engine, ContactEmail, **base, email="jane@home.test", is_primary=True)
    await _insert(engine, ContactEmail, **base, email="jane@work.test")
    await _insert(engine, ContactEmail, **base, email="jane@other.test")
    await _refused(engine, ContactEmail, **base, email="jane@new.test", is_primary=True)
    await _refused(engine, ContactEmail, **base, email="jane@work.test")
    await _insert(
        engine, ContactPhone, **base, number="212 555 0147", number_e164="+12125550147", is_primary=True
    )
    await _insert(engine, ContactPhone, **base, number="212 555 0148", number_e164="+12125550148")
    await _refused(
        engine, ContactPhone, **base, number="212 555 0149", number_e164="+12125550149", is_primary=True
    )
    await _refused(engine, ContactPhone, **base, number="(212) 555-0148", number_e164="+12125550148")


async def test_deleting_a_contact_removes_its_details_and_keeps_the_history(
    engine: AsyncEngine, tenants: tuple[Tenant, Tenant]
) -> None:
    """A deleted contact's notes, e-mails, phones, tags and plans go; its calls, messages and tasks stay, unlinked."""
    acme, _ = tenants
    org, contact = acme.organization, acme.contact
    base = {"organization_id": org, "contact_id": contact}
    await _insert(engine, ContactNote, **base, body="Prefers mornings.")
    await _insert(engine, ContactEmail, **base, email="jane@home.test", is_primary=True)
    await _insert(engine, ContactPhone, **base, number="2125550147", number_e164="+12125550147")
    await _insert(engine, ContactTag, **base, tag_id=acme.tag)
    plan = await _insert(engine, Plan, **base, template_id=acme.template)
    call = await _insert(
        engine,
        Call,
        **base,
        direction="inbound",
        status="answered",
        started_at=NOW,
        phone_number_id=acme.phone_number,
        agent_id=acme.agent,
    )
    sms = await _insert(engine, SmsMessage, **base, direction="inbound", body="hi", status="received")
    task = await _insert(engine, Task, **base, title="Call back", plan_id=plan["id"], assignee_id=acme.member)
    async with engine.begin() as connection:
        await connection.execute(sa.delete(table_of(Contact)).where(table_of(Contact).c.id == contact))
    model: type[SQLModel]
    for model in (ContactNote, ContactEmail, ContactPhone, ContactTag, Plan):
        assert await _count(engine, model) == 0, model.__name__
    async with engine.connect() as connection:
        for model, row in ((Call, call), (SmsMessage, sms), (Task, task)):
            table = table_of(model)
            kept = (await connection.execute(sa.select(table).where(table.c.id == row["id"]))).one()
            assert kept.contact_id is None, model.__name__
        assert (await connection.execute(sa.select(table_of(Task).c.plan_id))).scalar_one() is None


async def test_deleting_an_agent_or_member_unlinks_but_keeps_rows(
    engine: AsyncEngine, tenants: tuple[Tenant, Tenant]
) -> None:
    """Deleting a voice agent leaves its phone number and calls without an agent; a removed member's tasks stay unassigned."""
    acme, _ = tenants
    org = acme.organization
    call = await _insert(
        engine,
        Call,
        organization_id=org,
        direction="inbound",
        status="answered",
        started_at=NOW,
        agent_id=acme.agent,
    )
    await _insert(engine, Task, organization_id=org, title="Order gloves", assignee_id=acme.member)
    async with engine.begin() as connection:
        await connection.execute(
            sa.delete(table_of(VoiceAgent)).where(table_of(VoiceAgent).c.id == acme.agent)
        )
        await connection.execute(sa.delete(table_of(Member)).where(table_of(Member).c.id == acme.member))
        phone = (
            await connection.execute(
                sa.select(table_of(PhoneNumber)).where(table_of(PhoneNumber).c.id == acme.phone_number)
            )
        ).one()
        kept_call = (
            await connection.execute(sa.select(table_of(Call)).where(table_of(Call).c.id == call["id"]))
        ).one()
        task = (await connection.execute(sa.select(table_of(Task)))).one()
    assert (phone.voice_agent_id, kept_call.agent_id, task.assignee_id) == (None, None, None)


async def test_a_template_with_plans_cannot_be_deleted(
    engine: AsyncEngine, tenants: tuple[Tenant, Tenant]
) -> None:
    """A plan template that plans still use is not deleted (deactivate it instead); an unused one is."""
    acme, _ = tenants
    templates = table_of(PlanTemplate)
    await _insert(
        engine, Plan, organization_id=acme.organization, template_id=acme.template, contact_id=acme.contact
    )
    with pytest.raises(sa.exc.IntegrityError):
        async with engine.begin() as connection:
            await connection.execute(sa.delete(templates).where(templates.c.id == acme.template))
    unused = await _insert(engine, PlanTemplate, organization_id=acme.organization, name="Unused")
    async with engine.begin() as connection:
        await connection.execute(sa.delete(templates).where(templates.c.id == unused["id"]))
    assert await _count(engine, PlanTemplate, templates.c.organization_id == acme.organization) == 1


async def test_deleting_an_organization_removes_its_crm_only(
    engine: AsyncEngine, tenants: tuple[Tenant, Tenant]
) -> None:
    """Deleting an organization cascades through every CRM table and leaves the other organization's rows alone."""
    acme, globex = tenants
    for tenant in tenants:
        base = {"organization_id": tenant.organization, "contact_id": tenant.contact}
        await _insert(engine, ContactTag, **base, tag_id=tenant.tag)
        await _insert(engine, ContactNote, **base, body="note")
        await _insert(engine, Plan, **base, template_id=tenant.template)
        await _insert(engine, Task, **base, title="t")
        await _insert(engine, Call, **base, direction="outbound", status="missed", started_at=NOW)
        await _insert(
            engine,
            PhoneNumberAnalyzer,
            organization_id=tenant.organization,
            phone_number_id=tenant.phone_number,
            analyzer_id=tenant.analyzer,
        )
    organizations = table_of(Organization)
    async with engine.begin() as connection:
        await connection.execute(sa.delete(organizations).where(organizations.c.id == acme.organization))
    crm = [table for table in SQLModel.metadata.sorted_tables if "organization_id" in table.c]
    async with engine.connect() as connection:
        for table in crm:
            owners = set((await connection.execute(sa.select(table.c.organization_id))).scalars())
            assert acme.organization not in owners, table.name
    assert await _count(engine, Contact) == await _count(engine, Plan) == await _count(engine, Task) == 1
    assert (
        await _count(
            engine,
            PhoneNumberAnalyzer,
            table_of(PhoneNumberAnalyzer).c.organization_id == globex.organization,
        )
        == 1
    )


async def test_checks_refuse_invalid_values(engine: AsyncEngine, tenants: tuple[Tenant, Tenant]) -> None:
    """Unknown directions and statuses, negative durations, inbound SMS not `received`, a done task without
    `completed_at` (or an open one with it) and numbers not in E.164 are refused."""
    acme, _ = tenants
    org = acme.organization
    call = {"organization_id": org, "started_at": NOW}
    await _refused(engine, Call, **call, direction="sideways", status="answered")
    await _refused(engine, Call, **call, direction="inbound", status="busy")
    await _refused(engine, Call, **call, direction="inbound", status="answered", duration_seconds=-1)
    sms = {"organization_id": org, "body": "hi"}
    await _refused(engine, SmsMessage, **sms, direction="inbound", status="queued")
    await _refused(engine, SmsMessage, **sms, direction="outbound", status="received")
    await _refused(engine, SmsMessage, **sms, direction="outbound", status="lost")
    await _insert(engine, SmsMessage, **sms, direction="outbound", status="queued")
    await _refused(engine, Task, organization_id=org, title="t", status="done")
    await _refused(engine, Task, organization_id=org, title="t", status="open", completed_at=NOW)
    await _refused(engine, Task, organization_id=org, title="t", status="snoozed")
    await _insert(engine, Task, organization_id=org, title="t", status="done", completed_at=NOW)
    await _refused(
        engine, Plan, organization_id=org, template_id=acme.template, contact_id=acme.contact, status="paused"
    )
    await _refused(engine, PhoneNumber, organization_id=org, number="2125550101", label="Fax")
    await _refused(
        engine,
        ContactPhone,
        organization_id=org,
        contact_id=acme.contact,
        number="x",
        number_e164="2125550101",
    )


async def test_names_are_unique_per_organization_only(
    engine: AsyncEngine, tenants: tuple[Tenant, Tenant]
) -> None:
    """Tag, template, agent and analyzer names and phone numbers repeat across organizations but not within one."""
    acme, globex = tenants
    for model, values in (
        (Tag, {"name": "vip"}),
        (PlanTemplate, {"name": "Recall"}),
        (VoiceAgent, {"name": "Ava", "voice": "ava"}),
        (Analyzer, {"name": "Quality"}),
        (PhoneNumber, {"number": "+12125550100", "label": "Other"}),
    ):
        await _refused(engine, model, organization_id=acme.organization, **values)
    # `tenants` already made each of them in both organizations.
    assert await _count(engine, Tag, table_of(Tag).c.name == "vip") == 2
    assert globex.tag != acme.tag


# The queries the tools make, each with the index it must be able to use. Parameters are bound
# by name; `:org` is always the caller's organization.
TOOL_QUERIES = {
    "ix_contact_org_name": "SELECT id FROM contact WHERE organization_id = :org ORDER BY last_name, first_name",
    "ix_contact_phone_org_e164": "SELECT contact_id FROM contact_phone WHERE organization_id = :org AND number_e164 = :v",
    "ix_contact_email_org_email": "SELECT contact_id FROM contact_email WHERE organization_id = :org AND email = :v",
    "ix_call_org_started": "SELECT id FROM call WHERE organization_id = :org AND started_at >= :t ORDER BY started_at DESC",
    "ix_call_contact_started": "SELECT id FROM call WHERE contact_id = :id ORDER BY started_at DESC",
    "ix_sms_org_created": "SELECT id FROM sms_message WHERE organization_id = :org AND created_at >= :t",
    "ix_sms_contact_created": "SELECT id FROM sms_message WHERE contact_id = :id ORDER BY created_at DESC",
    "ix_sms_queued": "SELECT id FROM sms_message WHERE status = 'queued' ORDER BY created_at",
    "ix_task_org_status_due": "SELECT id FROM task WHERE organization_id = :org AND status = 'open' ORDER BY due_at",
    "ix_task_assignee_status_due": "SELECT id FROM task WHERE assignee_id = :id AND status = 'open' ORDER BY due_at",
    "ix_plan_org_status_started": "SELECT id FROM plan WHERE organization_id = :org AND status = 'active'",
    "ix_plan_assignee_status": "SELECT id FROM plan WHERE assignee_id = :id AND status = 'active'",
    "ix_contact_note_contact_created": "SELECT body FROM contact_note WHERE contact_id = :id ORDER BY created_at DESC",
    "ix_contact_tag_tag": "SELECT contact_id FROM contact_tag WHERE tag_id = :id",
    "ix_knowledge_item_org_title": "SELECT id FROM knowledge_item WHERE organization_id = :org ORDER BY title",
}


@pytest.mark.parametrize("index", sorted(TOOL_QUERIES))
async def test_tool_queries_use_their_index(engine: AsyncEngine, backend: str, index: str) -> None:
    """Each query a tool makes (scoped by organization, or by a contact or member of it) can run on its index."""
    query = TOOL_QUERIES[index]
    parameters: dict[str, tuple[object, sa.types.TypeEngine[Any]]] = {
        "org": (uuid.uuid4(), sa.Uuid()),
        "id": (uuid.uuid4(), sa.Uuid()),
        "v": ("x", sa.String()),
        "t": (NOW - timedelta(days=7), UTCDateTime()),
    }
    async with engine.connect() as connection:
        if backend == "sqlite":
            explain = "EXPLAIN QUERY PLAN "
        else:
            # The tables are empty, where a scan is cheapest: forbid it to see which index the planner can use.
            await connection.exec_driver_sql("SET enable_seqscan = off")
            explain = "EXPLAIN "
        statement = sa.text(explain + query).bindparams(
            *(
                sa.bindparam(name, value, type_=type_)
                for name, (value, type_) in parameters.items()
                if f":{name}" in query
            )
        )
        rows = (await connection.execute(statement)).all()
    plan = "\n".join(" ".join(str(value) for value in row) for row in rows)
    assert index in plan, plan
