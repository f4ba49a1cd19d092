"""Reviews across two Vernis instances on one PostgreSQL and one Redis (SPEC §10, §23): the
requester on one instance, the reviewer on the other."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.e2e.test_reviews import REVIEWER, ask_for_review, audit, continuing, sent
from tests.fixtures.server import Vernis, VernisFactory, types_of

Pair = tuple[Vernis, Vernis]


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """Several instances share one PostgreSQL."""
    name: str = request.param
    return name


@pytest.fixture
def pair(vernis_factory: VernisFactory, redis_url: str, redis_prefix: str) -> object:
    @asynccontextmanager
    async def start() -> AsyncIterator[Pair]:
        shared = {"redis_url": redis_url, "redis_prefix": redis_prefix}
        async with vernis_factory(**shared) as one, vernis_factory(**shared) as two:
            yield one, two

    return start


async def test_a_reviewer_on_the_other_instance_hears_answers_and_the_requester_sees_it_run(
    pair: object,
) -> None:
    """The request made on A reaches the reviewer on B live; B's approval runs the write once, and the requester's socket on A gets the card's end and the new answer."""
    body = f"Two instances {uuid.uuid4().hex[:6]}"
    async with pair() as (one, two):  # type: ignore[operator]
        async with one.opened() as member, two.opened(REVIEWER) as admin, two.opened(REVIEWER) as tab:
            confirmation, requested = await ask_for_review(one, member, body)
            (pushed,) = await admin.expect("review_required")
            assert pushed["review"]["review_id"] == requested["review_id"]
            await tab.expect("review_required")
            one.scripted.add("Sent from the other side.", match=continuing)
            await asyncio.gather(
                admin.send("review_tool", review_id=requested["review_id"], approved=True),
                tab.send("review_tool", review_id=requested["review_id"], approved=True),
            )
            events = await member.until("assistant_end", timeout=15)
            completed = [e for e in events if e["type"] == "tool_call_completed"]
            assert [(e["call_id"], e["status"]) for e in completed] == [(confirmation["call_id"], "ok")]
            assert "Sent from the other side." in "".join(e.get("content", "") for e in events)
            # A loaded machine may take a while to answer both: quiet for longer than usual.
            seen = await admin.drain(1.5) + await tab.drain()
        assert [e["code"] for e in seen if e["type"] == "error"] == ["not_found"]
        assert types_of(seen).count("review_resolved") == 2
        assert await sent(one, body) == 1
        assert await audit(one, body) == [("review_approved", REVIEWER), ("ok", "member@acme.test")]
