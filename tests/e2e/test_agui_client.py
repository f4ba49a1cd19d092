"""The official AG-UI client (`@ag-ui/client`'s HttpAgent, in node) runs threads end to end against a
running Vernis (SPEC §20, issue 27 item 5b): tests/agui/http_agent.mjs asserts each step."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.data import add_notification, is_read
from tests.fixtures.server import Vernis
from vernis.model.scripted import Reply, ScriptedToolCall

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "agui" / "http_agent.mjs"
LONG = " ".join(f"word{i}" for i in range(150))

# Node is optional for Vernis itself (scripts/bootstrap says so); where it is installed, bootstrap's
# `npm ci` installed the client, and its absence is a failure, not a skip.
pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")


def page_answered(body: Mapping[str, Any]) -> bool:
    """The request after the page's tool answered with its rows."""
    last = body["messages"][-1]
    return last["role"] == "tool" and "Grace" in str(last["content"])


@pytest.mark.parametrize("client", ["@ag-ui/client", "agui-client-legacy"])
async def test_the_official_http_agent_runs_threads_end_to_end(vernis: Vernis, client: str) -> None:
    """HttpAgent (1.x, and the 0.x one CopilotKit pins) streams an answer, sees a server tool, round-trips a frontend tool, resumes an approval interrupt, is stopped, and reconnects mid-answer with Last-Event-ID losing and doubling nothing."""
    notification_id = await add_notification(vernis)
    scripted = vernis.scripted
    scripted.add(Reply(tool_calls=[ScriptedToolCall("get_unread_count", {})]), match="how many unread")
    scripted.add(Reply(tool_calls=[ScriptedToolCall("selected_rows", {"limit": 2})]), match="which rows")
    scripted.add(Reply("The page says you selected Ada and Grace."), match=page_answered)
    scripted.add(
        Reply(tool_calls=[ScriptedToolCall("mark_notification_read", {"notification_id": notification_id})]),
        match="mark it read",
    )
    scripted.add(Reply(LONG, chunk_delay=0.01), match="talk a lot")
    scripted.add(Reply(LONG, chunk_delay=0.01), match="long story")
    process = await asyncio.create_subprocess_exec(
        "node",
        str(SCRIPT),
        cwd=ROOT,
        env={
            **os.environ,
            "VERNIS_URL": vernis.http_url,
            "VERNIS_TOKEN": vernis.token(),
            "LONG_TEXT": LONG,
            "AGUI_CLIENT": client,
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(90):
            stdout, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()
    summary = orjson.loads(stdout.decode().strip().splitlines()[-1])
    assert summary["steps"] == ["answer", "server tool", "frontend tool", "approval", "stop", "reconnect"]
    assert await is_read(vernis, notification_id)
