"""The delivery loop (vernis.webhooks.delivery) on a real database, SQLite and PostgreSQL: leases,
signatures, and several instances reading one outbox."""

from __future__ import annotations

import asyncio
import hmac
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.ops.webhook_receiver import receiver, verify
from vernis.config import WebhookEntry
from vernis.store.engine import create_engine
from vernis.store.models import WebhookDelivery, table_of, utcnow
from vernis.webhooks.delivery import Deliverer, sign
from vernis.webhooks.outbox import INSERT, Outbox

SECRET = "whsec-delivery-test"
_delivery = table_of(WebhookDelivery)


def entry(url: str, **options: object) -> WebhookEntry:
    return WebhookEntry.model_validate(
        {"url": url, "events": ["answer.completed"], "secret_env": "HOOK", "allow_private": True} | options
    )


def deliverer(engine: AsyncEngine, webhook: WebhookEntry) -> Deliverer:
    return Deliverer(
        engine, [webhook], backoff=0.1, retry_for=60, poll_interval=0.02, environ={"HOOK": SECRET}
    )


async def write(engine: AsyncEngine, webhook: WebhookEntry, count: int) -> list[str]:
    outbox = Outbox([webhook])
    rows = [
        row for n in range(count) for row in outbox.rows("answer.completed", {"n": n}, text={"text": "hi"})
    ]
    async with engine.begin() as connection:
        await connection.execute(INSERT, rows)
    return [str(row["id"]) for row in rows]


async def statuses(engine: AsyncEngine) -> Counter[tuple[str, int]]:
    async with engine.connect() as connection:
        rows = (await connection.execute(sa.select(_delivery.c.status, _delivery.c.attempts))).all()
    return Counter((row.status, row.attempts) for row in rows)


def test_the_signature_is_hmac_sha256_of_the_time_and_body() -> None:
    """`Vernis-Signature` is t=<unix>,v1=<hex HMAC-SHA256 of "t.body">: the docs' receiver accepts it fresh, not old or altered."""
    expected = hmac.new(SECRET.encode(), b'1700000000.{"a":1}', "sha256").hexdigest()
    assert sign(SECRET, 1_700_000_000, b'{"a":1}') == f"t=1700000000,v1={expected}"
    now = int(time.time())
    assert verify(SECRET, sign(SECRET, now, b'{"a":1}'), b'{"a":1}')
    assert not verify(SECRET, sign(SECRET, now, b'{"a":1}'), b'{"a":2}')
    assert not verify(SECRET, sign(SECRET, now - 3600, b'{"a":1}'), b'{"a":1}')


def test_text_goes_only_to_receivers_that_ask_for_it() -> None:
    """The event's text fields are in the payload of an include_text receiver only."""
    plain, chatty = entry("https://a.example.com/h"), entry("https://b.example.com/h", include_text=True)
    rows = Outbox([plain, chatty]).rows("answer.completed", {"n": 1}, text={"text": "secret words"})
    assert [row["payload_json"]["data"] for row in rows] == [{"n": 1}, {"n": 1, "text": "secret words"}]
    assert Outbox([plain]).rows("review.requested", {"n": 1}) == []


async def test_two_instances_deliver_each_event_once(database_url: str, engine: AsyncEngine) -> None:
    """Two delivery loops on their own engines share one outbox: the receiver gets each of 30 events exactly once."""
    second_engine = create_engine(database_url)
    try:
        async with receiver() as hooks:
            webhook = entry(hooks.url)
            ids = await write(engine, webhook, 30)
            loops = [
                asyncio.create_task(deliverer(engine, webhook).run()),
                asyncio.create_task(deliverer(second_engine, webhook).run()),
            ]
            try:
                while len(hooks.seen) < 30:
                    await hooks.next()
                for _ in range(500):  # the last rows' results are being written
                    if await statuses(engine) == {("delivered", 1): 30}:
                        break
                    await asyncio.sleep(0.02)
            finally:
                for loop in loops:
                    loop.cancel()
                await asyncio.gather(*loops, return_exceptions=True)
        counts = Counter(got.headers["vernis-delivery"] for got in hooks.seen)
        assert sorted(counts) == sorted(ids)
        assert set(counts.values()) == {1}
        assert all(verify(SECRET, got.headers["vernis-signature"], got.body) for got in hooks.seen)
    finally:
        await second_engine.dispose()


async def test_a_leased_row_waits_until_its_lease_runs_out(engine: AsyncEngine) -> None:
    """A row another instance holds is not sent; once that lease has run out (a dead instance), it is taken over."""
    async with receiver() as hooks:
        webhook = entry(hooks.url)
        (delivery_id,) = await write(engine, webhook, 1)
        async with engine.begin() as connection:
            await connection.execute(
                sa.update(_delivery).values(lease_until=utcnow() + timedelta(seconds=30))
            )
        loop = deliverer(engine, webhook)
        async with httpx2.AsyncClient() as client:
            assert await loop.deliver_due(client) == 0
            async with engine.begin() as connection:
                await connection.execute(
                    sa.update(_delivery).values(lease_until=utcnow() - timedelta(seconds=1))
                )
            assert await loop.deliver_due(client) == 1
        got = await hooks.next()
    assert got.headers["vernis-delivery"] == delivery_id


def test_the_receiver_in_the_docs_verifies_a_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python receiver of docs/webhooks.md, run as printed, accepts a signature Vernis made and refuses an altered body."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "webhooks.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("CRM_WEBHOOK_SECRET", SECRET)
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/webhooks.md", "exec"), namespace)
    body = b'{"id":"x","type":"answer.completed"}'
    header = sign(SECRET, int(time.time()), body)
    assert namespace["verify"](header, body)
    assert not namespace["verify"](header, body.replace(b"x", b"y"))
    assert not namespace["verify"](sign("not the secret", int(time.time()), body), body)
