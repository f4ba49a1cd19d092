"""Webhooks (SPEC §22) with two Vernis instances on one PostgreSQL and one Redis: each delivery loop
reads the same outbox, and the receiver gets every event once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures.server import VernisFactory
from tests.ops.test_webhooks import FAST, config_file, delivered
from tests.ops.webhook_receiver import receiver, verify

SECRET = "whsec-test-0123456789abcdef"


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """Several instances share one PostgreSQL."""
    name: str = request.param
    return name


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_SECRET", SECRET)


async def test_two_instances_post_each_event_once(
    vernis_factory: VernisFactory, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """Answers completed on either of two instances reach the one receiver once each, though both instances send."""
    async with receiver() as hooks:
        shared = {
            "config": config_file(tmp_path, hooks.url),
            "redis_url": redis_url,
            "redis_prefix": redis_prefix,
        }
        async with vernis_factory(**shared, **FAST) as one, vernis_factory(**shared, **FAST) as two:
            for vernis in (one, two, one, two, one, two):
                async with vernis.opened() as client:
                    await client.answer("hello")
            rows = await delivered(one, 6)
        ids = Counter(got.headers["vernis-delivery"] for got in hooks.seen)
    assert sorted(ids) == sorted(str(row.id) for row in rows)
    assert set(ids.values()) == {1}
    assert all(verify(SECRET, got.headers["vernis-signature"], got.body) for got in hooks.seen)
    assert [(row.status, row.attempts) for row in rows] == [("delivered", 1)] * 6
