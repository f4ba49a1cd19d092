"""What Redis mode costs, and whether anything grows with the number of instances (SPEC §10).

    python bench/bench_instances.py [--rounds 3] [--seconds 10] [--streams 200]
    python bench/bench_instances.py --smoke    # one round at tiny sizes: that it runs and prints

Everything as in `bench_server.py` (real `vernis serve --demo` processes, the real `openai` client
against the paced OpenAI-compatible server, real `websockets` clients in a closed loop), on one
PostgreSQL database made for the run and dropped after. Five set-ups:

1. the bare relay (`bench/relay.py`): the floor, and the machine's speed at that moment;
2. memory mode: one instance, no Redis;
3. Redis mode: one instance, with a `redis-server` of the run's own (pinned to the load core);
4. the same instance with half the streams (what each of the two below carries);
5. Redis mode, two instances sharing the load (half the streams each, both pinned to the server core).

This machine's speed drifts over minutes (the relay's own CPU per delta moved by half from one run
to the next), so the set-ups are not measured one after the other: every round measures each of them
once, in turn, and each ratio is taken within a round, then the median over the rounds. Every process
stays up for the whole run; the ones not under load sit idle. Every measurement uses members (and so
conversations) of its own, new, so each starts from the same state.

Figures: delivered deltas/s and their share of what the model wrote meanwhile, the latency Vernis adds
(p50/p99), server CPU per delta (each instance's own), Redis's CPU per delta beside it, how busy the
load core was, and how many deltas/s one core serves in each mode (1 / CPU per delta), so a reader
can size a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import redis.asyncio as aioredis
import sqlalchemy as sa
import uvloop
from bench_server import (
    LOAD_CORE,
    ROOT,
    SECRET,
    SERVER_CORE,
    ModelServers,
    Target,
    cpu_model,
    cpu_seconds,
    free_port,
    load,
    pct,
    process,
    vernis_serve,
    wait_ready,
)
from sqlalchemy.ext.asyncio import create_async_engine

POSTGRES = "postgresql+asyncpg://postgres@127.0.0.1:5432"
SETUPS = ("relay", "memory", "redis", "half", "two")
LABELS = {
    "relay": "bare relay (the floor)",
    "memory": "memory, 1 instance",
    "redis": "Redis, 1 instance",
    "half": "Redis, 1 instance, half the streams",
    "two": "Redis, 2 instances",
}


@dataclass
class Run:
    setup: str
    streams: int
    delivered: float
    share: float
    p50: float
    p99: float
    cpu_us: list[float]
    redis_cpu_us: float | None
    load_busy: float


@contextlib.asynccontextmanager
async def database() -> AsyncIterator[str]:
    name = f"vernis_bench_{uuid.uuid4().hex[:8]}"
    admin = create_async_engine(f"{POSTGRES}/test", isolation_level="AUTOCOMMIT")
    async with admin.connect() as connection:
        await connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{POSTGRES}/{name}"
    finally:
        async with admin.connect() as connection:
            await connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


async def redis_ready(port: int) -> None:
    """Once the `redis-server` on `port` answers PING (it takes a moment to listen)."""
    client = aioredis.Redis(port=port)
    try:
        for _ in range(100):
            with contextlib.suppress(aioredis.ConnectionError):
                if await client.ping():
                    return
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()
    raise RuntimeError(f"redis-server on port {port} never answered")


async def measure(
    setup: str,
    targets: list[Target],
    model: ModelServers,
    streams: int,
    args: argparse.Namespace,
    redis_pid: int | None,
    members: Callable[[], int],
) -> Run:
    redis_before = cpu_seconds(redis_pid) if redis_pid else 0.0
    share = streams // len(targets)
    results = await asyncio.gather(
        *(load(t, model, share, args.seconds, args.warmup, members()) for t in targets)
    )
    redis_cpu = cpu_seconds(redis_pid) - redis_before if redis_pid else 0.0
    deltas = sum(tally.deltas for tally, _ in results)
    latencies = [value for tally, _ in results for value in tally.latencies]
    # What the model wrote in the window, for every instance's streams (the windows coincide).
    emitted = results[0][0].emitted
    run = Run(
        setup,
        streams,
        deltas / args.seconds,
        deltas / max(1, emitted),
        pct(latencies, 0.5),
        pct(latencies, 0.99),
        [cpu / max(1, tally.deltas) * 1e6 for tally, cpu in results],
        # Redis's CPU is counted over warm-up and measurement alike: per delta of the whole load.
        redis_cpu / max(1, deltas * (args.seconds + args.warmup) / args.seconds) * 1e6 if redis_pid else None,
        results[0][0].load_busy,
    )
    print(
        f"  {LABELS[setup]}: {run.delivered:,.0f}/s ({run.share:.1%}), {run.p50:.1f} / {run.p99:.1f} ms, "
        + " / ".join(f"{value:.1f} µs" for value in run.cpu_us)
        + f", load core {run.load_busy:.0%} busy",
        flush=True,
    )
    return run


async def main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {LOAD_CORE})
    base_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    model = ModelServers(base_env)
    await model.use(tokens=args.tokens, pace=0.02)
    redis_port = free_port()
    redis_dir = Path(tempfile.mkdtemp(prefix="vernis-bench-redis-"))
    redis_cmd = [
        shutil.which("redis-server") or "redis-server",
        *("--port", str(redis_port), "--save", "", "--dir", str(redis_dir)),
    ]
    rounds: list[dict[str, Run]] = []
    # Members (and so conversations) of their own for every measurement.
    counter = itertools.count(1)

    def members() -> int:
        return 10_000 * next(counter)

    try:
        async with database() as url, contextlib.AsyncExitStack() as stack:
            env = {
                **base_env,
                "VERNIS_DATABASE_URL": str(url),
                "VERNIS_JWT_SECRET": SECRET,
                "VERNIS_LLM_BASE_URL": model.base_url,
                "VERNIS_LLM_API_KEY": "bench",
                "VERNIS_LLM_MODEL": "bench",
                "VERNIS_RATE_LIMIT": "100000/60",
                "VERNIS_MEMBER_RATE_LIMIT": "100000/60",
                "VERNIS_FLOOD_LIMIT": "100000/10",
                "VERNIS_MAX_SOCKETS_PER_MEMBER": "100000",
                "VERNIS_DATABASE_POOL_SIZE": "20",
                "VERNIS_LOG_LEVEL": "WARNING",
            }
            redis_env = {**env, "VERNIS_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"}
            redis = stack.enter_context(process(redis_cmd, base_env, LOAD_CORE))
            await redis_ready(redis_port)

            async def vernis(environment: dict[str, str]) -> Target:
                server = stack.enter_context(vernis_serve(environment))
                await server.ready()
                return server.target()

            relay_port = free_port()
            relay_cmd = [sys.executable, "bench/relay.py", str(relay_port), model.base_url]
            relay_child = stack.enter_context(process(relay_cmd, base_env, SERVER_CORE))
            await wait_ready(f"http://127.0.0.1:{relay_port}/", relay_child)
            relay = Target("relay", f"ws://127.0.0.1:{relay_port}/ws", relay_child.pid, False)
            # Started together, as a deploy starts instances (migrations and the demo's seed are safe
            # to run concurrently).
            memory, one, two = await asyncio.gather(vernis(env), vernis(redis_env), vernis(redis_env))
            plans = {
                "relay": ([relay], args.streams, None),
                "memory": ([memory], args.streams, None),
                "redis": ([one], args.streams, redis.pid),
                "half": ([one], args.streams // 2, redis.pid),
                "two": ([one, two], args.streams, redis.pid),
            }
            for n in range(args.rounds):
                print(
                    f"round {n + 1} of {args.rounds}: {args.streams} streams x {args.tokens} tokens at 50 tokens/s",
                    flush=True,
                )
                runs: dict[str, Run] = {}
                for setup in SETUPS:
                    targets, streams, redis_pid = plans[setup]
                    runs[setup] = await measure(setup, targets, model, streams, args, redis_pid, members)
                rounds.append(runs)
    finally:
        model.close()
        shutil.rmtree(redis_dir, ignore_errors=True)
    report(rounds, args)


def report(rounds: list[dict[str, Run]], args: argparse.Namespace) -> None:
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({cpu_model()}), Python {sys.version.split()[0]}, "
        f"{len(rounds)} rounds of {args.seconds:g} s per set-up; medians over the rounds"
    )
    print(
        "| set-up | delivered (of what the model wrote; of the nominal) | added latency p50 / p99 "
        "| server CPU per delta | Redis CPU per delta | deltas/s per core | load core busy |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for setup in SETUPS:
        runs = [r[setup] for r in rounds]
        width = len(runs[0].cpu_us)
        cpu = [median([run.cpu_us[i] for run in runs]) for i in range(width)]
        redis_cpu = [run.redis_cpu_us for run in runs if run.redis_cpu_us is not None]
        delivered = median([run.delivered for run in runs])
        print(
            f"| {LABELS[setup]} | {delivered:,.0f}/s ({median([run.share for run in runs]):.1%}; "
            f"{delivered / (runs[0].streams * 50):.0%}) "
            f"| {median([run.p50 for run in runs]):,.1f} / {median([run.p99 for run in runs]):,.1f} ms "
            f"| {' / '.join(f'{value:,.1f} µs' for value in cpu)} "
            f"| {f'{median(redis_cpu):,.1f} µs' if redis_cpu else '-'} "
            f"| {' / '.join(f'{1e6 / value:,.0f}' for value in cpu if value)} "
            f"| {median([run.load_busy for run in runs]):.0%} |"
        )

    def ratios(name: str, of: Callable[[dict[str, Run]], list[float]]) -> None:
        per_round = [of(r) for r in rounds]
        columns = list(zip(*per_round, strict=True))
        print(
            f"{name}: "
            + " / ".join(f"{median(list(c)):.2f}" for c in columns)
            + "  (rounds: "
            + ", ".join(" / ".join(f"{v:.2f}" for v in values) for values in per_round)
            + ")"
        )

    print()
    ratios("Memory mode / the relay, CPU per delta", lambda r: [r["memory"].cpu_us[0] / r["relay"].cpu_us[0]])
    ratios(
        "Redis mode / memory mode, CPU per delta", lambda r: [r["redis"].cpu_us[0] / r["memory"].cpu_us[0]]
    )
    ratios(
        "Two instances / one carrying as much as each of them, CPU per delta",
        lambda r: [value / r["half"].cpu_us[0] for value in r["two"].cpu_us],
    )
    ratios(
        "Two instances / one carrying the whole load, CPU per delta",
        lambda r: [value / r["redis"].cpu_us[0] for value in r["two"].cpu_us],
    )
    print(
        "p99 added latency per round (ms), relay / memory / Redis / two instances: "
        + ", ".join(
            " / ".join(f"{r[setup].p99:.1f}" for setup in ("relay", "memory", "redis", "two")) for r in rounds
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each measuring every set-up once")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each load is measured")
    parser.add_argument("--warmup", type=float, default=4.0, help="load before measuring starts")
    parser.add_argument("--streams", type=int, default=200, help="concurrent paced answers")
    parser.add_argument(
        "--smoke", action="store_true", help="one round of 0.5 s, 10 streams: that it runs and prints"
    )
    arguments = parser.parse_args()
    arguments.tokens = 100  # each answer's; a load ends once its answers in flight have
    if arguments.smoke:
        arguments.rounds, arguments.seconds, arguments.warmup, arguments.streams = 1, 0.5, 0.2, 10
        arguments.tokens = 20
    # The load side is the measuring instrument: no collector pauses of its own in the figures.
    gc.disable()
    uvloop.run(main(arguments))
