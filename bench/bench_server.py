"""Whole-server figures: memory per idle socket, and deltas relayed to many concurrent answers.

    python bench/bench_server.py [--idle 1000] [--answers 50] [--words 400]

Runs `vernis serve` in a child process (SQLite in a temporary directory, demo data seeded) against
the scripted model in another child process, then, from this process:
1. opens `--idle` sockets and reports the server's resident memory per open socket;
2. starts `--answers` answers at once, each streaming `--words` deltas, reads them all on real
   websockets clients, and reports deltas per second delivered and the server's CPU time per delta
   (user + system time of the server process, so a slow client does not flatter the figure).
Figures depend on the machine and its load; run it on a quiet one and compare runs, not absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parent.parent

SCRIPTED = """
import sys, uvicorn
from vernis.scripted import Reply, ScriptedModel
words = int(sys.argv[2])
model = ScriptedModel()
model.add(Reply(" ".join(f"w{n}" for n in range(words)), frames_per_write=8), match="stream", times=None)
uvicorn.run(model.app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def process(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield child
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()


async def wait_ready(url: str) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} never became ready")


async def opened(url: str, token: str) -> ClientConnection:
    ws = await connect(url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=30)
    while orjson.loads(await ws.recv())["type"] != "history_end":
        pass
    return ws


async def one_answer(ws: ClientConnection) -> int:
    await ws.send('{"type": "new_conversation"}')
    while orjson.loads(await ws.recv())["type"] != "history_end":
        pass
    await ws.send('{"type": "user_message", "content": "stream please"}')
    deltas = 0
    while True:
        event = orjson.loads(await ws.recv())
        if event["type"] == "text_delta":
            deltas += 1
        elif event["type"] == "assistant_end":
            return deltas
        elif event["type"] == "error":
            raise RuntimeError(event)


def prepare(env: dict[str, str]) -> str:
    """Seed the demo data and return a member's token (before anything is timed)."""
    subprocess.run(
        [sys.executable, "-m", "vernis", "seed-demo"], env=env, cwd=ROOT, check=True, capture_output=True
    )
    result = subprocess.run(
        [sys.executable, "-m", "vernis", "token", "member@acme.test"],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return result.stdout.decode().strip()


async def main(args: argparse.Namespace) -> None:
    data = Path(tempfile.mkdtemp(prefix="vernis-bench-"))
    scripted_port, port = free_port(), free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "VERNIS_DATABASE_URL": f"sqlite+aiosqlite:///{data / 'vernis.db'}",
        "VERNIS_JWT_SECRET": "bench-secret-that-is-long-enough-for-hs256",
        "VERNIS_LLM_BASE_URL": f"http://127.0.0.1:{scripted_port}/v1",
        "VERNIS_LLM_MODEL": "vernis-scripted",
        "VERNIS_TITLE_MODEL": "vernis-scripted-title",
        "VERNIS_RATE_LIMIT": "100000/60",
        "VERNIS_MEMBER_RATE_LIMIT": "100000/60",
        "VERNIS_FLOOD_LIMIT": "100000/10",
        "VERNIS_MAX_SOCKETS_PER_MEMBER": str(args.idle + args.answers + 10),
        "VERNIS_LOG_LEVEL": "WARNING",
    }
    token = prepare(env)
    scripted_cmd = [sys.executable, "-c", SCRIPTED, str(scripted_port), str(args.words)]
    server_cmd = [sys.executable, "-m", "vernis", "serve", "--port", str(port)]
    with process(scripted_cmd, env), process(server_cmd, env) as server:
        await wait_ready(f"http://127.0.0.1:{port}/readyz")
        await wait_ready(f"http://127.0.0.1:{scripted_port}/v1/models")
        url = f"ws://127.0.0.1:{port}/api/assistant/ws"

        warm = await opened(url, token)
        await one_answer(warm)
        await asyncio.sleep(0.5)
        before = rss_kib(server.pid)
        idle = [await opened(url, token) for _ in range(args.idle)]
        await asyncio.sleep(1.0)
        after = rss_kib(server.pid)
        print(
            f"idle sockets: {args.idle}, server RSS {before} → {after} KiB: {(after - before) / args.idle:.1f} KiB per socket"
        )
        for ws in idle:
            await ws.close()

        clients = [await opened(url, token) for _ in range(args.answers)]
        cpu_before = cpu_seconds(server.pid)
        started = time.perf_counter()
        counts = await asyncio.gather(*(one_answer(ws) for ws in clients))
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(server.pid) - cpu_before
        total = sum(counts)
        print(
            f"{args.answers} concurrent answers x {args.words} deltas: {total} deltas in {elapsed:.2f} s = "
            f"{total / elapsed:,.0f} deltas/s delivered; server CPU {cpu:.2f} s = {cpu / total * 1e6:.1f} µs per delta "
            f"(storage writes included)"
        )
        for ws in [*clients, warm]:
            await ws.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--answers", type=int, default=50)
    parser.add_argument("--words", type=int, default=400)
    asyncio.run(main(parser.parse_args()))
