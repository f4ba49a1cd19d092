"""What one Vernis process keeps up with, measured the way users run it, beside a bare relay.

    python bench/bench_server.py [--paced-seconds 60] [--seconds 15] [--streams 200] [--idle 5000]
    python bench/bench_server.py --agui [--paced-seconds 60] [--streams 200]

`--agui` runs the paced load over the socket and then over AG-UI (`POST /api/agui/run`, SSE) on the
same server and compares the server's CPU per delta.

- `vernis serve --demo` runs as its own process pinned to core 0 (taskset), on SQLite, with the demo's
  real prompt and its 40 CRM tools (45-90 KB per request); every client is its own member (a host
  token with a string `sub`), owner of the demo organization, on its own growing conversation.
- An OpenAI-compatible server (`bench/model_server.py`) streams the answers over HTTP to the real
  `openai` client inside Vernis: paced (one token every 20 ms, 50 tokens/s, as models send them) or in
  bursts (as fast as the socket takes them). It runs on core 1, with the WebSocket clients.
- The clients are real `websockets` clients in a closed loop: send, read to `assistant_end`, send again.
- The same load then runs against `bench/relay.py`, the floor: the same request relayed with the
  `openai` client's raw stream, one frame per delta, nothing else.

Figures: delivered deltas/s (and the share of what the model offered), the latency Vernis adds to a
delta (client receipt minus the stamp the model server wrote into the token), server CPU per delta
from /proc (fixed costs included), the fixed CPU per answer (from two answer lengths), the time to
first token Vernis adds for one user, and the server's memory per idle socket. Run on a quiet
machine and compare with the relay's figures of the same run; absolute figures move with the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import orjson
import uvloop
from websockets.asyncio.client import ClientConnection, connect

from vernis.identity import issue_token

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-that-is-long-enough-for-hs256"
SERVER_CORE, LOAD_CORE = 0, 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def now_us() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


LOGS = Path(tempfile.mkdtemp(prefix="vernis-bench-logs-"))


@contextlib.contextmanager
def process(args: list[str], env: dict[str, str], core: int) -> Iterator[subprocess.Popen[bytes]]:
    log = (LOGS / f"{Path(args[1]).stem}-{time.monotonic_ns()}.log").open("wb")
    child = subprocess.Popen(
        ["taskset", "-c", str(core), *args], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )
    child.log = log.name  # type: ignore[attr-defined]
    try:
        yield child
    finally:
        child.terminate()
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        log.close()


def tail(child: subprocess.Popen[bytes]) -> str:
    return Path(child.log).read_text()[-3000:]  # type: ignore[attr-defined]


def core_busy(core: int) -> tuple[int, int]:
    """(busy, total) jiffies of one core, from /proc/stat."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            ticks = [int(v) for v in line.split()[1:]]
            idle = ticks[3] + ticks[4]
            return sum(ticks) - idle, sum(ticks)
    raise RuntimeError(f"no cpu{core} in /proc/stat")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if "model name" in line:
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


async def wait_ready(url: str, child: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            if child.poll() is not None:
                raise RuntimeError(f"{url}: the server exited: {tail(child)}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url)).status_code < 500:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} never became ready")


@dataclass
class Target:
    name: str
    ws_url: str
    pid: int
    vernis: bool

    def token(self, n: int) -> str:
        return issue_token(SECRET, sub=f"bench-{n}", org="acme", role="owner", name=f"Bench {n}", ttl=7200)

    async def open(self, n: int) -> ClientConnection:
        headers = {"Authorization": f"Bearer {self.token(n)}"} if self.vernis else {}
        ws = await connect(self.ws_url, additional_headers=headers, open_timeout=60, max_size=2**22)
        if self.vernis:
            while orjson.loads(await ws.recv())["type"] != "history_end":
                pass
        return ws


@dataclass
class Tally:
    deltas: int = 0
    answers: int = 0
    latencies: list[int] = field(default_factory=list)
    first_token: list[int] = field(default_factory=list)
    measuring: bool = False
    load_busy: float = 0.0
    emitted: int = 0


async def converse(
    ws: ClientConnection, tally: Tally, stop: asyncio.Event, answers: int | None = None
) -> None:
    """Closed loop: a message, its answer to the end, the next message."""
    done = 0
    while not stop.is_set() and (answers is None or done < answers):
        sent = now_us()
        await ws.send('{"type": "user_message", "content": "How are my contacts doing this week?"}')
        first = True
        while True:
            event = orjson.loads(await ws.recv())
            kind = event["type"]
            if kind == "text_delta":
                received = now_us()
                content: str = event["content"]
                if tally.measuring:
                    tally.deltas += 1
                    for word in content.split():
                        if word[0] == "t":
                            tally.latencies.append(received - int(word[1:]))
                if first:
                    first = False
                    words = content.split()
                    arrived = next(int(w[1:]) for w in words if w[0] == "r")
                    emitted = next(int(w[1:]) for w in words if w[0] == "t")
                    if tally.measuring:
                        tally.first_token.append((received - sent) - (emitted - arrived))
            elif kind == "assistant_end":
                break
            elif kind == "error":
                raise RuntimeError(event)
        done += 1
        if tally.measuring:
            tally.answers += 1


async def converse_agui(
    client: aiohttp.ClientSession, token: str, tally: Tally, stop: asyncio.Event, answers: int | None = None
) -> None:
    """`converse` over AG-UI (SPEC §20): a run per message on the member's thread, its SSE read to
    `RUN_FINISHED` (aiohttp, whose reading of lines costs the load core less than httpx's: with
    httpx the clients could not keep 200 paced runs going, and the server ran at 40 % of the load)."""
    thread, headers, done = str(uuid.uuid4()), {"Authorization": f"Bearer {token}"}, 0
    while not stop.is_set() and (answers is None or done < answers):
        message = {"id": uuid.uuid4().hex, "role": "user", "content": "How are my contacts doing this week?"}
        body = orjson.dumps({"threadId": thread, "runId": uuid.uuid4().hex, "messages": [message]})
        async with client.post(
            "/api/agui/run", data=body, headers={**headers, "Content-Type": "application/json"}
        ) as response:
            async for line in response.content:
                if not line.startswith(b"data: "):
                    continue
                event = orjson.loads(line[6:])
                kind = event["type"]
                if kind == "TEXT_MESSAGE_CONTENT" and tally.measuring:
                    received = now_us()
                    tally.deltas += 1
                    for word in event["delta"].split():
                        if word[0] == "t":
                            tally.latencies.append(received - int(word[1:]))
                elif kind == "RUN_ERROR":
                    raise RuntimeError(event)
        done += 1
        if tally.measuring:
            tally.answers += 1


async def load_agui(
    target: Target, model: ModelServers, clients: int, seconds: float, warmup: float, first_member: int
) -> tuple[Tally, float]:
    """`load` over AG-UI: `clients` members in a closed loop of runs."""
    base_url = target.ws_url.replace("ws://", "http://").removesuffix("/api/assistant/ws")
    connector = aiohttp.TCPConnector(limit=clients + 10)
    async with aiohttp.ClientSession(
        base_url, connector=connector, timeout=aiohttp.ClientTimeout(total=60)
    ) as client:
        tally, stop = Tally(), asyncio.Event()
        tasks = [
            asyncio.create_task(converse_agui(client, target.token(first_member + n), tally, stop))
            for n in range(clients)
        ]
        await asyncio.sleep(warmup)
        tally.measuring = True
        cpu, busy, emitted = cpu_seconds(target.pid), core_busy(LOAD_CORE), await model.emitted()
        await asyncio.sleep(seconds)
        tally.measuring = False
        cpu, after = cpu_seconds(target.pid) - cpu, core_busy(LOAD_CORE)
        tally.emitted = await model.emitted() - emitted
        tally.load_busy = (after[0] - busy[0]) / max(1, after[1] - busy[1])
        stop.set()
        await asyncio.wait(tasks, timeout=30)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return tally, cpu


async def compare_agui(target: Target, model: ModelServers, args: argparse.Namespace) -> str:
    """The paced load over the socket, then the same over AG-UI, on the same server: server CPU per
    delta of each and their ratio (issue 27 asks AG-UI for at most 1.2x the socket's)."""
    await model.use(tokens=100, pace=0.02)
    rows = []
    for name, run_load in (("socket", load), ("AG-UI", load_agui)):
        print(
            f"[{target.name}] paced over {name}: {args.streams} streams x 100 tokens at 50 tokens/s",
            flush=True,
        )
        tally, cpu = await run_load(
            target, model, args.streams, args.paced_seconds, args.warmup, 500_000 + len(rows) * 1000
        )
        per_delta = cpu / max(1, tally.deltas) * 1e6
        rows.append(
            (
                name,
                tally.deltas / args.paced_seconds,
                tally.deltas / max(1, tally.emitted),
                per_delta,
                pct(tally.latencies, 0.5),
                pct(tally.latencies, 0.99),
            )
        )
    lines = [
        "| path | delivered deltas/s | share | server CPU per delta | added latency p50 / p99 |",
        "|---|---|---|---|---|",
        *(
            f"| {n} | {rate:,.0f} | {share:.1%} | {cpu:.1f} µs | {p50:.1f} / {p99:.1f} ms |"
            for n, rate, share, cpu, p50, p99 in rows
        ),
        f"\nAG-UI / socket server CPU per delta: {rows[1][3] / rows[0][3]:.2f}x",
    ]
    return "\n".join(lines)


async def load(
    target: Target, model: ModelServers, clients: int, seconds: float, warmup: float, first_member: int
) -> tuple[Tally, float]:
    """`clients` conversations in a closed loop; returns what was delivered in `seconds` and the server's CPU."""
    sockets = await asyncio.gather(*(target.open(first_member + n) for n in range(clients)))
    tally, stop = Tally(), asyncio.Event()
    tasks = [asyncio.create_task(converse(ws, tally, stop)) for ws in sockets]
    await asyncio.sleep(warmup)
    tally.measuring = True
    cpu, busy, emitted = cpu_seconds(target.pid), core_busy(LOAD_CORE), await model.emitted()
    await asyncio.sleep(seconds)
    tally.measuring = False
    cpu, after = cpu_seconds(target.pid) - cpu, core_busy(LOAD_CORE)
    tally.emitted = await model.emitted() - emitted
    tally.load_busy = (after[0] - busy[0]) / max(1, after[1] - busy[1])
    stop.set()
    await asyncio.wait(tasks, timeout=30)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    return tally, cpu


async def answers_cpu(target: Target, clients: int, answers: int, first_member: int) -> float:
    """Server CPU per answer for `clients` x `answers` answers run to completion."""
    sockets = await asyncio.gather(*(target.open(first_member + n) for n in range(clients)))
    tally, stop = Tally(), asyncio.Event()
    await asyncio.gather(*(converse(ws, tally, stop, 1) for ws in sockets))  # warm
    cpu = cpu_seconds(target.pid)
    await asyncio.gather(*(converse(ws, tally, stop, answers) for ws in sockets))
    cpu = cpu_seconds(target.pid) - cpu
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    return cpu / (clients * answers)


def pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] / 1000


@dataclass
class Figures:
    paced_share: float = 0.0
    offered_rate: float = 0.0
    paced_rate: float = 0.0
    p50: float = 0.0
    p99: float = 0.0
    p999: float = 0.0
    burst_rate: float = 0.0
    paced_cpu_us: float = 0.0
    fixed_ms: float = 0.0
    ttft_ms: float = 0.0
    idle_kib: float = 0.0
    paced_load_busy: float = 0.0
    burst_load_busy: float = 0.0


async def measure(target: Target, model: ModelServers, args: argparse.Namespace) -> Figures:
    figures = Figures()
    members = iter(range(0, 10**6, 1000))
    print(f"[{target.name}] paced: {args.streams} streams x 100 tokens at 50 tokens/s", flush=True)
    await model.use(tokens=100, pace=0.02)
    tally, cpu = await load(target, model, args.streams, args.paced_seconds, args.warmup, next(members))
    figures.offered_rate = tally.emitted / args.paced_seconds
    figures.paced_rate = tally.deltas / args.paced_seconds
    figures.paced_share = tally.deltas / max(1, tally.emitted)
    figures.p50, figures.p99 = pct(tally.latencies, 0.5), pct(tally.latencies, 0.99)
    figures.p999 = pct(tally.latencies, 0.999)
    figures.paced_cpu_us = cpu / max(1, tally.deltas) * 1e6
    figures.paced_load_busy = tally.load_busy
    print(
        f"[{target.name}] paced: {figures.paced_rate:,.0f}/s of {figures.offered_rate:,.0f}/s "
        f"({figures.paced_share:.1%}), {figures.p50:.1f} / {figures.p99:.1f} ms, "
        f"{figures.paced_cpu_us:.1f} µs, load core {tally.load_busy:.0%} busy",
        flush=True,
    )
    if args.paced_only:
        return figures

    print(f"[{target.name}] burst: 50 streams x 100 tokens", flush=True)
    await model.use(tokens=100, pace=0)
    tally, _ = await load(target, model, 50, args.seconds, args.warmup, next(members))
    figures.burst_rate = tally.deltas / args.seconds
    figures.burst_load_busy = tally.load_busy

    print(f"[{target.name}] fixed cost: answers of 10 and 200 tokens", flush=True)
    await model.use(tokens=10, pace=0)
    short = await answers_cpu(target, 20, 10, next(members))
    await model.use(tokens=200, pace=0)
    long = await answers_cpu(target, 20, 10, next(members))
    per_delta = (long - short) / 190
    figures.fixed_ms = (short - 10 * per_delta) * 1000

    print(f"[{target.name}] time to first token: one user", flush=True)
    await model.use(tokens=5, pace=0.02)
    sockets = [await target.open(next(members))]
    tally = Tally(measuring=True)
    await converse(sockets[0], tally, asyncio.Event(), 40)
    await sockets[0].close()
    figures.ttft_ms = statistics.median(tally.first_token) / 1000

    print(f"[{target.name}] memory: {args.idle} idle sockets", flush=True)
    base = next(members) * 10
    warm = [await target.open(base + n) for n in range(20)]
    await asyncio.sleep(1)
    before = rss_kib(target.pid)
    idle: list[ClientConnection] = []
    for start in range(0, args.idle, 250):
        idle += await asyncio.gather(
            *(target.open(base + 100 + n) for n in range(start, min(args.idle, start + 250)))
        )
    await asyncio.sleep(2)
    figures.idle_kib = (rss_kib(target.pid) - before) / args.idle
    await asyncio.gather(*(ws.close() for ws in [*idle, *warm]), return_exceptions=True)
    return figures


class ModelServers:
    """The model server, restarted with other settings between scenarios (on the load core)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.env = env
        self._stack = contextlib.ExitStack()
        self._child: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def use(self, *, tokens: int, pace: float) -> None:
        self.close()
        args = [
            sys.executable,
            "bench/model_server.py",
            str(self.port),
            "--tokens",
            str(tokens),
            "--pace",
            str(pace),
        ]
        self._child = self._stack.enter_context(process(args, self.env, LOAD_CORE))
        await wait_ready(f"http://127.0.0.1:{self.port}/v1/models", self._child)

    async def emitted(self) -> int:
        """How many answer tokens the model server has written so far."""
        async with httpx.AsyncClient() as http:
            stats = (await http.get(f"http://127.0.0.1:{self.port}/stats")).json()
        return int(stats["emitted"])

    def close(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()


def table(vernis: Figures, relay: Figures, args: argparse.Namespace) -> str:
    def row(label: str, unit: str, ours: float, floor: float, fmt: str = "{:,.1f}") -> str:
        ratio = f"{ours / floor:.2f}" if floor else "-"
        return f"| {label} | {fmt.format(ours)} {unit} | {fmt.format(floor)} {unit} | {ratio} |"

    nominal = args.streams * 50
    lines = [
        "| figure | Vernis | bare relay | ratio |",
        "|---|---:|---:|---:|",
        f"| paced, {args.streams} x 50 tok/s: delivered of what the model wrote | "
        f"{vernis.paced_share:.1%} ({vernis.paced_rate:,.0f} of {vernis.offered_rate:,.0f}/s) | "
        f"{relay.paced_share:.1%} ({relay.paced_rate:,.0f} of {relay.offered_rate:,.0f}/s) | |",
        f"| paced: delivered of the nominal {nominal:,}/s (the closed loop's pause between answers "
        f"included) | {vernis.paced_rate / nominal:.1%} | {relay.paced_rate / nominal:.1%} | |",
        row("paced: added latency p50", "ms", vernis.p50, relay.p50),
        row("paced: added latency p99", "ms", vernis.p99, relay.p99),
        row("paced: added latency p99.9", "ms", vernis.p999, relay.p999),
        row("burst, 50 x 100 tokens: deltas/s", "", vernis.burst_rate, relay.burst_rate, "{:,.0f}"),
        row("server CPU per paced delta (fixed included)", "µs", vernis.paced_cpu_us, relay.paced_cpu_us),
        row("fixed CPU per answer", "ms", vernis.fixed_ms, relay.fixed_ms, "{:,.2f}"),
        row("added time to first token, one user (p50)", "ms", vernis.ttft_ms, relay.ttft_ms, "{:,.2f}"),
        row("memory per idle socket", "KiB", vernis.idle_kib, relay.idle_kib),
        f"| load core busy (clients and model): paced / burst | {vernis.paced_load_busy:.0%} / "
        f"{vernis.burst_load_busy:.0%} | {relay.paced_load_busy:.0%} / {relay.burst_load_busy:.0%} | |",
    ]
    return "\n".join(lines)


def server_env(base_env: dict[str, str], model: ModelServers, data: Path) -> dict[str, str]:
    """`vernis serve`'s environment for a benchmark: SQLite in `data`, the model server, no limits."""
    return {
        **base_env,
        "VERNIS_DATABASE_URL": f"sqlite+aiosqlite:///{data / 'vernis.db'}",
        "VERNIS_JWT_SECRET": SECRET,
        "VERNIS_LLM_BASE_URL": model.base_url,
        "VERNIS_LLM_API_KEY": "bench",
        "VERNIS_LLM_MODEL": "bench",
        "VERNIS_RATE_LIMIT": "100000/60",
        "VERNIS_MEMBER_RATE_LIMIT": "100000/60",
        "VERNIS_FLOOD_LIMIT": "100000/10",
        "VERNIS_MAX_SOCKETS_PER_MEMBER": "100000",
        "VERNIS_LOG_LEVEL": "WARNING",
    }


async def main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {LOAD_CORE})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.idle + 4096)), hard))
    data = Path(tempfile.mkdtemp(prefix="vernis-bench-"))
    base_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    model = ModelServers(base_env)
    await model.use(tokens=100, pace=0.02)
    env = server_env(base_env, model, data)
    vernis_port, relay_port = free_port(), free_port()
    try:
        serve = [sys.executable, "-m", "vernis", "serve", "--demo", "--port", str(vernis_port)]
        with process(serve, env, SERVER_CORE) as server:
            await wait_ready(f"http://127.0.0.1:{vernis_port}/readyz", server)
            target = Target("vernis", f"ws://127.0.0.1:{vernis_port}/api/assistant/ws", server.pid, True)
            if args.agui:
                print(
                    f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({cpu_model()}), "
                    f"Python {sys.version.split()[0]}\n\n{await compare_agui(target, model, args)}"
                )
                return
            ours = await measure(target, model, args)
        relay_cmd = [sys.executable, "bench/relay.py", str(relay_port), model.base_url]
        with process(relay_cmd, base_env, SERVER_CORE) as relay:
            await wait_ready(f"http://127.0.0.1:{relay_port}/", relay)
            target = Target("relay", f"ws://127.0.0.1:{relay_port}/ws", relay.pid, False)
            floor = await measure(target, model, args)
    finally:
        model.close()
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({cpu_model()}), Python {sys.version.split()[0]}"
    )
    print(table(ours, floor, args))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="how long each load is measured")
    parser.add_argument("--warmup", type=float, default=5.0, help="load before measuring starts")
    parser.add_argument("--streams", type=int, default=200, help="concurrent paced answers")
    parser.add_argument(
        "--paced-seconds",
        type=float,
        default=60.0,
        help="how long the paced load is measured (long enough to include the server's full collections)",
    )
    parser.add_argument("--paced-only", action="store_true", help="only the paced load (quick checks)")
    parser.add_argument(
        "--agui", action="store_true", help="the paced load over the socket and over AG-UI, compared"
    )
    parser.add_argument("--idle", type=int, default=5000, help="idle sockets for the memory figure")
    # The load side is the measuring instrument: no collector pauses of its own in the figures.
    gc.disable()
    uvloop.run(main(parser.parse_args()))
