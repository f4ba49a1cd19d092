"""AG-UI across two Vernis instances on one PostgreSQL and one Redis (SPEC §10, §20): a run on one
instance is joined and resumed on the other, as behind a load balancer without sticky sessions."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from tests.e2e.test_agui import parse_sse, run, run_input, text, user
from tests.e2e.test_agui_connect import LONG, partial_run
from tests.fixtures.server import Vernis, VernisFactory
from vernis.model.scripted import Reply

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


async def test_a_run_dropped_on_one_instance_resumes_on_the_other_with_last_event_id(pair: object) -> None:
    """A client that lost its run on instance A mid-answer connects to instance B with Last-Event-ID: B sends exactly the rest from Redis's replay and the live stream, nothing lost or doubled."""
    async with pair() as (one, two):  # type: ignore[operator]
        one.scripted.add(Reply(LONG, chunk_delay=0.01), match="long story")
        thread = str(uuid.uuid4())
        before = await partial_run(one, thread, "tell me a long story", deltas=5)
        last_id = before[-1][0]
        headers = {"Authorization": f"Bearer {two.token()}", "Last-Event-ID": str(last_id)}
        async with httpx.AsyncClient(base_url=two.http_url, timeout=10) as client:
            response = await client.post("/api/agui/connect", json={"threadId": thread}, headers=headers)
        assert response.status_code == 200
        after = parse_sse(response.text)
        assert after[-1][1]["type"] == "RUN_FINISHED"
        assert all(seq > last_id for seq, _ in after[2:])
        assert text([d for _, d in before]) + text([d for _, d in after]) == LONG


async def test_a_thread_started_on_one_instance_runs_on_the_other(pair: object) -> None:
    """The thread a run started on A is the member's on B: B's run answers in it and B's connect shows both exchanges."""
    async with pair() as (one, two):  # type: ignore[operator]
        thread = str(uuid.uuid4())
        await run(one, run_input(thread, user("first, on one")))
        events = await run(two, run_input(thread, user("second, on two")))
        assert events[-1]["type"] == "RUN_FINISHED"
        headers = {"Authorization": f"Bearer {one.token()}"}
        async with httpx.AsyncClient(base_url=one.http_url, timeout=10) as client:
            joined = await client.post("/api/agui/connect", json={"threadId": thread}, headers=headers)
        snapshot = [data for _, data in parse_sse(joined.text)][1]
        users = [m["content"] for m in snapshot["messages"] if m["role"] == "user"]
        assert users == ["first, on one", "second, on two"]
