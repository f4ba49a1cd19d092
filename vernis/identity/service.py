"""The one place a token becomes a member (SPEC §2): the socket's handshake, `authenticate` on a
live socket, the HTTP API and the demo pages all come through `IdentityService.authenticate`.

A verified token names the host's user (`sub`) in the host's organization (`org`). The first time
Vernis sees them it makes the organization and the member, just in time; later tokens keep their
name, e-mail, role, organization name and time zone up to date (written only when they changed).
Vernis's own ids are internal: rows key on them, tokens and the outside world never see them.

A member who was removed, or from whom `assistant:use` was revoked, keeps their rows (audit) and is
refused; so is a token that grants no `assistant:use`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from cachetools import TTLCache
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vernis.exceptions import AuthError
from vernis.identity.members import ASSISTANT_USE, Identity, MemberInfo, RoleTable
from vernis.identity.tokens import HostClaims, TokenVerifier
from vernis.store.engine import dialect_insert
from vernis.store.models import Member, Organization, table_of, utcnow
from vernis.store.transactions import EngineTransactions, Transactions

__all__ = ["RECENT_SECONDS", "IdentityService"]

# How long an HTTP request's identity may be used again for the same token (`authenticate_recent`),
# unless told otherwise: the app gives its sockets' check of their members (`auth_check_interval`).
RECENT_SECONDS = 30.0
RECENT_TOKENS = 10_000

_organization = table_of(Organization)
_member = table_of(Member)

_MEMBER_COLUMNS = (
    _member.c.id,
    _member.c.organization_id,
    _member.c.external_id,
    _organization.c.external_id.label("organization_external_id"),
    _organization.c.name.label("organization_name"),
    _organization.c.timezone.label("organization_timezone"),
    _member.c.email,
    _member.c.name,
    _member.c.role,
    _member.c.removed_at,
    _member.c.revoked_permissions,
    _member.c.tokens_revoked_at,
)


def _member_info(row: Mapping[Any, Any]) -> MemberInfo:
    revoked_at = row["tokens_revoked_at"]
    return MemberInfo(
        id=row["id"],
        organization_id=row["organization_id"],
        external_id=row["external_id"],
        organization_external_id=row["organization_external_id"],
        organization_name=row["organization_name"],
        organization_timezone=row["organization_timezone"],
        email=row["email"],
        name=row["name"],
        role=row["role"],
        removed=row["removed_at"] is not None,
        revoked_permissions=tuple(row["revoked_permissions"] or ()),
        tokens_revoked_at=revoked_at.timestamp() if revoked_at else None,
    )


def _select_member(where: sa.ColumnElement[bool]) -> sa.Select[Any]:
    return (
        sa.select(*_MEMBER_COLUMNS)
        .join(_organization, _organization.c.id == _member.c.organization_id)
        .where(where)
    )


# The member a token names, read at every handshake and every HTTP request not seen recently: built
# once, for `Transactions.read` (on SQLite, the loop thread's reader, with no hop to a driver thread).
_MEMBER_BY_EXTERNAL_ID = _select_member(
    sa.and_(
        _organization.c.external_id == sa.bindparam("org"),
        _member.c.external_id == sa.bindparam("sub"),
    )
)


def _zone(name: str | None) -> str | None:
    if not name:
        return None
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return name


class IdentityService:
    def __init__(
        self,
        verifier: TokenVerifier,
        engine: AsyncEngine,
        roles: RoleTable,
        transactions: Transactions | None = None,
        *,
        recent_seconds: float = RECENT_SECONDS,
    ) -> None:
        self.verifier = verifier
        self.roles = roles
        self._engine = engine
        self._transactions = transactions or EngineTransactions(engine)
        self._recent: TTLCache[str, Identity] = TTLCache(maxsize=RECENT_TOKENS, ttl=recent_seconds)

    async def authenticate_recent(self, token: str) -> Identity:
        """`authenticate` for HTTP requests (an AG-UI run per message, the usage API): the identity
        of the same token is used again for up to `recent_seconds`, never past the token's expiry,
        as a socket keeps its identity between its checks of its member (a member removed meanwhile
        is refused once it has passed). `forget` drops a member's at once (their tokens revoked)."""
        identity = self._recent.get(token)
        if identity is not None and identity.expires_at > time.time():
            return identity
        identity = await self.authenticate(token)
        self._recent[token] = identity
        return identity

    def closed(self, identity: Identity) -> None:
        """A socket holding `identity` closed: should it come back with the same token (a deploy or
        a network blip cut every socket at once), the token is taken without a second signature
        check for a while (`TokenVerifier.keep`); the member is read again as always."""
        self.verifier.keep(identity.token, identity.claims)

    def forget(self, member_id: UUID) -> None:
        """The identities `authenticate_recent` keeps for this member are asked for anew."""
        for token, identity in list(self._recent.items()):
            if identity.member.id == member_id:
                self._recent.pop(token, None)

    async def authenticate(self, token: str, *, require: str | None = ASSISTANT_USE) -> Identity:
        """Verify `token` and return who it names, made or updated just in time.

        Raises `AuthError` (its message is safe to log and to show) for a bad token, a removed
        member, or one without the `require`d permission.
        """
        claims = await self.verifier.verify(token)
        member = await self._upsert(claims)
        if member.removed:
            raise AuthError("This member was removed.")
        permissions = self.roles.permissions(member.role, claims.permissions, member.revoked_permissions)
        if require is not None and require not in permissions:
            raise AuthError(f"This member lacks the permission {require}.")
        identity = Identity(member, permissions, claims.expires_at, token, claims.raw, claims.issued_at)
        if member.tokens_revoked_at is not None and identity.revoked_by(member.tokens_revoked_at):
            raise AuthError("This token was revoked; sign in again.")
        return identity

    async def revoke_tokens(self, org: str, sub: str) -> MemberInfo | None:
        """Revoke every token of the member (`org`, `sub`) issued until now (SPEC §15); the member
        as stored after it, or None when there is no such member."""
        where = sa.and_(_organization.c.external_id == org, _member.c.external_id == sub)
        async with self._engine.begin() as connection:
            found = await self._find(connection, where)
            if found is None:
                return None
            await connection.execute(
                sa.update(_member).where(_member.c.id == found.id).values(tokens_revoked_at=utcnow())
            )
            return await self._find(connection, _member.c.id == found.id)

    async def find(self, org: str, sub: str) -> MemberInfo | None:
        """The member (`org`, `sub`) as stored; None when Vernis never saw them."""
        async with self._engine.connect() as connection:
            return await self._find(
                connection, sa.and_(_organization.c.external_id == org, _member.c.external_id == sub)
            )

    async def token_revocations(self, member_ids: Sequence[UUID]) -> dict[UUID, float]:
        """The admin API's revocations among these members: member id -> when (epoch seconds)."""
        found: dict[UUID, float] = {}
        for start in range(0, len(member_ids), 500):
            batch = member_ids[start : start + 500]
            async with self._engine.connect() as connection:
                rows = await connection.execute(
                    sa.select(_member.c.id, _member.c.tokens_revoked_at).where(
                        _member.c.id.in_(batch), _member.c.tokens_revoked_at.is_not(None)
                    )
                )
                found.update({row.id: row.tokens_revoked_at.timestamp() for row in rows})
        return found

    async def refresh(self, current: Identity, token: str) -> Identity:
        """A live socket's new token: it must name the same member. Raises `AuthError` otherwise."""
        claims = await self.verifier.verify(token)
        if claims.sub != current.member.sub or claims.org != current.member.org:
            raise AuthError("The new token names another member.")
        return await self.authenticate(token)

    async def member(self, member_id: UUID) -> MemberInfo | None:
        """The member as stored now (removed or not); None when there is no such member."""
        async with self._engine.connect() as connection:
            return await self._find(connection, _member.c.id == member_id)

    async def revoked(self, member_ids: Sequence[UUID]) -> set[UUID]:
        """Which of these members may no longer use the assistant: removed, revoked, or gone."""
        revoked: set[UUID] = set()
        for start in range(0, len(member_ids), 500):
            batch = member_ids[start : start + 500]
            async with self._engine.connect() as connection:
                rows = (
                    await connection.execute(
                        sa.select(_member.c.id, _member.c.removed_at, _member.c.revoked_permissions).where(
                            _member.c.id.in_(batch)
                        )
                    )
                ).all()
            allowed = {
                row.id
                for row in rows
                if row.removed_at is None and ASSISTANT_USE not in (row.revoked_permissions or ())
            }
            revoked.update(member_id for member_id in batch if member_id not in allowed)
        return revoked

    async def _find(self, connection: AsyncConnection, where: sa.ColumnElement[bool]) -> MemberInfo | None:
        row = (await connection.execute(_select_member(where))).mappings().first()
        return None if row is None else _member_info(row)

    async def _upsert(self, claims: HostClaims) -> MemberInfo:
        rows = await self._transactions.read(_MEMBER_BY_EXTERNAL_ID, {"org": claims.org, "sub": claims.sub})
        found = _member_info(rows[0]) if rows else None
        if found is not None and not self._changed(found, claims):
            return found
        # The write goes through the app's transactions: on SQLite, its one writer, never a pooled
        # connection of the async engine waiting for the write lock (a burst of first handshakes on
        # a busy server waited past SQLite's busy timeout there, and the handshake failed).
        return await self._transactions.run(lambda connection: self._write(connection, claims))

    @classmethod
    def _write(cls, connection: Connection, claims: HostClaims) -> MemberInfo:
        organization_id = cls._organization(connection, claims)
        cls._member(connection, organization_id, claims)
        row = (
            connection.execute(_MEMBER_BY_EXTERNAL_ID, {"org": claims.org, "sub": claims.sub})
            .mappings()
            .first()
        )
        assert row is not None
        return _member_info(row)

    @staticmethod
    def _changed(member: MemberInfo, claims: HostClaims) -> bool:
        tz = _zone(claims.tz)
        return (
            (claims.name is not None and claims.name[:255] != member.name)
            or (claims.email is not None and claims.email[:320] != member.email)
            or (claims.role is not None and claims.role[:64] != member.role)
            or (claims.org_name is not None and claims.org_name[:255] != member.organization_name)
            or (tz is not None and tz != member.organization_timezone)
        )

    @staticmethod
    def _organization(connection: Connection, claims: HostClaims) -> UUID:
        values: dict[str, Any] = {}
        if claims.org_name is not None:
            values["name"] = claims.org_name[:255]
        if (tz := _zone(claims.tz)) is not None:
            values["timezone"] = tz
        # Concurrent first handshakes of one organization: one insert wins, the others do nothing.
        connection.execute(
            dialect_insert(connection.dialect, _organization)
            .values(
                id=uuid.uuid4(),
                external_id=claims.org,
                name=values.get("name", claims.org[:255]),
                timezone=values.get("timezone", "UTC"),
                created_at=utcnow(),
            )
            .on_conflict_do_nothing(index_elements=[_organization.c.external_id])
        )
        if values:
            connection.execute(
                sa.update(_organization).where(_organization.c.external_id == claims.org).values(**values)
            )
        organization_id: UUID = connection.execute(
            sa.select(_organization.c.id).where(_organization.c.external_id == claims.org)
        ).scalar_one()
        return organization_id

    @staticmethod
    def _member(connection: Connection, organization_id: UUID, claims: HostClaims) -> None:
        values: dict[str, Any] = {}
        if claims.name is not None:
            values["name"] = claims.name[:255]
        if claims.email is not None:
            values["email"] = claims.email[:320]
        if claims.role is not None:
            values["role"] = claims.role[:64]
        connection.execute(
            dialect_insert(connection.dialect, _member)
            .values(
                id=uuid.uuid4(),
                organization_id=organization_id,
                external_id=claims.sub,
                name=values.get("name", claims.email or claims.sub)[:255],
                email=values.get("email"),
                role=values.get("role", "member"),
                created_at=utcnow(),
            )
            .on_conflict_do_nothing(index_elements=[_member.c.organization_id, _member.c.external_id])
        )
        if values:
            connection.execute(
                sa.update(_member)
                .where(_member.c.organization_id == organization_id, _member.c.external_id == claims.sub)
                .values(**values)
            )
