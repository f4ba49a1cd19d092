"""Demo data (`vernis seed-demo`): the organizations and members of SPEC §13, ready to chat with.

`seed_demo` is idempotent and safe to run concurrently (two instances starting at once): every row
is written with `INSERT ... ON CONFLICT DO NOTHING`, so a second run inserts nothing and never
overwrites what people changed since (a renamed member, edited AI rules). Ids are derived from the
natural keys (UUIDv5), so a freshly seeded database has the same ids as any other and demo tokens
survive a reset.

The seed is a list of steps (`SEED_STEPS`) run in order in one transaction; each step reads what the
earlier ones recorded in the `SeedContext` (organization and member ids) and records its own rows.

The CRM step fills each demo organization's CRM (`vernis_crm.demo._crm`: contacts, calls, SMS, plans,
tasks, agents, knowledge) and its members' notifications, once: an organization that already has
contacts is left alone, so re-seeding never brings back what people deleted or overwrites what they
changed. Its dates are relative to the anchor, the seed's `now` rounded down to the hour: the demo
always looks current (calls up to today, tasks due around today), and a seed pinned to a `now`
(`seed_demo(engine, now=...)`) is identical row for row on any database. Its ids do not depend on the
anchor at all, so a later run agrees with an earlier one on every id.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vernis.store.engine import dialect_insert
from vernis.store.models import Member, OrgAIRules, Organization, table_of, utcnow
from vernis_crm.demo import _crm as _demo_crm
from vernis_crm.demo._content import PROFILES
from vernis_crm.models import Contact
from vernis_crm.permissions import Role

__all__ = [
    "DEMO_NAMESPACE",
    "DEMO_ORGANIZATIONS",
    "SEED_STEPS",
    "SeedContext",
    "SeedResult",
    "SeedStep",
    "demo_anchor",
    "demo_id",
    "seed_demo",
]

# Fixed forever: changing it would change every demo id.
DEMO_NAMESPACE = uuid.UUID("5b0e7a52-3f8e-4c4b-9a0d-7c1e2f6a9d31")

_organization = table_of(Organization)
_member = table_of(Member)
_ai_rules = table_of(OrgAIRules)
_contact = table_of(Contact)


def demo_id(kind: str, key: str) -> uuid.UUID:
    """The id the demo gives the row of `kind` with natural key `key` (e.g. `"member"`, an email)."""
    return uuid.uuid5(DEMO_NAMESPACE, f"{kind}:{key}")


@dataclass(frozen=True, slots=True)
class SeedResult:
    """What the demo database holds after seeding, whether this run wrote it or an earlier one."""

    organizations: Mapping[str, uuid.UUID]  # slug (the organization's external id) -> id
    members: Mapping[str, uuid.UUID]  # email (the member's external id, the host's `sub`) -> id
    inserted: int  # rows this run added: 0 when everything was already there
    # The instant the demo's dates are relative to (the seed's `now` rounded down to the hour).
    anchor: datetime = field(repr=False)
    # Table name -> rows of demo data it holds, all organizations together (what a fresh seed writes).
    rows: Mapping[str, int] = field(repr=False)
    # Well-known demo rows, "<slug>:<kind>:<name>" -> id, for tests and docs. Kinds and names:
    # contact (each named contact, e.g. "acme:contact:Jane Cooper" and "globex:contact:Jane Cooper"),
    # call / sms / plan ("<slug>:call:Jane Cooper": a call with, an SMS from, a plan for Jane Cooper;
    # her SMS is the last message with her and waits for an answer), task (by title), plan_template,
    # voice_agent, text_agent, analyzer, knowledge_item (by name or title), phone_number (by label),
    # tag (by name).
    entities: Mapping[str, uuid.UUID] = field(repr=False)

    def summary(self) -> str:
        """One line for a person: what the demo database holds."""
        members = ", ".join(sorted(self.members))
        contacts = self.rows.get("contact", 0)
        added = f"{self.inserted:,} rows added" if self.inserted else "already seeded"
        return (
            f"demo data ready ({added}): {len(self.organizations)} organizations, {contacts:,} contacts; "
            f"members {members}"
        )


@dataclass(slots=True)
class SeedContext:
    """Shared by the steps of one `seed_demo` run."""

    connection: AsyncConnection
    now: datetime
    organizations: dict[str, uuid.UUID] = field(default_factory=dict)
    members: dict[str, uuid.UUID] = field(default_factory=dict)
    inserted: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    entities: dict[str, uuid.UUID] = field(default_factory=dict)

    @property
    def anchor(self) -> datetime:
        return demo_anchor(self.now)

    async def insert_missing(
        self, table: sa.Table, rows: Sequence[dict[str, Any]], key: Sequence[str]
    ) -> None:
        """Insert the `rows` that clash with no existing row on any unique key of `table` (`key` is
        the natural key each row is known by)."""
        if not rows:
            return
        statement = (
            # No conflict target: a concurrent seed clashes on the primary key (ids derive from the
            # natural key) as well as on the natural key, and both mean "already there".
            dialect_insert(self.connection.dialect, table)
            .on_conflict_do_nothing()
            .returning(*(table.c[column] for column in key))
        )
        result = await self.connection.execute(statement, list(rows))
        self.inserted += len(result.all())


SeedStep = Callable[[SeedContext], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class _DemoOrganization:
    slug: str
    name: str
    timezone: str
    members: tuple[tuple[str, str, Role], ...]  # (email, name, role)
    ai_rules: str = ""


_DEMO: tuple[_DemoOrganization, ...] = (
    _DemoOrganization(
        slug="acme",
        name="Acme Dental",
        timezone="America/New_York",
        members=(
            ("owner@acme.test", "Dana Whitfield", Role.OWNER),
            ("admin@acme.test", "Marcus Chen", Role.ADMIN),
            ("member@acme.test", "Priya Raman", Role.MEMBER),
            ("viewer@acme.test", "Tom Alvarez", Role.VIEWER),
        ),
        ai_rules="\n".join(
            (
                "Always refer to patients as clients.",
                "Our office hours are Monday to Friday, 8:00 to 17:00 Eastern time; never offer "
                "appointments outside them.",
                "Never give medical or dental advice or discuss treatment prices; offer to book a "
                "consultation with one of our dentists instead.",
                "If a client mentions severe pain, swelling or bleeding, tell them to call our "
                "emergency line at (555) 010-2200 right away.",
                'Keep SMS messages under 300 characters and sign them "- Acme Dental".',
            )
        ),
    ),
    _DemoOrganization(
        slug="globex",
        name="Globex",
        timezone="Europe/Berlin",
        members=(("owner@globex.test", "Katrin Vogel", Role.OWNER),),
    ),
)


async def _organizations(context: SeedContext) -> None:
    rows = [
        {
            "id": demo_id("organization", org.slug),
            "name": org.name,
            "external_id": org.slug,
            "timezone": org.timezone,
            "created_at": context.now,
        }
        for org in _DEMO
    ]
    await context.insert_missing(_organization, rows, key=["external_id"])
    # An organization that existed before the seed keeps its own id: read ids back by host id.
    result = await context.connection.execute(
        sa.select(_organization.c.external_id, _organization.c.id).where(
            _organization.c.external_id.in_([org.slug for org in _DEMO])
        )
    )
    context.organizations.update({slug: id_ for slug, id_ in result})


async def _members(context: SeedContext) -> None:
    rows = [
        {
            "id": demo_id("member", email),
            "organization_id": context.organizations[org.slug],
            # The demo host knows its users by e-mail: that is their host id (the tokens' `sub`).
            "external_id": email,
            "email": email,
            "name": name,
            "role": role.value,
            "created_at": context.now,
        }
        for org in _DEMO
        for email, name, role in org.members
    ]
    await context.insert_missing(_member, rows, key=["external_id"])
    # A member who existed before the seed keeps their own id: read ids back by host ids. Never by
    # e-mail alone: another organization's member may share one.
    result = await context.connection.execute(
        sa.select(_member.c.external_id, _member.c.id).where(
            sa.tuple_(_member.c.organization_id, _member.c.external_id).in_(
                [(row["organization_id"], row["external_id"]) for row in rows]
            )
        )
    )
    context.members.update({external_id: id_ for external_id, id_ in result})


async def _organization_ai_rules(context: SeedContext) -> None:
    rows = [
        {
            "organization_id": context.organizations[org.slug],
            "rules": org.ai_rules,
            "updated_by": context.members[org.members[0][0]],
            "updated_at": context.now,
        }
        for org in _DEMO
        if org.ai_rules
    ]
    await context.insert_missing(_ai_rules, rows, key=["organization_id"])


async def _crm(context: SeedContext) -> None:
    member_rows = (
        await context.connection.execute(
            sa.select(
                _member.c.id, _member.c.email, _member.c.name, _member.c.role, _member.c.organization_id
            )
            .where(_member.c.id.in_(list(context.members.values())))
            .order_by(_member.c.email)
        )
    ).all()
    for org in _DEMO:
        profile = PROFILES.get(org.slug)
        if profile is None:
            continue
        organization_id = context.organizations[org.slug]
        members = tuple(
            _demo_crm.DemoMember(id=row.id, email=row.email, name=row.name, role=row.role)
            for row in member_rows
            if row.organization_id == organization_id
        )
        demo = _crm_demo(org.slug, organization_id, org.name, org.timezone, members, context.anchor)
        context.entities.update(demo.entities)
        for table, rows in demo.rows.items():
            context.rows[table.name] = context.rows.get(table.name, 0) + len(rows)
        has_contacts = await context.connection.scalar(
            sa.select(sa.exists().where(_contact.c.organization_id == organization_id))
        )
        if has_contacts:
            continue
        for table, rows in demo.rows.items():
            await context.insert_missing(table, rows, key=[table.primary_key.columns.values()[0].name])


@functools.lru_cache(maxsize=4)
def _crm_demo(
    slug: str,
    organization_id: uuid.UUID,
    name: str,
    timezone: str,
    members: tuple[_demo_crm.DemoMember, ...],
    anchor: datetime,
) -> _demo_crm.CrmDemo:
    # Pure, and the same for every seed of one process within the hour: build it once (a test
    # session seeds hundreds of databases). The rows are only ever read.
    return _demo_crm.build(
        PROFILES[slug],
        organization_id=organization_id,
        organization_name=name,
        timezone=timezone,
        members=members,
        anchor=anchor,
        id_of=demo_id,
    )


# The host ids of the demo organizations (the demo login lists only their members).
DEMO_ORGANIZATIONS = tuple(org.slug for org in _DEMO)

SEED_STEPS: tuple[SeedStep, ...] = (_organizations, _members, _organization_ai_rules, _crm)


def demo_anchor(now: datetime) -> datetime:
    """The instant the demo CRM's dates are relative to: `now` rounded down to the hour."""
    return now.replace(minute=0, second=0, microsecond=0)


async def seed_demo(
    engine: AsyncEngine, steps: Sequence[SeedStep] = SEED_STEPS, *, now: datetime | None = None
) -> SeedResult:
    """Load the demo data into a migrated database, in one transaction; idempotent.

    `now` (aware) pins the clock the demo data is dated by; by default the current time.
    """
    async with engine.begin() as connection:
        context = SeedContext(connection=connection, now=now or utcnow())
        for step in steps:
            await step(context)
    return SeedResult(
        organizations=MappingProxyType(dict(context.organizations)),
        members=MappingProxyType(dict(context.members)),
        inserted=context.inserted,
        anchor=context.anchor,
        rows=MappingProxyType(dict(context.rows)),
        entities=MappingProxyType(dict(context.entities)),
    )
