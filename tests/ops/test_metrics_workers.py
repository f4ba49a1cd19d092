"""`/metrics` of `vernis serve --workers 2` (SPEC §15): every scrape, whichever worker answers it,
shows the whole server (prometheus-client's multiprocess mode, a directory of the run).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from tests.e2e.test_instances_processes import _children, cluster, serve_workers
from tests.e2e.test_serve import Launcher, connected, member_token
from tests.ops.helpers import sample, scrape

__all__ = ["cluster"]

SOCKETS = 8


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """Several workers share one PostgreSQL."""
    name: str = request.param
    return name


@pytest.mark.slow
async def test_every_scrape_of_two_workers_shows_the_whole_server(cluster: Launcher) -> None:
    """With 8 sockets spread over two workers, each of several scrapes shows 8 sockets open and, after 8 answers, 8 complete answers: the workers' values add up."""
    served = await serve_workers(cluster)
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


@pytest.mark.slow
async def test_the_gauges_of_a_killed_worker_are_dropped(cluster: Launcher) -> None:
    """Both workers SIGKILLed while 4 sockets are open: once the supervisor has started new ones, a scrape shows 0 sockets open, not the dead workers' 4."""
    served = await serve_workers(cluster)
    old = set(_children(served.process.pid))
    assert len(old) == 2
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(connected(served, member_token(f"member{n}@acme.test")))
            for n in range(4)
        ]
        for client in clients:
            await client.until("history_end")
        assert sample(await scrape(served.http_url), "vernis_sockets_open") == 4
        for pid in old:
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ConnectionClosed):
            for client in clients:
                await client.recv(timeout=10)
    samples: dict[Any, float] = {}
    for _ in range(300):
        fresh = set(_children(served.process.pid)) - old
        if len(fresh) == 2:
            with contextlib.suppress(AssertionError, httpx.TransportError):
                samples = await scrape(served.http_url)
                if sample(samples, "vernis_sockets_open") == 0:
                    break
        await asyncio.sleep(0.1)
    assert sample(samples, "vernis_sockets_open") == 0
    served.process.send_signal(signal.SIGTERM)
    assert await served.exited(timeout=15) == 0
