"""`vernis serve` as a real process: start-up, a scripted chat, graceful SIGTERM, SIGKILL recovery, JSON logs.

Each server runs `python -m vernis serve` in a temporary directory against its own SQLite file,
with stdout and stderr written to files the test reads afterwards. Every process is killed at the
end of its test whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.fixtures.server import Client, text_of
from tests.utils import free_port, run_server
from vernis.identity import issue_token
from vernis.model.scripted import Reply, ScriptedModel
from vernis_crm.demo.seed import demo_id

REPO = Path(__file__).resolve().parents[2]
SECRET = "serve-test-secret-that-is-long-enough-for-hs256"
# Deadlines, not waits: generous, for a machine busy with the rest of the suite (pytest-xdist).
START_TIMEOUT = 60.0
COMMAND_TIMEOUT = 60.0
# The scripted demo answer quotes at most 200 characters of the message: about 80 words at 0.03 s.
LONG_MESSAGE = " ".join(["please"] * 400)


@dataclass
class Served:
    process: asyncio.subprocess.Process
    port: int
    stderr: Path

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/api/assistant/ws"

    def log(self) -> list[dict[str, Any]]:
        """Every line on stderr, each of which must be one JSON object."""
        entries = []
        for line in self.stderr.read_text().splitlines():
            if not line.strip():
                continue
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise AssertionError(f"stderr line is not JSON: {line!r}") from None
            assert isinstance(entry, dict), line
            entries.append(entry)
        return entries

    async def exited(self, timeout: float) -> int:
        """The exit code, once the process ends within `timeout` seconds."""
        async with asyncio.timeout(timeout):
            return await self.process.wait()


@dataclass
class Launcher:
    """Starts `vernis serve` processes in `directory`; `stop_all()` kills whichever still run."""

    directory: Path
    env: dict[str, str]
    started: list[Served] = field(default_factory=list)

    @property
    def database(self) -> Path:
        return self.directory / "vernis.db"

    async def vernis(self, *args: str) -> str:
        """Run another `vernis` command beside the server; its stdout."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vernis",
            *args,
            cwd=self.directory,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT):
                out, err = await process.communicate()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0, err.decode()
        return out.decode()

    async def start(self, *args: str) -> Served:
        port = free_port()
        n = len(self.started)
        stderr = self.directory / f"serve-{n}.stderr"
        with stderr.open("wb") as err, (self.directory / f"serve-{n}.stdout").open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "vernis",
                "serve",
                "--port",
                str(port),
                *args,
                cwd=self.directory,
                env=self.env,
                stdout=out,
                stderr=err,
                # A group of its own: `stop_all` ends its worker processes (--workers) with it.
                start_new_session=True,
            )
        served = Served(process, port, stderr)
        self.started.append(served)
        deadline = time.monotonic() + START_TIMEOUT
        async with httpx.AsyncClient(base_url=served.http_url) as http:
            while True:
                if process.returncode is not None:
                    raise AssertionError(f"vernis serve exited at start-up:\n{stderr.read_text()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"/healthz never answered:\n{stderr.read_text()}")
                try:
                    response = await http.get("/healthz", timeout=1.0)
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
                    continue
                assert response.status_code == 200
                return served

    async def stop_all(self) -> None:
        """SIGKILL every server still running, and whatever it started (a supervisor's workers
        would outlive it otherwise)."""
        for served in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(served.process.pid, signal.SIGKILL)
            await served.process.wait()

    def statuses(self) -> list[tuple[str, str]]:
        """(status, content) of every stored assistant message, oldest first, read from the file directly."""
        with sqlite3.connect(self.database) as connection:
            rows = connection.execute(
                "SELECT status, content FROM assistant_message WHERE role = 'assistant' ORDER BY created_at"
            ).fetchall()
        return [(str(status), str(content)) for status, content in rows]


@pytest.fixture(scope="module")
def seeded_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database `vernis seed-demo` has migrated and seeded, for tests to copy rather than seed again."""
    directory = tmp_path_factory.mktemp("template")
    result = subprocess.run(
        [sys.executable, "-m", "vernis", "seed-demo"],
        cwd=directory,
        env=environment(directory),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return directory / "vernis.db"


def seeded_copy(template: Path, directory: Path) -> None:
    shutil.copyfile(template, directory / "vernis.db")


def environment(directory: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERNIS_") and k != "OPENAI_API_KEY"}
    env["PYTHONPATH"] = str(REPO)
    env["VERNIS_DATABASE_URL"] = f"sqlite+aiosqlite:///{directory / 'vernis.db'}"
    env["VERNIS_JWT_SECRET"] = SECRET
    env["VERNIS_LOG_FORMAT"] = "json"
    env["VERNIS_LOG_LEVEL"] = "INFO"
    env.update(settings)
    return env


@pytest.fixture
async def launcher(tmp_path: Path) -> AsyncIterator[Launcher]:
    launcher = Launcher(tmp_path, environment(tmp_path, VERNIS_SHUTDOWN_GRACE="5"))
    try:
        yield launcher
    finally:
        await launcher.stop_all()


def member_token(email: str = "member@acme.test") -> str:
    organization = email.split("@")[1].removesuffix(".test")
    return issue_token(SECRET, sub=email, org=organization, ttl=600)


@asynccontextmanager
async def connected(served: Served, token: str) -> AsyncIterator[Client]:
    async with connect(
        served.ws_url,
        additional_headers={"Authorization": f"Bearer {token}"},
        subprotocols=["vernis.v1"],  # type: ignore[list-item]
        open_timeout=5,
        max_queue=None,  # takes in every frame, as a browser does (see tests/fixtures/server.py)
    ) as ws:
        assert ws.subprotocol == "vernis.v1"
        yield Client(ws)


async def close_code(client: Client, timeout: float) -> tuple[int, list[dict[str, Any]]]:
    """Read until the server closes: its close code and the events that came before."""
    events: list[dict[str, Any]] = []

    async def read_all() -> None:
        async with asyncio.timeout(timeout):
            while True:
                events.append(await client.recv(timeout))

    with pytest.raises(ConnectionClosed) as closed:
        await read_all()
    assert closed.value.rcvd is not None, f"closed without a close frame: {closed.value!r}"
    return closed.value.rcvd.code, events


async def deltas(client: Client, count: int) -> list[dict[str, Any]]:
    """Events up to and including the `count`-th text_delta."""
    events: list[dict[str, Any]] = []
    while sum(e["type"] == "text_delta" for e in events) < count:
        events.append(await client.recv())
    return events


@pytest.mark.slow
async def test_serve_scripted_chat_then_sigterm_mid_answer_stores_it(launcher: Launcher) -> None:
    """`serve --scripted-model --demo` answers a scripted chat; SIGTERM mid-answer closes 1012, exits 0 and the answer is stored."""
    served = await launcher.start("--scripted-model", "--demo")
    async with httpx.AsyncClient(base_url=served.http_url) as http:
        ready = await http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"

    token = (await launcher.vernis("token", "member@acme.test")).strip()
    async with connected(served, token) as client:
        await client.expect("conversation_loaded", "history_end")
        events = await client.answer("hello there", client_message_id="first")
        assert [e["type"] for e in events][:2] == ["conversation_created", "assistant_start"]
        assert events[-1]["stopped"] is False
        conversation_id = events[0]["conversation_id"]
        first_answer = text_of(events)
        assert "scripted" in first_answer
        assert "hello there" in first_answer
        (title,) = await client.expect("title_updated")
        assert title["title"]

        await client.send("user_message", content=LONG_MESSAGE)
        streamed = await deltas(client, 5)
        assert streamed[0]["type"] == "assistant_start"
        # Logged by the socket while the answer streams: must name the conversation. The pong
        # proves the server has handled it (a socket handles its frames in order).
        await client.send("user_message", content="hello there", client_message_id="first")
        await client.send("ping")
        streamed += await client.until("pong")
        assert streamed[-1]["type"] == "pong"
        assert {e["type"] for e in streamed[1:-1]} <= {"text_delta"}
        served.process.send_signal(signal.SIGTERM)
        code, rest = await close_code(client, timeout=5)
        assert code == 1012
    partial = text_of(streamed + rest)
    assert partial
    assert await served.exited(timeout=5 + 1) == 0
    assert all(status in ("complete", "stopped") for status, _ in launcher.statuses())

    log = served.log()
    during = [e for e in log if e["message"] == "duplicate client_message_id ignored"]
    assert len(during) == 1
    assert during[0]["conversation_id"] == conversation_id
    assert during[0]["member_id"] == str(demo_id("member", "member@acme.test"))
    for entry in log:
        if entry["logger"] in ("vernis.answers", "vernis.titles", "vernis.assistant"):
            assert entry.get("conversation_id") == conversation_id, entry

    restarted = await launcher.start("--scripted-model", "--demo")
    try:
        async with connected(restarted, member_token()) as client:
            opening = await client.until("history_end")
    finally:
        restarted.process.send_signal(signal.SIGTERM)
    assert opening[0]["type"] == "conversation_loaded"
    assert (opening[0]["conversation_id"], opening[0]["title"]) == (conversation_id, title["title"])
    history = [e for e in opening if e["type"] == "history_message"]
    assert [(m["role"], m["status"]) for m in history[:3]] == [
        ("user", "complete"),
        ("assistant", "complete"),
        ("user", "complete"),
    ]
    assert history[1]["content"] == first_answer
    assert history[2]["content"] == LONG_MESSAGE
    assert history[3]["role"] == "assistant"
    assert history[3]["status"] in ("complete", "stopped")
    assert history[3]["content"].startswith(partial)
    assert len(history) == 4
    assert await restarted.exited(timeout=5 + 1) == 0


async def test_sigkill_mid_answer_leaves_no_message_streaming(
    launcher: Launcher, seeded_template: Path
) -> None:
    """After SIGKILL mid-answer, the restarted server marks the half-written answer failed, keeping its flushed text."""
    seeded_copy(seeded_template, launcher.directory)
    served = await launcher.start("--scripted-model", "--demo")
    async with connected(served, member_token()) as client:
        await client.expect("conversation_loaded", "history_end")
        await client.send("user_message", content=LONG_MESSAGE)
        streamed = await deltas(client, 1)
        conversation_id = streamed[0]["conversation_id"]
        # Keep reading until the server has flushed part of the answer to the database (at least once a second).
        deadline = time.monotonic() + 5
        while not any(status == "streaming" and content for status, content in launcher.statuses()):
            assert time.monotonic() < deadline, "the partial answer was never flushed"
            streamed.append(await client.recv())
        served.process.kill()
        assert await served.exited(timeout=5) == -signal.SIGKILL
    ((status, flushed),) = launcher.statuses()
    assert status == "streaming"
    assert text_of(streamed).startswith(flushed)

    restarted = await launcher.start("--scripted-model", "--demo")
    try:
        assert launcher.statuses() == [("failed", flushed)]
        async with connected(restarted, member_token()) as client:
            opening = await client.until("history_end")
    finally:
        restarted.process.send_signal(signal.SIGTERM)
    assert opening[0]["conversation_id"] == conversation_id
    user, assistant = (e for e in opening if e["type"] == "history_message")
    assert (user["role"], user["content"]) == ("user", LONG_MESSAGE)
    assert (assistant["role"], assistant["status"], assistant["content"]) == ("assistant", "failed", flushed)
    assert await restarted.exited(timeout=5 + 1) == 0
    recovered = [e for e in restarted.log() if e["logger"] == "vernis.app" and e["level"] == "warning"]
    assert len(recovered) == 1
    assert "interrupted" in recovered[0]["message"]


async def test_sigterm_stops_an_answer_that_outlasts_the_grace(tmp_path: Path, seeded_template: Path) -> None:
    """With an external model, SIGTERM lets an answer run for VERNIS_SHUTDOWN_GRACE, then stores it stopped and exits 0."""
    model = ScriptedModel(chunk_delay=0.02)
    model.add(Reply(" ".join(f"word{i}" for i in range(400))), times=None)
    async with run_server(model.app) as upstream:
        launcher = Launcher(
            tmp_path,
            environment(
                tmp_path,
                VERNIS_SHUTDOWN_GRACE="0.5",
                VERNIS_LLM_BASE_URL=f"http://127.0.0.1:{upstream.config.port}/v1",
                VERNIS_LLM_API_KEY="test",
                VERNIS_LLM_MODEL="vernis-scripted",
            ),
        )
        seeded_copy(seeded_template, tmp_path)
        try:
            served = await launcher.start("--demo")
            async with connected(served, member_token()) as client:
                await client.expect("conversation_loaded", "history_end")
                await client.send("user_message", content="tell me everything")
                streamed = await deltas(client, 3)
                served.process.send_signal(signal.SIGTERM)
                code, rest = await close_code(client, timeout=5)
                assert code == 1012
            # Without the grace the answer would stream on for about eight more seconds.
            assert await served.exited(timeout=0.5 + 2.5) == 0
        finally:
            await launcher.stop_all()
    ((status, content),) = launcher.statuses()
    assert status == "stopped"
    assert content.startswith(text_of(streamed + rest))
    # It ran on through the grace: about 0.5 s of words at 0.02 s each were stored after the close.
    assert len(content.split()) > len(text_of(streamed + rest).split()) + 10
    assert not [e for e in served.log() if e["level"] == "error"]


async def test_uvicorn_warnings_are_json_lines_too(launcher: Launcher) -> None:
    """A warning from uvicorn itself (a malformed HTTP request) reaches stderr as a JSON line like Vernis's own."""
    served = await launcher.start("--demo")
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    try:
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(5):
            assert (await reader.read()).startswith(b"HTTP/1.1 400")
    finally:
        writer.close()
        await writer.wait_closed()
    served.process.send_signal(signal.SIGTERM)
    assert await served.exited(timeout=5 + 1) == 0
    log = served.log()
    invalid = [e for e in log if e["message"] == "Invalid HTTP request received."]
    assert [(e["logger"], e["level"]) for e in invalid] == [("uvicorn.error", "warning")]
    assert not [e for e in log if "color_message" in e]
    assert {"vernis started", "vernis stopped"} <= {e["message"] for e in log if e["logger"] == "vernis.app"}


async def test_scripted_model_answer_outlasting_the_grace_is_stored_stopped(
    tmp_path: Path, seeded_template: Path
) -> None:
    """`serve --scripted-model`: an answer still streaming when the grace ends after SIGTERM is stored stopped, not failed."""
    launcher = Launcher(tmp_path, environment(tmp_path, VERNIS_SHUTDOWN_GRACE="0.5"))
    seeded_copy(seeded_template, tmp_path)
    try:
        served = await launcher.start("--scripted-model", "--demo")
        async with connected(served, member_token()) as client:
            await client.expect("conversation_loaded", "history_end")
            await client.send("user_message", content=LONG_MESSAGE)
            await deltas(client, 3)
            served.process.send_signal(signal.SIGTERM)
            code, _ = await close_code(client, timeout=5)
            assert code == 1012
        # A clean exit; that the grace cut the answer short shows in its stored status below (it
        # would be complete after about two more seconds). No timing here: the machine is shared.
        assert await served.exited(timeout=15) == 0
    finally:
        await launcher.stop_all()
    assert [status for status, _ in launcher.statuses()] == ["stopped"]
    # The only warning is demo mode's own notice at start.
    warnings = [e for e in served.log() if e["level"] in ("warning", "error")]
    assert [e["logger"] for e in warnings] == ["vernis.cli"], warnings
    assert warnings[0]["message"].startswith("DEMO MODE")
