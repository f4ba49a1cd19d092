"""Real `vernis serve` processes on one PostgreSQL and one Redis (SPEC §10): an instance killed
mid-answer, and `--workers N` behind one port.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from tests.e2e.test_serve import LONG_MESSAGE, Launcher, Served, connected, environment, member_token
from tests.fixtures.server import text_of


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """Several instances share one PostgreSQL."""
    name: str = request.param
    return name


@pytest.fixture
async def cluster(
    tmp_path: Path, database_url: str, seeded: object, redis_url: str, redis_prefix: str
) -> AsyncIterator[Launcher]:
    """Starts `vernis serve` processes on the test's PostgreSQL database and Redis prefix."""
    env = environment(
        tmp_path,
        VERNIS_DATABASE_URL=database_url,
        VERNIS_REDIS_URL=redis_url,
        VERNIS_REDIS_PREFIX=redis_prefix,
        VERNIS_SHUTDOWN_GRACE="2",
    )
    launcher = Launcher(tmp_path, env)
    try:
        yield launcher
    finally:
        await launcher.stop_all()


async def statuses(database_url: str) -> list[tuple[str, str]]:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as connection:
            rows = await connection.execute(
                sa.text(
                    "SELECT status, content FROM assistant_message WHERE role = 'assistant' ORDER BY created_at"
                )
            )
            return [(str(status), str(content)) for status, content in rows]
    finally:
        await engine.dispose()


@pytest.mark.slow
async def test_an_instance_killed_mid_answer_leaves_every_client_a_clear_ending(
    cluster: Launcher, database_url: str
) -> None:
    """SIGKILL of the instance running an answer: a tab on the surviving instance gets error llm_unavailable then assistant_end within 30 s, the stored answer is failed and a prefix of what it saw, and the conversation takes a new message."""
    running = await cluster.start("--scripted-model", "--demo")
    surviving = await cluster.start("--scripted-model", "--demo")
    async with connected(running, member_token()) as asking, connected(surviving, member_token()) as watching:
        await asking.until("history_end")
        await watching.until("history_end")
        await asking.send("user_message", content=LONG_MESSAGE)
        started = await asking.until("text_delta")
        conversation_id = started[0]["conversation_id"]
        await watching.send("load_conversation", conversation_id=conversation_id)
        seen = await watching.until("text_delta")
        for _ in range(40):  # more than a second of text: some of it flushed
            seen.append(await watching.recv())
        running.process.kill()
        assert await running.exited(timeout=5) == -signal.SIGKILL
        seen += await watching.until("assistant_end", timeout=30)
        kinds = [e["type"] for e in seen]
        error = seen[kinds.index("error")]
        assert error["code"] == "llm_unavailable"
        assert kinds.index("error") == len(kinds) - 2
        ((status, stored),) = await statuses(database_url)
        assert status == "failed"
        assert stored
        assert text_of(seen).startswith(stored)
        # Free again: a new message in that conversation is answered by the survivor.
        events = await watching.answer("hello there")
        assert events[-1]["type"] == "assistant_end"
        assert "hello there" in text_of(events)


def _children(pid: int) -> list[int]:
    """The worker processes uvicorn's supervisor `pid` spawned."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:  # a process may end between the listing and the reads
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                spawned = (
                    int(fields[1]) == pid and b"spawn_main" in Path(f"/proc/{entry}/cmdline").read_bytes()
                )
            except OSError:
                continue
            if spawned:
                found.append(int(entry))
    return found


async def serve_workers(cluster: Launcher, workers: int = 2) -> Served:
    """`vernis serve --scripted-model --demo --workers N`, returned once its N workers are running."""
    served = await cluster.start("--scripted-model", "--demo", "--workers", str(workers))
    for _ in range(100):
        if len(_children(served.process.pid)) >= workers:
            break
        await asyncio.sleep(0.1)
    assert len(_children(served.process.pid)) == workers
    return served


async def test_workers_share_one_port_and_the_conversations(cluster: Launcher) -> None:
    """`serve --workers 2`: two worker processes behind one port; tabs land on either, an answer streams to a second tab of the same conversation, wherever each tab landed."""
    served = await serve_workers(cluster)
    async with connected(served, member_token()) as asking:
        await asking.until("history_end")
        await asking.send("user_message", content=LONG_MESSAGE)
        started = await asking.until("text_delta")
        conversation_id = started[0]["conversation_id"]
        tabs = []
        for _ in range(4):  # likely spread over both workers
            tab = connected(served, member_token())
            client = await tab.__aenter__()
            tabs.append((tab, client))
            await client.until("history_end")
            await client.send("load_conversation", conversation_id=conversation_id)
        asked = started + await asking.until("assistant_end", timeout=30)
        message_id = asked[-1]["message_id"]
        for tab, client in tabs:
            events = await client.until("assistant_end", timeout=30)
            assert events[-1]["message_id"] == message_id
            await tab.__aexit__(None, None, None)
    served.process.send_signal(signal.SIGTERM)
    assert await served.exited(timeout=15) == 0


async def test_after_every_instance_restarts_nothing_is_left_streaming(
    cluster: Launcher, database_url: str
) -> None:
    """The only instance killed mid-answer, then a new one started (its lease not yet lapsed at start-up): within 30 s the answer is stored failed, and nothing stays streaming."""
    running = await cluster.start("--scripted-model", "--demo")
    async with connected(running, member_token()) as asking:
        await asking.until("history_end")
        await asking.send("user_message", content=LONG_MESSAGE)
        for _ in range(30):
            await asking.recv()
        running.process.kill()
        assert await running.exited(timeout=5) == -signal.SIGKILL
    await cluster.start("--scripted-model", "--demo")
    for _ in range(300):
        if [status for status, _ in await statuses(database_url)] == ["failed"]:
            break
        await asyncio.sleep(0.1)
    assert [status for status, _ in await statuses(database_url)] == ["failed"]
