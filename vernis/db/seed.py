"""Demo data (`vernis seed-demo`): the organizations and members of SPEC §13, ready to chat with.

`seed_demo` is idempotent and safe to run concurrently (two instances starting at once): every row
is written with `INSERT ... ON CONFLICT DO NOTHING`, so a second run inserts nothing and never
overwrites what people changed since (a renamed member, edited AI rules). Ids are derived from the
natural keys (UUIDv5), so a freshly seeded database has the same ids as any other and demo tokens
survive a reset.

The seed is a list of steps (`SEED_STEPS`) run in order in one transaction; each step reads what the
earlier ones recorded in the `SeedContext` (organization and member ids) and records its own rows.
More demo data (the CRM) is added as further steps.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vernis.db.engine import dialect_insert
from vernis.db.models import Member, OrgAIRules, Organization, Role, table_of, utcnow

__all__ = [
    "DEMO_NAMESPACE",
    "SEED_STEPS",
    "SeedContext",
    "SeedResult",
    "SeedStep",
    "demo_id",
    "seed_demo",
]

# Fixed forever: changing it would change every demo id.
DEMO_NAMESPACE = uuid.UUID("5b0e7a52-3f8e-4c4b-9a0d-7c1e2f6a9d31")

_organization = table_of(Organization)
_member = table_of(Member)
_ai_rules = table_of(OrgAIRules)


def demo_id(kind: str, key: str) -> uuid.UUID:
    """The id the demo gives the row of `kind` with natural key `key` (e.g. `"member"`, an email)."""
    return uuid.uuid5(DEMO_NAMESPACE, f"{kind}:{key}")


@dataclass(frozen=True, slots=True)
class SeedResult:
    """What the demo database holds after seeding, whether this run wrote it or an earlier one."""

    organizations: Mapping[str, uuid.UUID]  # slug -> id
    members: Mapping[str, uuid.UUID]  # email -> id
    inserted: int  # rows this run added: 0 when everything was already there


@dataclass(slots=True)
class SeedContext:
    """Shared by the steps of one `seed_demo` run."""

    connection: AsyncConnection
    now: datetime
    organizations: dict[str, uuid.UUID] = field(default_factory=dict)
    members: dict[str, uuid.UUID] = field(default_factory=dict)
    inserted: int = 0

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
            "slug": org.slug,
            "timezone": org.timezone,
            "created_at": context.now,
        }
        for org in _DEMO
    ]
    await context.insert_missing(_organization, rows, key=["slug"])
    # An organization that existed before the seed keeps its own id: read ids back by slug.
    result = await context.connection.execute(
        sa.select(_organization.c.slug, _organization.c.id).where(
            _organization.c.slug.in_([org.slug for org in _DEMO])
        )
    )
    context.organizations.update({slug: id_ for slug, id_ in result})


async def _members(context: SeedContext) -> None:
    rows = [
        {
            "id": demo_id("member", email),
            "organization_id": context.organizations[org.slug],
            "email": email,
            "name": name,
            "role": role.value,
            "created_at": context.now,
        }
        for org in _DEMO
        for email, name, role in org.members
    ]
    await context.insert_missing(_member, rows, key=["email"])
    result = await context.connection.execute(
        sa.select(_member.c.email, _member.c.id).where(_member.c.email.in_([row["email"] for row in rows]))
    )
    context.members.update({email: id_ for email, id_ in result})


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


SEED_STEPS: tuple[SeedStep, ...] = (_organizations, _members, _organization_ai_rules)


async def seed_demo(engine: AsyncEngine, steps: Sequence[SeedStep] = SEED_STEPS) -> SeedResult:
    """Load the demo data into a migrated database, in one transaction; idempotent."""
    async with engine.begin() as connection:
        context = SeedContext(connection=connection, now=utcnow())
        for step in steps:
            await step(context)
    return SeedResult(
        organizations=MappingProxyType(dict(context.organizations)),
        members=MappingProxyType(dict(context.members)),
        inserted=context.inserted,
    )
