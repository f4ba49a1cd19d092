"""`/metrics` of `vernis serve --workers 2` (SPEC §15): every scrape, whichever worker answers it,
shows the whole server (prometheus-client's multiprocess mode, a directory of the run).
"""

from __future__ import annotations

import asyncio
import signal
from contextlib import AsyncExitStack

import pytest

from tests.e2e.test_instances_processes import _children, cluster
from tests.e2e.test_serve import Launcher, connected, member_token
from tests.ops.helpers import sample, scrape

__all__ = ["cluster"]

SOCKETS = 8


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """Several workers share one PostgreSQL."""
    name: str = request.param
    return name


async def test_every_scrape_of_two_workers_shows_the_whole_server(cluster: Launcher) -> None:
    """With 8 sockets spread over two workers, each of several scrapes shows 8 sockets open and, after 8 answers, 8 complete answers: the workers' values add up."""
    served = await cluster.start("--scripted-model", "--demo", "--workers", "2")
    for _ in range(100):
        if len(_children(served.process.pid)) >= 2:
            break
        await asyncio.sleep(0.1)
    assert len(_children(served.process.pid)) == 2
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(connected(served, member_token(f"member{n}@acme.test")))
            for n in range(SOCKETS)
        ]
        for client in clients:
            await client.until("history_end")
        for n, client in enumerate(clients):
            await client.send("user_message", content=f"hello {n}")
        for client in clients:
            await client.until("assistant_end", timeout=30)
        for _ in range(6):
            samples = await scrape(served.http_url)
            assert sample(samples, "vernis_sockets_open") == SOCKETS
            assert sample(samples, "vernis_answers_total", outcome="complete") == SOCKETS
            assert sample(samples, "vernis_frames_total", direction="in") == 0  # batched until close
    for _ in range(100):
        samples = await scrape(served.http_url)
        if sample(samples, "vernis_sockets_open") == 0:
            break
        await asyncio.sleep(0.1)
    assert sample(samples, "vernis_sockets_open") == 0
    assert sample(samples, "vernis_frames_total", direction="in") == SOCKETS
    served.process.send_signal(signal.SIGTERM)
    assert await served.exited(timeout=15) == 0
