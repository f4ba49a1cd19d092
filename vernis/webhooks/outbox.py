"""The outbox: an event becomes one `webhook_delivery` row per `[[webhooks]]` receiver asking for it,
written in the transaction of the change it reports (an approval stored, a review resolved, an
answer's final row), so that a change committed is an event kept, and a change rolled back sends
nothing.

Message text (an answer's, a preview's arguments, a reviewer's note) goes only to receivers with
`include_text = true`: the caller hands it apart from the rest (`text`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.config import WebhookEntry
from vernis.store.models import Member, Organization, WebhookDelivery, table_of, utcnow

__all__ = ["INSERT", "Outbox", "ids"]

_delivery = table_of(WebhookDelivery)
_member = table_of(Member)
_organization = table_of(Organization)
INSERT = sa.insert(_delivery)


class Outbox:
    """What the configuration's receivers ask for; `add` writes an event's rows on a connection."""

    def __init__(self, webhooks: Sequence[WebhookEntry]) -> None:
        self._webhooks = tuple(webhooks)
        self._written: list[Callable[[], None]] = []

    def wants(self, event: str) -> bool:
        return any(event in entry.events for entry in self._webhooks)

    def on_written(self, callback: Callable[[], None]) -> None:
        """`callback` runs after rows were added (the delivery loop wakes up)."""
        self._written.append(callback)

    def written(self) -> None:
        for callback in self._written:
            callback()

    def rows(
        self,
        event: str,
        data: Mapping[str, Any],
        *,
        text: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> list[dict[str, Any]]:
        """The rows of `event` (`data` as JSON-able values), one per receiver asking for it."""
        now = now or utcnow()
        rows = []
        for entry in self._webhooks:
            if event not in entry.events:
                continue
            delivery_id = uuid.uuid4()
            payload = {
                "id": str(delivery_id),
                "type": event,
                "created_at": now.isoformat(),
                "data": {**data, **(text or {})} if entry.include_text else dict(data),
            }
            rows.append(
                WebhookDelivery(
                    id=delivery_id,
                    url=entry.url,
                    event=event,
                    payload_json=payload,
                    next_at=now,
                    created_at=now,
                ).model_dump()
            )
        return rows

    async def add(
        self,
        connection: AsyncConnection,
        event: str,
        data: Mapping[str, Any],
        *,
        member_id: UUID | None = None,
        text: Mapping[str, Any] | None = None,
    ) -> None:
        """Write `event` on `connection`, inside the caller's transaction. With `member_id`, the data
        gains the host's ids of the member and their organization (`sub`, `org`)."""
        if not self.wants(event):
            return
        data = dict(data)
        if member_id is not None:
            found = (
                await connection.execute(
                    sa.select(_member.c.external_id, _organization.c.external_id.label("org"))
                    .join(_organization, _organization.c.id == _member.c.organization_id)
                    .where(_member.c.id == member_id)
                )
            ).first()
            if found is not None:
                data |= {"org": found.org, "sub": found.external_id}
        rows = self.rows(event, data, text=text)
        await connection.execute(INSERT, rows)
        self.written()


def ids(**values: UUID | datetime | str | None) -> dict[str, Any]:
    """JSON-able event data: ids and times as strings."""
    return {
        key: value.isoformat() if isinstance(value, datetime) else str(value) if value is not None else None
        for key, value in values.items()
    }
