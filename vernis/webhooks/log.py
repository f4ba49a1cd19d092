"""The delivery log (`vernis webhooks list [--failed]`, `vernis webhooks retry ID`): the outbox's rows,
newest first, and a failed (or pending) delivery sent again at once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.store.models import WebhookDelivery, WebhookStatus, table_of, utcnow

__all__ = ["DeliveryRecord", "list_deliveries", "retry_delivery"]

_delivery = table_of(WebhookDelivery)


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    id: UUID
    event: str
    url: str
    status: str
    attempts: int
    last_error: str | None
    created_at: datetime
    next_at: datetime

    def line(self) -> str:
        error = f"  ({self.last_error})" if self.last_error else ""
        return (
            f"{self.id}  {self.created_at:%Y-%m-%d %H:%M:%S}  {self.event:<18} {self.status:<9} "
            f"{self.attempts} tries  {self.url}{error}"
        )


async def list_deliveries(
    engine: AsyncEngine, *, failed: bool = False, limit: int = 100
) -> list[DeliveryRecord]:
    """The newest deliveries (only the failed ones with `failed`)."""
    statement = sa.select(_delivery).order_by(_delivery.c.created_at.desc()).limit(limit)
    if failed:
        statement = statement.where(_delivery.c.status == WebhookStatus.FAILED)
    async with engine.connect() as connection:
        rows = (await connection.execute(statement)).all()
    return [
        DeliveryRecord(
            id=row.id,
            event=row.event,
            url=row.url,
            status=row.status,
            attempts=row.attempts,
            last_error=row.last_error,
            created_at=row.created_at,
            next_at=row.next_at,
        )
        for row in rows
    ]


async def retry_delivery(engine: AsyncEngine, delivery_id: UUID) -> bool:
    """A failed or pending delivery is due now, for another `VERNIS_WEBHOOK_RETRY_FOR` (its clock
    restarts); False when there is no such delivery, or it was delivered."""
    now = utcnow()
    async with engine.begin() as connection:
        result = await connection.execute(
            sa.update(_delivery)
            .where(_delivery.c.id == delivery_id, _delivery.c.status != WebhookStatus.DELIVERED)
            .values(status=WebhookStatus.PENDING, next_at=now, created_at=now, attempts=0, lease_until=None)
        )
    return result.rowcount == 1
