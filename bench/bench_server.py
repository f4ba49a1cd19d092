"""What one Vernis process keeps up with, measured the way users run it, beside a bare relay.

    python bench/bench_server.py [--paced-seconds 60] [--seconds 15] [--streams 200] [--idle 20000]
                                 [--storm 5000] [--storm-window 10] [--storm-streaming 250]
    python bench/bench_server.py --storm-only | --idle-only | --paced-only
    python bench/bench_server.py --smoke      # every measurement at tiny sizes: that it runs and prints
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

Figures: delivered deltas/s (and the share of what the model offered; a delta is one of the model's
chunks, counted by its stamp: Vernis sends the chunks that came in one read as one `text_delta`,
the relay one frame each, and the burst's row of frames says how many carried them), the latency
Vernis adds to a delta (client receipt minus the stamp the model server wrote into the token), server CPU per delta
from /proc (fixed costs included), the fixed CPU per answer (from two answer lengths), the time to
first token Vernis adds for one user, and the server's memory per idle socket. Run on a quiet
machine and compare with the relay's figures of the same run; absolute figures move with the machine.

The reconnect storm (Vernis only: the relay has no conversations to resume) runs on a server of its
own, started for it (a `--smoke` run's shares the measured one): `--storm` members each with a
socket and a conversation, `--storm-streaming` of them with an answer running, every socket cut at
once from the client side, every member back after a random delay within `--storm-window` seconds,
resuming with `after_seq`; `bench/bench_storm.py` says how each checks that it got exactly what it
missed. The idle sockets and the storm are held by worker processes of `bench/bench_storm.py` on the
load core (a process holds at most 20,000 descriptors here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import math
import os
import resource
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import orjson
import uvloop
from bench_storm import Worker
from websockets.asyncio.client import ClientConnection, connect

from vernis.identity import issue_token

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench-secret-that-is-long-enough-for-hs256"
SERVER_CORE, LOAD_CORE = 0, 1
# Idle sockets one load process holds (its descriptors are capped like the server's).
IDLE_PER_WORKER = 5000
# Descriptors left to the server beside the idle sockets: its database, model connections, logs.
DESCRIPTOR_MARGIN = 200
# The storm's running answers: a token every 50 ms (20 tokens/s), lasting one and a half reconnect
# windows after the cut, so that most members reconnect while their answer still runs.
STORM_PACE = 0.05


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


def descriptor_room(pid: int) -> int:
    """How many more descriptors process `pid` may open (its soft limit minus those open)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft = int(line.split()[3])
            return soft - len(os.listdir(f"/proc/{pid}/fd"))
    raise RuntimeError("no Max open files")


def tcp_counters() -> Counter[str]:
    """The kernel's TCP counters that say a connect waited (machine-wide, from /proc/net/netstat):
    accept queues that overflowed, SYNs dropped or sent again."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    found: Counter[str] = Counter()
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        if names.startswith("TcpExt:"):
            pairs = zip(names.split()[1:], values.split()[1:], strict=True)
            found.update(
                {k: int(v) for k, v in pairs if k in ("ListenOverflows", "ListenDrops", "TCPSynRetrans")}
            )
    return found


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
    # The model's deltas delivered: each carries its stamp (`t<µs>`), and Vernis sends the deltas
    # that came in one read of the model's stream as one frame, so a frame may carry several.
    deltas: int = 0
    frames: int = 0
    answers: int = 0
    latencies: list[int] = field(default_factory=list)
    first_token: list[int] = field(default_factory=list)
    measuring: bool = False
    load_busy: float = 0.0
    emitted: int = 0

    def count(self, content: str, received: int) -> None:
        """One frame's text: its deltas (their stamps) and the latency of each."""
        self.frames += 1
        for word in content.split():
            if word[0] == "t":
                self.deltas += 1
                self.latencies.append(received - int(word[1:]))


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
                    tally.count(content, received)
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
                    tally.count(event["delta"], now_us())
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
    rows: list[tuple[str, float, float, float, float, float]] = []
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


def quantile(values: Sequence[float], share: float) -> float:
    """The `share` quantile of `values` (nearest rank), NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def pct(values: list[int], share: float) -> float:
    """The `share` quantile of latencies in µs, in ms."""
    return quantile(values, share) / 1000


@dataclass
class Figures:
    paced_share: float = 0.0
    offered_rate: float = 0.0
    paced_rate: float = 0.0
    p50: float = 0.0
    p99: float = 0.0
    p999: float = 0.0
    burst_rate: float = 0.0
    burst_frames: float = 0.0
    paced_cpu_us: float = 0.0
    fixed_ms: float = 0.0
    ttft_ms: float = 0.0
    idle_kib: float = 0.0
    idle_sockets: int = 0
    paced_load_busy: float = 0.0
    burst_load_busy: float = 0.0


async def measure(target: Target, model: ModelServers, args: argparse.Namespace) -> Figures:
    figures = Figures()
    members = iter(range(0, 10**6, 1000))
    if args.idle_only:
        await idle_memory(target, figures, args.idle, 100_000, args.settle)
        return figures
    print(
        f"[{target.name}] paced: {args.streams} streams x {args.answer_tokens} tokens at 50 tokens/s",
        flush=True,
    )
    await model.use(tokens=args.answer_tokens, pace=0.02)
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
    figures.burst_frames = tally.frames / args.seconds
    figures.burst_load_busy = tally.load_busy

    print(f"[{target.name}] fixed cost: answers of 10 and 200 tokens", flush=True)
    await model.use(tokens=10, pace=0)
    short = await answers_cpu(target, args.fixed_clients, args.fixed_answers, next(members))
    await model.use(tokens=200, pace=0)
    long = await answers_cpu(target, args.fixed_clients, args.fixed_answers, next(members))
    per_delta = (long - short) / 190
    figures.fixed_ms = (short - 10 * per_delta) * 1000

    print(f"[{target.name}] time to first token: one user", flush=True)
    await model.use(tokens=5, pace=0.02)
    sockets = [await target.open(next(members))]
    tally = Tally(measuring=True)
    await converse(sockets[0], tally, asyncio.Event(), args.ttft_answers)
    await sockets[0].close()
    figures.ttft_ms = statistics.median(tally.first_token) / 1000

    await idle_memory(target, figures, args.idle, next(members) * 10, args.settle)
    return figures


def worker_env() -> dict[str, str]:
    """A `bench/bench_storm.py` worker's environment: the repository importable, the tokens' secret."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_SECRET": SECRET}


async def start_workers(per_worker: list[list[str]]) -> list[Worker]:
    """One `bench/bench_storm.py` worker on the load core per argument list."""
    return list(
        await asyncio.gather(
            *(
                Worker.start(args, worker_env(), LOAD_CORE, LOGS / f"worker-{time.monotonic_ns()}-{i}.log")
                for i, args in enumerate(per_worker)
            )
        )
    )


def shares(total: int, parts: int) -> list[int]:
    """`total` split into `parts` shares that differ by one at most."""
    return [total // parts + (i < total % parts) for i in range(parts)]


async def idle_memory(
    target: Target, figures: Figures, wanted: int, first_member: int, settle: float
) -> None:
    """The server's resident set per idle socket over `wanted` sockets, held by worker processes
    (IDLE_PER_WORKER each), read `settle` seconds after the last is open; fewer sockets, said in the
    output, when the server's descriptor limit cannot take that many beside what it has open."""
    warm = [await target.open(first_member + n) for n in range(20)]
    await asyncio.sleep(settle / 2)
    count = min(wanted, descriptor_room(target.pid) - DESCRIPTOR_MARGIN)
    note = (
        ""
        if count == wanted
        else f" (of {wanted:,} asked: the server's descriptor limit leaves room for these)"
    )
    print(f"[{target.name}] memory: {count:,} idle sockets{note}", flush=True)
    before = rss_kib(target.pid)
    plain = [] if target.vernis else ["--plain"]
    first, per_worker = first_member + 100, []
    for share in shares(count, max(1, math.ceil(count / IDLE_PER_WORKER))):
        per_worker.append(["idle", target.ws_url, "--first", str(first), "--count", str(share), *plain])
        first += share
    workers = await start_workers(per_worker)
    try:
        held = sum([(await worker.reply())["ready"] for worker in workers])
        await asyncio.sleep(settle)
        figures.idle_kib = (rss_kib(target.pid) - before) / held
        figures.idle_sockets = held
    finally:
        await asyncio.gather(*(worker.close() for worker in workers))
        await asyncio.gather(*(ws.close() for ws in warm), return_exceptions=True)


@dataclass
class Storm:
    """The reconnect storm's figures (`reconnect_storm`)."""

    sockets: int = 0
    streaming: int = 0
    window: float = 0.0
    back: int = 0
    exact: int = 0
    resumed: int = 0
    stored_equal: int = 0
    caught_up_ms: list[float] = field(default_factory=list)
    open_ms: list[float] = field(default_factory=list)
    # (second of the window the reconnect was attempted in, its time to caught up in ms)
    by_second: list[tuple[int, float]] = field(default_factory=list)
    tcp: Counter[str] = field(default_factory=Counter)
    missed: list[int] = field(default_factory=list)
    spread_s: float = 0.0
    cut_ms: float = 0.0
    seconds: float = 0.0
    server_cpu: float = 0.0
    streaming_cpu_rate: float = 0.0
    load_busy: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def per_reconnect_ms(self) -> float:
        """Server CPU per reconnect: the storm's, less what the running answers alone cost per second
        before the cut (measured for the same time), over the members."""
        own = self.server_cpu - self.streaming_cpu_rate * self.seconds
        return own / max(1, self.sockets) * 1000


@dataclass
class Server:
    """A running `vernis serve --demo` (`vernis_serve`)."""

    child: subprocess.Popen[bytes]
    port: int

    @property
    def pid(self) -> int:
        return self.child.pid

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/api/assistant/ws"

    @property
    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/readyz"

    def target(self) -> Target:
        return Target("vernis", self.ws_url, self.pid, True)

    async def ready(self) -> None:
        await wait_ready(self.ready_url, self.child)


@contextlib.contextmanager
def vernis_serve(env: dict[str, str], wrapper: Sequence[str] = ()) -> Iterator[Server]:
    """`vernis serve --demo` with `env`, on the server core, stopped at the end (`Server.ready`
    waits for it to answer); `wrapper`: a command it runs under (valgrind)."""
    port = free_port()
    serve = [*wrapper, sys.executable, "-m", "vernis", "serve", "--demo", "--port", str(port)]
    with process(serve, env, SERVER_CORE) as child:
        yield Server(child, port)


async def reconnect_storm(model: ModelServers, base_env: dict[str, str], args: argparse.Namespace) -> Storm:
    """The storm (`storm_on`) on a server of its own, started for it on SQLite."""
    data = Path(tempfile.mkdtemp(prefix="vernis-bench-storm-"))
    with vernis_serve(server_env(base_env, model, data)) as server:
        await server.ready()
        return await storm_on(server, data / "vernis.db", model, args)


async def storm_on(server: Server, database: Path, model: ModelServers, args: argparse.Namespace) -> Storm:
    """`args.storm` members on `server` (its SQLite file `database`), every socket cut at once, every
    member back with `after_seq` within `args.storm_window` s (`bench/bench_storm.py` holds the
    clients)."""
    figures = Storm(sockets=args.storm, window=args.storm_window)
    figures.streaming = min(args.storm, args.storm_streaming)
    # The running answers' cost alone is measured for `quiet` s before the cut; they last that long,
    # the reconnect window and half of it more.
    quiet = min(2.0, args.storm_window / 2)
    tokens = math.ceil((quiet + 1.5 * args.storm_window) / STORM_PACE)
    await model.use(tokens=5, pace=0)
    parts = max(1, args.storm_processes)
    first, per_worker = 3_000_000, []
    for i, (count, streaming) in enumerate(
        zip(shares(args.storm, parts), shares(figures.streaming, parts), strict=True)
    ):
        per_worker.append(
            [
                *("storm", server.ws_url, "--first", str(first), "--count", str(count)),
                *("--streaming", str(streaming), "--window", str(args.storm_window)),
                *("--tokens", str(tokens), "--seed", str(20261128 + i)),
            ]
        )
        first += count
    workers = await start_workers(per_worker)
    try:
        print(f"[storm] {args.storm:,} members: a socket each, one exchange each", flush=True)
        started = time.monotonic()
        for worker in workers:
            await worker.send("setup")
        for worker in workers:
            await worker.reply(within=1800)
        print(f"[storm] set up in {time.monotonic() - started:.0f} s", flush=True)
        await model.use(tokens=tokens, pace=STORM_PACE)
        print(
            f"[storm] {figures.streaming:,} answers running ({tokens} tokens, one every "
            f"{STORM_PACE * 1000:.0f} ms)",
            flush=True,
        )
        for worker in workers:
            await worker.send("stream")
        for worker in workers:
            await worker.reply()
        # What the running answers alone cost the server, per second, just before the cut.
        cpu = cpu_seconds(server.pid)
        await asyncio.sleep(quiet)
        figures.streaming_cpu_rate = (cpu_seconds(server.pid) - cpu) / quiet
        print(
            f"[storm] cutting every socket; back within {args.storm_window:g} s with after_seq",
            flush=True,
        )
        tcp = tcp_counters()
        cpu, busy, started = cpu_seconds(server.pid), core_busy(LOAD_CORE), time.monotonic()
        for worker in workers:
            await worker.send("cut")
        with profiling(server.pid, args.storm_profile, args.storm_window + 2):
            backs = [await worker.reply() for worker in workers]
            figures.seconds = time.monotonic() - started
            figures.server_cpu = cpu_seconds(server.pid) - cpu
            figures.tcp = tcp_counters() - tcp
            after = core_busy(LOAD_CORE)
        figures.load_busy = (after[0] - busy[0]) / max(1, after[1] - busy[1])
        figures.cut_ms = max(back["cut_us"] for back in backs) / 1000
        results = [
            {**r, "cut_at_us": back["cut_at_us"]}
            for worker, back in zip(workers, backs, strict=True)
            for r in (await worker.reply())["results"]
        ]
    finally:
        await asyncio.gather(*(worker.close() for worker in workers))
    tally_storm(figures, results, database)
    print(
        f"[storm] back {figures.back:,} of {figures.sockets:,}, exactly what they missed "
        f"{figures.exact:,}; caught up p50 / p99 / max {quantile(figures.caught_up_ms, 0.5):.0f} / "
        f"{quantile(figures.caught_up_ms, 0.99):.0f} / {max(figures.caught_up_ms, default=float('nan')):.0f} ms",
        flush=True,
    )
    return figures


@contextlib.contextmanager
def profiling(pid: int, output: str | None, seconds: float) -> Iterator[None]:
    """With `output`, py-spy samples process `pid` (all its threads, without pausing it) for
    `seconds` from now, from the load core, and writes the folded stacks there."""
    if output is None:
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    command = [str(spy), "record", "--pid", str(pid), "--duration", str(math.ceil(seconds)), "--rate", "100"]
    command += ["--nonblocking", "--threads", "--format", "raw", "--output", output]
    with process(command, dict(os.environ), LOAD_CORE) as spying:
        yield
        spying.wait(seconds + 30)


def tally_storm(figures: Storm, results: list[dict[str, object]], database: Path) -> None:
    """The storm's figures from the members' results; every running answer's text compared with
    the message the server stored (SQLite, read-only)."""
    attempts = []
    for result in results:
        if result["error"]:
            figures.errors[str(result["error"]).split(":", 1)[0]] += 1
        if not result["back"]:
            continue
        figures.back += 1
        figures.exact += bool(result["exact"])
        figures.resumed += result["resumed"] is True
        figures.caught_up_ms.append(float(result["caught_up_ms"]))  # type: ignore[arg-type]
        second = (int(result["attempt_us"]) - int(result["cut_at_us"])) // 1_000_000  # type: ignore[call-overload]
        figures.by_second.append((second, figures.caught_up_ms[-1]))
        figures.open_ms.append(float(result["open_ms"]))  # type: ignore[arg-type]
        attempts.append(int(result["attempt_us"]))  # type: ignore[call-overload]
        if result["streaming"]:
            figures.missed.append(int(result["missed"]))  # type: ignore[call-overload]
    figures.spread_s = (max(attempts) - min(attempts)) / 1e6 if attempts else 0.0
    texts = {str(r["message_id"]): r["text"] for r in results if r["streaming"] and r["message_id"]}
    stored: dict[str, object] = {}
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        for _ in range(100):  # an answer is stored just after its `assistant_end`
            rows = db.execute(
                "SELECT id, content FROM assistant_message WHERE role = 'assistant' AND status = 'complete'"
            ).fetchall()
            stored = {str(uuid.UUID(str(row_id))): content for row_id, content in rows}
            if all(m in stored for m in texts):
                break
            time.sleep(0.1)
    figures.stored_equal = sum(1 for m, text in texts.items() if stored.get(m) == text)


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
        """Answers of `tokens` tokens, one every `pace` s (0: as fast as the socket takes them), from
        now on: the running server is told (`POST /settings`), or one is started."""
        if self._child is not None and self._child.poll() is None:
            async with httpx.AsyncClient() as http:
                settings = {"tokens": tokens, "pace": pace}
                (await http.post(f"http://127.0.0.1:{self.port}/settings", json=settings)).raise_for_status()
            return
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
        self._child = None


def table(vernis: Figures, relay: Figures, args: argparse.Namespace, storm: Storm | None) -> str:
    """The rows of what ran: every one in the full run; the paced rows (`--paced-only`), the idle
    socket's (`--idle-only`) or the storm's (`--storm-only`) alone."""

    def row(label: str, unit: str, ours: float, floor: float, fmt: str = "{:,.1f}") -> str:
        ratio = f"{ours / floor:.2f}" if floor else "-"
        return f"| {label} | {fmt.format(ours)} {unit} | {fmt.format(floor)} {unit} | {ratio} |"

    nominal = args.streams * 50
    lines = ["| figure | Vernis | bare relay | ratio |", "|---|---:|---:|---:|"]
    if not (args.idle_only or args.storm_only):
        lines += [
            f"| paced, {args.streams} x 50 tok/s: delivered of what the model wrote | "
            f"{vernis.paced_share:.1%} ({vernis.paced_rate:,.0f} of {vernis.offered_rate:,.0f}/s) | "
            f"{relay.paced_share:.1%} ({relay.paced_rate:,.0f} of {relay.offered_rate:,.0f}/s) | |",
            f"| paced: delivered of the nominal {nominal:,}/s (the closed loop's pause between answers "
            f"included) | {vernis.paced_rate / nominal:.1%} | {relay.paced_rate / nominal:.1%} | |",
            row("paced: added latency p50", "ms", vernis.p50, relay.p50),
            row("paced: added latency p99", "ms", vernis.p99, relay.p99),
            row("paced: added latency p99.9", "ms", vernis.p999, relay.p999),
        ]
    if not (args.paced_only or args.idle_only or args.storm_only):
        lines += [
            row("burst, 50 x 100 tokens: deltas/s", "", vernis.burst_rate, relay.burst_rate, "{:,.0f}"),
            row(
                "burst: the frames that carried them, /s",
                "",
                vernis.burst_frames,
                relay.burst_frames,
                "{:,.0f}",
            ),
            row("server CPU per paced delta (fixed included)", "µs", vernis.paced_cpu_us, relay.paced_cpu_us),
            row("fixed CPU per answer", "ms", vernis.fixed_ms, relay.fixed_ms, "{:,.2f}"),
            row("added time to first token, one user (p50)", "ms", vernis.ttft_ms, relay.ttft_ms, "{:,.2f}"),
        ]
    if not (args.paced_only or args.storm_only):
        sockets = f"{vernis.idle_sockets:,}"
        if relay.idle_sockets != vernis.idle_sockets:
            sockets += f" / {relay.idle_sockets:,}"
        lines.append(
            row(f"memory per idle socket ({sockets} sockets)", "KiB", vernis.idle_kib, relay.idle_kib)
        )
    if not (args.idle_only or args.storm_only):
        lines.append(
            f"| load core busy (clients and model): paced / burst | {vernis.paced_load_busy:.0%} / "
            f"{vernis.burst_load_busy:.0%} | {relay.paced_load_busy:.0%} / {relay.burst_load_busy:.0%} | |"
        )
    if storm is not None:
        lines += storm_rows(storm)
    return "\n".join(lines)


def storm_rows(storm: Storm) -> list[str]:
    """The reconnect storm's rows (Vernis only: the relay keeps no conversations)."""
    caught = storm.caught_up_ms
    missed = storm.missed
    return [
        f"| reconnect storm, {storm.sockets:,} sockets cut at once, back within {storm.window:g} s "
        f"({storm.streaming:,} with an answer running): back / got exactly what they missed | "
        f"{storm.back:,} / {storm.exact:,} | - | |",
        f"| reconnect storm: reconnect to caught up (the missed events received), p50 / p99 / max | "
        f"{quantile(caught, 0.5):,.0f} / {quantile(caught, 0.99):,.0f} / {max(caught, default=float('nan')):,.0f} ms "
        f"| - | |",
        f"| reconnect storm: server CPU from the cut to the last one back | {storm.server_cpu:.1f} s in "
        f"{storm.seconds:.1f} s ({storm.server_cpu / max(storm.seconds, 1e-9):.0%} of its core), "
        f"≈ {storm.per_reconnect_ms:.2f} ms per reconnect | - | |",
        f"| reconnect storm: events missed per running answer, mean / max; load core busy | "
        f"{statistics.fmean(missed) if missed else float('nan'):,.0f} / {max(missed, default=0):,}; "
        f"{storm.load_busy:.0%} | - | |",
    ]


def storm_details(storm: Storm) -> str:
    """The storm's other raw figures, printed under the table."""
    errors = ", ".join(f"{kind} x {count:,}" for kind, count in storm.errors.most_common()) or "none"
    seconds: dict[int, list[float]] = {}
    for second, ms in storm.by_second:
        seconds.setdefault(second, []).append(ms)
    by_second = "\n".join(
        f"| {second}-{second + 1} s | {len(times):,} | {quantile(times, 0.5):,.0f} / {quantile(times, 0.99):,.0f} / "
        f"{max(times):,.0f} ms |"
        for second, times in sorted(seconds.items())
    )
    tcp = ", ".join(f"{name} {count:,}" for name, count in sorted(storm.tcp.items())) or "none"
    return (
        "| reconnect attempted, after the cut | reconnects | caught up p50 / p99 / max |\n"
        f"|---|---:|---:|\n{by_second}\n\n"
        f"The kernel's TCP counters over the storm (the whole machine): {tcp}.\n\n"
        f"Reconnect storm: {storm.resumed:,} of {storm.back:,} back resumed (resumed: true); "
        f"{storm.stored_equal:,} of {storm.streaming:,} running answers' text, before the cut and after, "
        f"equal to the stored message; reconnect attempts spread over {storm.spread_s:.2f} s; the cut "
        f"took {storm.cut_ms:.1f} ms; handshake (TCP connect to the upgrade's answer) p50 / p99 "
        f"{quantile(storm.open_ms, 0.5):,.0f} / {quantile(storm.open_ms, 0.99):,.0f} ms; the running answers alone "
        f"cost the server {storm.streaming_cpu_rate:.0%} of its core before the cut; errors: {errors}."
    )


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
    # The children (server, relay, workers) inherit this limit; it cannot go past the hard one.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(args.idle, args.storm) + 4096
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, wanted)), hard))
    data = Path(tempfile.mkdtemp(prefix="vernis-bench-"))
    base_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    model = ModelServers(base_env)
    relay_port = free_port()
    stormy = args.storm > 0 and not (args.paced_only or args.idle_only)
    ours = floor = Figures()
    storm: Storm | None = None
    try:
        if args.storm_only:
            storm = await reconnect_storm(model, base_env, args)
        else:
            await model.use(tokens=100, pace=0.02)
            with vernis_serve(server_env(base_env, model, data)) as server:
                await server.ready()
                target = server.target()
                if args.agui:
                    print(
                        f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({cpu_model()}), "
                        f"Python {sys.version.split()[0]}\n\n{await compare_agui(target, model, args)}"
                    )
                    return
                ours = await measure(target, model, args)
                if stormy and args.smoke:
                    # A smoke run's storm shares the measured server: one start fewer.
                    storm = await storm_on(server, data / "vernis.db", model, args)
            if stormy and not args.smoke:
                storm = await reconnect_storm(model, base_env, args)
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
    print(table(ours, floor, args, storm))
    if storm is not None:
        print(f"\n{storm_details(storm)}")


def apply_smoke(args: argparse.Namespace) -> None:
    """`--smoke`: every measurement at tiny sizes, in well under a minute (that it runs and prints;
    the figures mean nothing)."""
    args.streams, args.paced_seconds, args.seconds, args.warmup = 5, 0.5, 0.5, 0.2
    args.idle, args.storm, args.storm_streaming, args.storm_window = 20, 20, 5, 0.5
    args.fixed_clients, args.fixed_answers, args.ttft_answers, args.settle = 5, 2, 3, 0.1
    # Short paced answers: a load ends once its answers in flight have.
    args.answer_tokens = 20


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options, and the sizes that have none (all of them tiny with `--smoke`)."""
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
    parser.add_argument("--idle", type=int, default=20_000, help="idle sockets for the memory figure")
    parser.add_argument("--idle-only", action="store_true", help="only the idle sockets' memory")
    parser.add_argument(
        "--storm", type=int, default=5000, help="members in the reconnect storm (0: no storm)"
    )
    parser.add_argument(
        "--storm-window", type=float, default=10.0, help="the storm's reconnects spread over this many s"
    )
    parser.add_argument(
        "--storm-streaming",
        type=int,
        default=None,
        help="storm members with an answer running at the cut (default: one in twenty)",
    )
    parser.add_argument(
        "--storm-processes", type=int, default=1, help="load processes holding the storm's clients"
    )
    parser.add_argument("--storm-only", action="store_true", help="only the reconnect storm")
    parser.add_argument(
        "--storm-profile",
        metavar="FILE",
        help="py-spy samples the server from the cut to the last one back; folded stacks to FILE",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="every measurement at tiny sizes: that it runs and prints"
    )
    arguments = parser.parse_args(argv)
    # Sizes without an option of their own (`apply_smoke` makes them tiny): the paced answers' tokens,
    # the fixed cost's clients and answers each, the first-token answers, how long the idle sockets
    # settle before the reading.
    (
        arguments.answer_tokens,
        arguments.fixed_clients,
        arguments.fixed_answers,
        arguments.ttft_answers,
        arguments.settle,
    ) = (100, 20, 10, 40, 2.0)
    if arguments.storm_streaming is None:
        arguments.storm_streaming = max(1, arguments.storm // 20)
    if arguments.smoke:
        apply_smoke(arguments)
    return arguments


if __name__ == "__main__":
    arguments = parse_arguments()
    # The load side is the measuring instrument: no collector pauses of its own in the figures.
    gc.disable()
    uvloop.run(main(arguments))
