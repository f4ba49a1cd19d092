"""Sending the outbox (SPEC §22): each due `webhook_delivery` row becomes a signed JSON POST.

    POST <url>
    Content-Type: application/json
    Vernis-Delivery: <the delivery's id, also the body's "id">
    Vernis-Event: <the event, also the body's "type">
    Vernis-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the secret>

A 2xx answer within `TIMEOUT` seconds delivers it; anything else (another status, a timeout, a
closed connection) is retried after `backoff` seconds, doubled after each failure (at most
`MAX_DELAY`), until `retry_for` seconds after the event: then it is `failed` (`vernis webhooks
retry` sends it again). At least once: a receiver drops an id it has already seen.

Several instances read the same outbox: one sends a row only after taking its lease, a compare-and-
set on `lease_until` (free, or run out); a dead instance's lease runs out after `LEASE` seconds and
another takes the row over. A receiver whose address is not public (loopback, private, link-local)
is refused unless its entry says `allow_private = true`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import os
import socket
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx2
import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.config import WebhookEntry
from vernis.store.models import WebhookDelivery, WebhookStatus, table_of, utcnow

__all__ = ["LEASE", "MAX_DELAY", "TIMEOUT", "Deliverer", "sign"]

logger = logging.getLogger("vernis.webhooks")

_delivery = table_of(WebhookDelivery)
TIMEOUT = 5.0
# Longer than a send may take: a row is never sent by two instances at once.
LEASE = 30.0
MAX_DELAY = 3600.0
# Rows taken per read of the outbox (sent at once).
BATCH = 20


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `Vernis-Signature` header of `body` sent at `timestamp`."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class _Refused(Exception):
    """The receiver's address is not allowed: no retry helps until the configuration changes."""


class Deliverer:
    """Sends due deliveries until cancelled (`run`); `wake()` says new rows are waiting."""

    def __init__(
        self,
        engine: AsyncEngine,
        webhooks: Sequence[WebhookEntry],
        *,
        backoff: float,
        retry_for: float,
        poll_interval: float,
        environ: dict[str, str] | None = None,
        timeout: float = TIMEOUT,
    ) -> None:
        environ = environ if environ is not None else dict(os.environ)
        self._engine = engine
        self._entries = {entry.url: entry for entry in webhooks}
        self._secrets = {entry.url: environ.get(entry.secret_env, "") for entry in webhooks}
        self._backoff = backoff
        self._retry_for = timedelta(seconds=retry_for)
        self._poll_interval = poll_interval
        self._timeout = timeout
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        async with httpx2.AsyncClient(
            timeout=self._timeout, follow_redirects=False, trust_env=False
        ) as client:
            while True:
                try:
                    sent = await self.deliver_due(client)
                except Exception:
                    logger.exception("reading the webhook outbox failed")
                    sent = 0
                if sent:
                    continue
                self._wake.clear()
                try:
                    async with asyncio.timeout(self._poll_interval):
                        await self._wake.wait()
                except TimeoutError:
                    pass

    async def deliver_due(self, client: httpx2.AsyncClient) -> int:
        """Take the leases of the rows due now and send them; how many were taken."""
        now = utcnow()
        free = sa.or_(_delivery.c.lease_until.is_(None), _delivery.c.lease_until < now)
        async with self._engine.connect() as connection:
            due = (
                await connection.execute(
                    sa.select(_delivery.c.id)
                    .where(_delivery.c.status == WebhookStatus.PENDING, _delivery.c.next_at <= now, free)
                    .order_by(_delivery.c.next_at)
                    .limit(BATCH)
                )
            ).all()
        lease = now + timedelta(seconds=LEASE)
        taken = []
        for (delivery_id,) in due:
            async with self._engine.begin() as connection:
                result = await connection.execute(
                    sa.update(_delivery)
                    .where(_delivery.c.id == delivery_id, _delivery.c.status == WebhookStatus.PENDING, free)
                    .values(lease_until=lease)
                    .returning(*_delivery.c)
                )
                row = result.first()
            if row is not None:
                taken.append(row)
        await asyncio.gather(*(self._send(client, row, lease) for row in taken))
        return len(taken)

    async def _send(self, client: httpx2.AsyncClient, row: Any, lease: datetime) -> None:
        entry = self._entries.get(row.url)
        error: str | None = None
        final = False
        try:
            if entry is None:
                raise _Refused("no [[webhooks]] entry has this URL any more")
            if not entry.allow_private:
                await _check_public(row.url)
            body = orjson.dumps(row.payload_json)
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "Vernis-Webhooks",
                "Vernis-Delivery": str(row.id),
                "Vernis-Event": row.event,
                "Vernis-Signature": sign(self._secrets[row.url], int(time.time()), body),
            }
            response = await client.post(row.url, content=body, headers=headers)
            if not 200 <= response.status_code < 300:
                error = f"HTTP {response.status_code}"
        except _Refused as exc:
            error, final = f"refused: {exc}", True
        except httpx2.HTTPError as exc:
            error = type(exc).__name__
        await self._record(row, lease, error, final=final)

    async def _record(self, row: Any, lease: datetime, error: str | None, *, final: bool) -> None:
        now = utcnow()
        attempts = row.attempts + 1
        values: dict[str, Any] = {"attempts": attempts, "lease_until": None, "last_error": error}
        if error is None:
            values |= {"status": WebhookStatus.DELIVERED, "delivered_at": now}
        else:
            delay = timedelta(seconds=min(self._backoff * 2 ** (attempts - 1), MAX_DELAY))
            if final or now + delay > row.created_at + self._retry_for:
                values["status"] = WebhookStatus.FAILED
                logger.warning("webhook %s to %s failed for good: %s", row.id, row.url, error)
            else:
                values["next_at"] = now + delay
                logger.info("webhook %s to %s failed (%s); retried in %s", row.id, row.url, error, delay)
        async with self._engine.begin() as connection:
            # Only while the lease is ours: a row taken over by another instance is theirs to record.
            await connection.execute(
                sa.update(_delivery)
                .where(_delivery.c.id == row.id, _delivery.c.lease_until == lease)
                .values(values)
            )


async def _check_public(url: str) -> None:
    """Raises `_Refused` unless every address the URL's host has is a public one."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, parts.port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpx2.ConnectError(f"{host}: {exc}") from exc
    for *_, address in infos:
        ip = ipaddress.ip_address(address[0])
        if not ip.is_global:
            raise _Refused(f"{host} is at {ip}, not a public address (allow_private = false)")
