"""Token quotas across two instances on one PostgreSQL and one Redis (SPEC §10, §15): the counters
live in Redis, so what a member spends through one instance counts on the other at once.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from tests.fixtures.server import VernisFactory
from tests.ops.helpers import chat_requests, is_chat
from tests.ops.test_quotas import refused, spend
from vernis.model.scripted import Reply


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """Several instances share one PostgreSQL."""
    name: str = request.param
    return name


async def test_an_organization_quota_holds_across_instances(
    vernis_factory: VernisFactory, redis_url: str, redis_prefix: str
) -> None:
    """A member spends the organization's quota through instance A; a colleague on instance B is refused with scope organization, asking no model; the counter is one Redis key under the prefix."""
    shared = {"redis_url": redis_url, "redis_prefix": redis_prefix, "org_monthly_tokens": 100}
    async with (
        vernis_factory(**shared) as one,
        vernis_factory(**shared) as two,
        two.opened("owner@acme.test") as colleague,
    ):
        # B has read the counter already (it exists in Redis) before A spends.
        two.scripted.add(Reply("Fine.", usage=(5, 5)), match=is_chat)
        await colleague.answer("first")
        await colleague.until("title_updated")
        async with one.opened("member@acme.test") as spender:
            await spend(one, spender, (70, 40))
        requests = len(chat_requests(two))
        error = await refused(colleague, "second")
        assert len(chat_requests(two)) == requests
    assert (error["code"], error["scope"], error["used"]) == ("quota_exceeded", "organization", 120)
    client = aioredis.Redis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{redis_prefix}quota:org:*")]
        assert len(keys) == 1
        count = await client.get(keys[0])
        assert count is not None
        assert int(count) == 120
    finally:
        await client.aclose()
