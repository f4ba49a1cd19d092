"""An organization's own AI rules (SPEC §7): text its admins write, read into every answer's system
message. Read per message, so kept a few seconds: a change made on this instance is seen at once,
one made on another within `ttl`."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import sqlalchemy as sa
from cachetools import TTLCache
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.exceptions import Forbidden
from vernis.store.engine import dialect_insert
from vernis.store.models import Member, OrgAIRules, table_of, utcnow
from vernis.store.transactions import Transactions

__all__ = ["AI_RULES_TTL", "AiRules"]

AI_RULES_TTL = 5.0

_member = table_of(Member)
_rules = table_of(OrgAIRules)
# Read for every answer, once `ttl` has passed: built once (`Transactions.read`).
_RULES_OF = sa.select(_rules.c.rules).where(_rules.c.organization_id == sa.bindparam("organization_id"))


class AiRules:
    def __init__(self, engine: AsyncEngine, transactions: Transactions, *, ttl: float = AI_RULES_TTL) -> None:
        self._engine = engine
        self._transactions = transactions
        self._cache: TTLCache[UUID, str] = TTLCache(maxsize=10_000, ttl=ttl)

    async def get(self, organization_id: UUID) -> str:
        """The organization's AI rules, or "" when it has none."""
        cached = self._cache.get(organization_id)
        if cached is not None:
            return cached
        rows = await self._transactions.read(_RULES_OF, {"organization_id": organization_id})
        rules = (rows[0]["rules"] if rows else None) or ""
        self._cache[organization_id] = rules
        return rules

    async def set(self, organization_id: UUID, rules: str, updated_by: UUID) -> None:
        """Replace the organization's AI rules. Raises `Forbidden` when `updated_by` is not a current
        member of that organization (who may edit them is the caller's permission check)."""
        now = utcnow()

        def _tx(connection: Connection) -> Any:
            editor = connection.scalar(
                sa.select(_member.c.id).where(
                    _member.c.id == updated_by,
                    _member.c.organization_id == organization_id,
                    _member.c.removed_at.is_(None),
                )
            )
            if editor is None:
                raise Forbidden()
            values = {"rules": rules, "updated_by": updated_by, "updated_at": now}
            connection.execute(
                dialect_insert(connection.dialect, _rules)
                .values(organization_id=organization_id, **values)
                .on_conflict_do_update(index_elements=[_rules.c.organization_id], set_=values)
            )

        await self._transactions.run(_tx)
        self._cache[organization_id] = rules
