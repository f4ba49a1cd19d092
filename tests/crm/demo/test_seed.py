"""The demo seed: the organizations and members of SPEC §13, idempotent and safe to run concurrently."""

from __future__ import annotations

import asyncio
import uuid

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fixtures.db import *  # noqa: F403
from vernis.conversation.store import ConversationStore
from vernis.identity.members import RoleTable
from vernis.identity.service import IdentityService
from vernis.identity.tokens import TokenVerifier
from vernis.store.models import Member, OrgAIRules, Organization, table_of, utcnow
from vernis_crm.demo.seed import DEMO_ORGANIZATIONS, SEED_STEPS, SeedContext, SeedResult, demo_id, seed_demo
from vernis_crm.models import Notification

DEMO_MEMBERS = {
    "owner@acme.test": ("acme", "owner"),
    "admin@acme.test": ("acme", "admin"),
    "member@acme.test": ("acme", "member"),
    "viewer@acme.test": ("acme", "viewer"),
    "owner@globex.test": ("globex", "owner"),
}


async def _row_counts(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as connection:
        return {
            model.__name__: (
                await connection.execute(sa.select(sa.func.count()).select_from(table_of(model)))
            ).scalar_one()
            for model in (Organization, Member, OrgAIRules)
        }


def _identities(engine: AsyncEngine) -> IdentityService:
    """Members read the way the server reads them."""
    return IdentityService(
        TokenVerifier(secret="tests-only-secret-of-at-least-32-bytes"), engine, RoleTable()
    )


async def test_seed_creates_the_demo_tenants(engine: AsyncEngine, seeded: SeedResult) -> None:
    """Acme Dental (four members, one per role) and Globex (its owner) exist with their time zones, known
    to the demo host by their slug and their members' e-mail (the tokens' `org` and `sub`)."""
    assert set(seeded.organizations) == {"acme", "globex"} == set(DEMO_ORGANIZATIONS)
    assert set(seeded.members) == set(DEMO_MEMBERS)
    identities = _identities(engine)
    for email, (slug, role) in DEMO_MEMBERS.items():
        member = await identities.member(seeded.members[email])
        assert member is not None
        assert (member.organization_id, member.role) == (seeded.organizations[slug], role)
        assert (member.sub, member.org, member.email) == (email, slug, email)
        assert member.name.strip()
        assert " " in member.name
        assert not member.removed
    acme = await identities.member(seeded.members["owner@acme.test"])
    globex = await identities.member(seeded.members["owner@globex.test"])
    assert acme is not None
    assert globex is not None
    assert (acme.organization_name, acme.organization_timezone) == ("Acme Dental", "America/New_York")
    assert (globex.organization_name, globex.organization_timezone) == ("Globex", "Europe/Berlin")


async def test_seed_gives_acme_ai_rules(seeded: SeedResult, store: ConversationStore) -> None:
    """Acme Dental has several lines of AI rules (patients are "clients"); Globex has none."""
    rules = await store.get_ai_rules(seeded.organizations["acme"])
    assert "Always refer to patients as clients." in rules
    assert len(rules.splitlines()) >= 3
    assert await store.get_ai_rules(seeded.organizations["globex"]) == ""


async def test_seed_twice_changes_nothing(engine: AsyncEngine, seeded: SeedResult) -> None:
    """A second run inserts no row, duplicates nothing and returns the same ids."""
    before = await _row_counts(engine)
    assert sum(before.values()) == 2 + 5 + 1
    assert seeded.inserted == sum(before.values()) + sum(seeded.rows.values())
    again = await seed_demo(engine)
    assert again.inserted == 0
    assert (dict(again.organizations), dict(again.members)) == (
        dict(seeded.organizations),
        dict(seeded.members),
    )
    assert await _row_counts(engine) == before


async def test_seed_keeps_later_edits(
    engine: AsyncEngine, seeded: SeedResult, store: ConversationStore
) -> None:
    """Re-seeding never overwrites what people changed since: edited AI rules stay edited."""
    acme = seeded.organizations["acme"]
    await store.set_ai_rules(acme, "Be brief.", updated_by=seeded.members["admin@acme.test"])
    await seed_demo(engine)
    assert await store.get_ai_rules(acme) == "Be brief."


async def test_concurrent_seeds_do_not_collide(engine: AsyncEngine) -> None:
    """Instances seeding at the same moment all succeed and together insert each row exactly once."""
    results = await asyncio.gather(*(seed_demo(engine) for _ in range(3)))
    assert sum(result.inserted for result in results) == 8 + sum(results[0].rows.values())
    assert await _row_counts(engine) == {"Organization": 2, "Member": 5, "OrgAIRules": 1}
    assert len({tuple(sorted(result.members.items())) for result in results}) == 1


async def test_demo_ids_are_stable(seeded: SeedResult) -> None:
    """A freshly seeded database gets the same ids anywhere, so demo tokens survive a reset."""
    assert seeded.members["owner@acme.test"] == demo_id("member", "owner@acme.test")
    assert seeded.organizations["globex"] == demo_id("organization", "globex")


async def test_more_steps_build_on_earlier_ones(engine: AsyncEngine) -> None:
    """Extra seed steps run after the core ones, see their ids and count their own rows."""
    seen: list[object] = []

    async def extra_step(context: SeedContext) -> None:
        seen.append(context.organizations["acme"])
        await context.insert_missing(
            table_of(Organization),
            [
                {
                    "id": demo_id("organization", "initech"),
                    "name": "Initech",
                    "external_id": "initech",
                    "timezone": "America/Chicago",
                    "created_at": context.now,
                }
            ],
            key=["external_id"],
        )

    result = await seed_demo(engine, steps=(*SEED_STEPS, extra_step))
    assert seen == [demo_id("organization", "acme")]
    assert result.inserted == 9 + sum(result.rows.values())
    assert (await seed_demo(engine, steps=(*SEED_STEPS, extra_step))).inserted == 0


async def test_members_of_other_organizations_with_a_demo_email_are_not_taken_for_demo_members(
    engine: AsyncEngine,
) -> None:
    """E-mail addresses are unique per host user, not across organizations: a host's member elsewhere
    sharing a demo member's e-mail is neither taken for the demo member nor given the demo's data."""
    first = await seed_demo(engine)
    now = utcnow()
    organizations, members = table_of(Organization), table_of(Member)
    initech, stranger = uuid.uuid4(), uuid.uuid4()
    async with engine.begin() as connection:
        await connection.execute(
            sa.insert(organizations).values(id=initech, name="Initech", external_id="initech", created_at=now)
        )
        await connection.execute(
            sa.insert(members).values(
                id=stranger,
                organization_id=initech,
                external_id="u-1",
                email="owner@acme.test",
                name="Bill Lumbergh",
                role="owner",
                created_at=now,
            )
        )
    again = await seed_demo(engine)
    for result in (first, again):
        assert dict(result.members) == {email: demo_id("member", email) for email in DEMO_MEMBERS}
    assert again.inserted == 0
    notifications = table_of(Notification)
    async with engine.connect() as connection:
        theirs = await connection.scalar(
            sa.select(sa.func.count()).select_from(notifications).where(notifications.c.member_id == stranger)
        )
    assert theirs == 0
