"""SIGKILL at random points of random answers (SPEC §4: a killed process loses at most a second of an
answer, and no message is ever left streaming after a restart).

`vernis serve --scripted-model` runs as a real process on one SQLite file; each iteration asks
for an answer of random length, kills the process with SIGKILL after a random number of events (or
right away), reads what the kernel still delivers, and starts the server again. After every restart:
no message is left streaming, every stored partial answer is a prefix of what the client received,
and the database passes SQLite's integrity and foreign-key checks.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from tests.e2e.test_serve import Launcher, Served, environment, member_token
from tests.fixtures.server import Client, text_of
from tests.proofs.conftest import Figures


async def read_until_closed(client: Client, events: list[dict[str, Any]]) -> None:
    """Everything still on its way after the kill, until the socket is gone."""
    try:
        async with asyncio.timeout(10):
            while True:
                events.append(await client.recv())
    except ConnectionClosed:
        return


@asynccontextmanager
async def opened(served: Served) -> AsyncIterator[Client]:
    """A member's socket on the served process, its opening replay read (a generous handshake
    timeout: a process that just started may be slow on a busy machine)."""
    async with connect(
        served.ws_url,
        additional_headers={"Authorization": f"Bearer {member_token()}"},
        subprotocols=[Subprotocol("vernis.v1")],
        open_timeout=60,
        max_queue=None,  # takes in every frame, as a browser does (see tests/fixtures/server.py)
    ) as ws:
        client = Client(ws)
        await client.until("history_end", timeout=30)
        yield client


def rows(database: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(database) as connection:
        found = connection.execute(
            "SELECT id, status, content FROM assistant_message WHERE role = 'assistant' ORDER BY created_at"
        ).fetchall()
    return [(str(uuid.UUID(str(i))), str(s), str(c)) for i, s, c in found]


def integrity(database: Path) -> tuple[str, list[Any]]:
    with sqlite3.connect(database) as connection:
        (check,) = connection.execute("PRAGMA integrity_check").fetchone()
        foreign = connection.execute("PRAGMA foreign_key_check").fetchall()
    return str(check), foreign


@pytest.mark.slow
# Eleven process starts: on a busy two-core machine this outlasts pytest-timeout's four minutes.
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "iterations", [pytest.param(10, id="10"), pytest.param(100, id="100", marks=pytest.mark.long)]
)
async def test_sigkill_at_random_points_loses_nothing_acknowledged(
    tmp_path: Path, figures: Figures, iterations: int
) -> None:
    """SIGKILL at a random point of a random answer, then a restart, N times: nothing left streaming, every stored partial is a prefix of what the client received, the database is intact."""
    rng = random.Random(20261124 + iterations)
    # No rate limit: the loop sends a message every few seconds for minutes.
    limits = {"VERNIS_RATE_LIMIT": "100000/60", "VERNIS_MEMBER_RATE_LIMIT": "100000/60"}
    launcher = Launcher(tmp_path, environment(tmp_path, VERNIS_SHUTDOWN_GRACE="1", **limits))
    received: dict[str, str] = {}
    partials: set[str] = set()
    try:
        served = await launcher.start("--scripted-model")
        for _ in range(iterations):
            words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "é", "中文"]) for _ in range(90))
            events: list[dict[str, Any]] = []
            async with opened(served) as client:
                await client.send("new_conversation")
                await client.until("history_end")
                await client.send("user_message", content=words)
                for _ in range(rng.choice([0, 1, rng.randint(2, 90), rng.randint(35, 90)])):
                    events.append(await client.recv())
                    assert events[-1]["type"] != "error", events[-1]
                    if events[-1]["type"] == "assistant_end":
                        break
                if rng.random() < 0.3:
                    await asyncio.sleep(rng.uniform(0, 0.6))
                served.process.kill()
                assert await served.exited(timeout=10) == -signal.SIGKILL
                await read_until_closed(client, events)
            started = [e["message_id"] for e in events if e["type"] == "assistant_start"]
            if started:
                received[started[0]] = text_of(events)
            served = await launcher.start("--scripted-model")
            stored = rows(launcher.database)
            assert [s for s in stored if s[1] == "streaming"] == []
            for message_id, status, content in stored:
                if message_id in received:
                    assert received[message_id].startswith(content), (status, content, received[message_id])
                    if status == "failed" and content:
                        partials.add(message_id)
                else:
                    # Killed before the client saw the answer start: nothing of it was flushed.
                    assert content == "", (status, content)
            assert integrity(launcher.database) == ("ok", [])
        served.process.send_signal(signal.SIGTERM)
        assert await served.exited(timeout=10) == 0
    finally:
        await launcher.stop_all()
    figures(iterations=iterations, answers_seen=len(received), flushed_partials=len(partials))
