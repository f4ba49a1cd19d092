"""The one place a token becomes a member: just-in-time members and organizations, kept up to date,
with permissions from the token or the role table (SPEC §2), on both database backends."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.exceptions import AuthError
from vernis.identity import ASSISTANT_USE, RoleTable, TokenVerifier, issue_token
from vernis.identity.service import IdentityService
from vernis.store.engine import _SQLITE_PRAGMAS
from vernis.store.models import Member, Organization, table_of
from vernis.store.transactions import Transactions

SECRET = "identity-service-test-secret-32-bytes!"
ROLES = RoleTable([{"agent": ["ticket:view", "ticket:update"], "viewer": ["ticket:view"]}])

_member = table_of(Member)
_organization = table_of(Organization)


@pytest.fixture
def identity(engine: AsyncEngine, transactions: Transactions) -> IdentityService:
    """As the app makes it: its writes through the app's transactions (on SQLite, the one writer)."""
    return IdentityService(TokenVerifier(secret=SECRET), engine, ROLES, transactions)


async def rows(engine: AsyncEngine) -> tuple[list[sa.Row[str, str, str]], list[sa.Row[str, str, str, str]]]:
    async with engine.connect() as connection:
        organizations = (
            await connection.execute(
                sa.select(_organization.c.external_id, _organization.c.name, _organization.c.timezone)
            )
        ).all()
        members = (
            await connection.execute(
                sa.select(_member.c.external_id, _member.c.name, _member.c.email, _member.c.role)
            )
        ).all()
    return list(organizations), list(members)


async def test_first_token_makes_the_organization_and_member(
    identity: IdentityService, engine: AsyncEngine
) -> None:
    """A host's string ids are enough: the organization and the member are created from the claims."""
    token = issue_token(
        SECRET, sub="user/42", org="tenant-7", role="agent", name="Ada", email="ada@x.test",
        org_name="Seven Dental", tz="Europe/Paris",
    )  # fmt: skip
    who = await identity.authenticate(token)
    assert (who.member.sub, who.member.org, who.member.name, who.member.email) == (
        "user/42",
        "tenant-7",
        "Ada",
        "ada@x.test",
    )
    assert (who.member.organization_name, who.member.organization_timezone) == (
        "Seven Dental",
        "Europe/Paris",
    )
    assert who.permissions == {ASSISTANT_USE, "ticket:view", "ticket:update"}
    assert who.token == token
    organizations, members = await rows(engine)
    assert [tuple(row) for row in organizations] == [("tenant-7", "Seven Dental", "Europe/Paris")]
    assert [tuple(row) for row in members] == [("user/42", "Ada", "ada@x.test", "agent")]


async def test_later_tokens_update_the_member_and_keep_their_id(
    identity: IdentityService, engine: AsyncEngine
) -> None:
    """Name, e-mail, role and time zone follow later tokens; the internal id stays; an absent claim changes nothing."""
    first = await identity.authenticate(issue_token(SECRET, sub="u1", org="t1", role="viewer", name="Old"))
    assert first.permissions == {ASSISTANT_USE, "ticket:view"}
    second = await identity.authenticate(
        issue_token(SECRET, sub="u1", org="t1", role="agent", name="New", email="n@x.test", tz="Asia/Tokyo")
    )
    assert second.member.id == first.member.id
    assert (second.member.name, second.member.email, second.member.role) == ("New", "n@x.test", "agent")
    assert second.member.organization_timezone == "Asia/Tokyo"
    assert "ticket:update" in second.permissions
    third = await identity.authenticate(issue_token(SECRET, sub="u1", org="t1"))
    assert (third.member.name, third.member.role) == ("New", "agent")
    _, members = await rows(engine)
    assert len(members) == 1


async def test_same_sub_in_two_organizations_is_two_members(identity: IdentityService) -> None:
    """A `sub` is the host's id within its organization: the same string in another tenant is someone else."""
    one = await identity.authenticate(issue_token(SECRET, sub="42", org="a", role="agent"))
    two = await identity.authenticate(issue_token(SECRET, sub="42", org="b", role="agent"))
    assert one.member.id != two.member.id
    assert one.member.organization_id != two.member.organization_id


async def test_permissions_claim_wins_over_the_role(identity: IdentityService) -> None:
    """A `permissions` claim is the member's whole set, whatever the role says; an unknown role holds none."""
    claimed = await identity.authenticate(
        issue_token(SECRET, sub="u", org="t", role="agent", permissions=[ASSISTANT_USE, "billing:view"])
    )
    assert claimed.permissions == {ASSISTANT_USE, "billing:view"}
    with pytest.raises(AuthError, match=ASSISTANT_USE):
        await identity.authenticate(issue_token(SECRET, sub="v", org="t", role="janitor"))
    with pytest.raises(AuthError, match=ASSISTANT_USE):
        await identity.authenticate(issue_token(SECRET, sub="w", org="t", permissions=["ticket:view"]))


async def test_removed_or_revoked_members_are_refused(identity: IdentityService, engine: AsyncEngine) -> None:
    """A removed member, or one whose assistant:use was revoked, is refused whatever their token says."""
    kept = await identity.authenticate(issue_token(SECRET, sub="gone", org="t", role="agent"))
    async with engine.begin() as connection:
        await connection.execute(
            sa.update(_member).where(_member.c.id == kept.member.id).values(removed_at=datetime.now(UTC))
        )
    with pytest.raises(AuthError, match="removed"):
        await identity.authenticate(issue_token(SECRET, sub="gone", org="t", role="agent"))
    assert await identity.revoked([kept.member.id]) == {kept.member.id}

    other = await identity.authenticate(issue_token(SECRET, sub="muted", org="t", role="agent"))
    async with engine.begin() as connection:
        await connection.execute(
            sa.update(_member)
            .where(_member.c.id == other.member.id)
            .values(revoked_permissions=[ASSISTANT_USE])
        )
    with pytest.raises(AuthError):
        await identity.authenticate(issue_token(SECRET, sub="muted", org="t", role="agent"))
    assert await identity.revoked([other.member.id, kept.member.id, uuid.uuid4()]) >= {
        other.member.id,
        kept.member.id,
    }


async def test_refresh_accepts_the_same_member_only(identity: IdentityService) -> None:
    """A refreshed token must name the same sub and org: new expiry and permissions; another member is refused."""
    current = await identity.authenticate(issue_token(SECRET, sub="u", org="t", role="viewer", ttl=60))
    refreshed = await identity.refresh(current, issue_token(SECRET, sub="u", org="t", role="agent", ttl=3600))
    assert refreshed.member.id == current.member.id
    assert refreshed.expires_at > current.expires_at + 3000
    assert "ticket:update" in refreshed.permissions
    with pytest.raises(AuthError, match="another member"):
        await identity.refresh(current, issue_token(SECRET, sub="someone-else", org="t", role="agent"))
    with pytest.raises(AuthError, match="another member"):
        await identity.refresh(current, issue_token(SECRET, sub="u", org="other-tenant", role="agent"))
    with pytest.raises(AuthError):
        await identity.refresh(current, "garbage")


async def test_concurrent_first_handshakes_make_one_member(
    identity: IdentityService, engine: AsyncEngine
) -> None:
    """Ten sockets of a new member opening at once create one organization and one member."""
    token = issue_token(SECRET, sub="burst", org="new-tenant", role="agent", name="Burst")
    who = await asyncio.gather(*(identity.authenticate(token) for _ in range(10)))
    assert len({w.member.id for w in who}) == 1
    organizations, members = await rows(engine)
    assert len(organizations) == 1
    assert len(members) == 1


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_burst_of_new_members_is_written_without_waiting_for_the_write_lock(
    engine: AsyncEngine, transactions: Transactions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hundred new members' first handshakes at once on SQLite all pass with a 1 ms busy timeout: their writes queue on the app's one writer, none races another connection for the lock."""
    monkeypatch.setattr(
        "vernis.store.engine._SQLITE_PRAGMAS",
        tuple("PRAGMA busy_timeout=1" if p.startswith("PRAGMA busy_timeout") else p for p in _SQLITE_PRAGMAS),
    )
    identity = IdentityService(TokenVerifier(secret=SECRET), engine, ROLES, transactions)
    tokens = [issue_token(SECRET, sub=f"new-{n}", org=f"tenant-{n % 7}", role="agent") for n in range(100)]
    who = await asyncio.gather(*(identity.authenticate(token) for token in tokens))
    assert sorted(w.member.sub for w in who) == sorted(f"new-{n}" for n in range(100))
    organizations, members = await rows(engine)
    assert (len(organizations), len(members)) == (7, 100)
