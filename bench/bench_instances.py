"""What Redis mode costs, and whether anything grows with the number of instances (SPEC §10).

    python bench/bench_instances.py [--seconds 15] [--streams 200]

Everything as in `bench_server.py` (real `vernis serve --demo` processes, the real `openai` client
against the paced OpenAI-compatible server, real `websockets` clients in a closed loop), on one
PostgreSQL database made for the run and dropped after, in three set-ups:

1. memory mode: one instance, no Redis;
2. Redis mode: one instance, with a `redis-server` of the run's own (pinned to the load core);
3. the same instance with half the streams (what each of the two below carries);
4. Redis mode, two instances sharing the load (half the streams each, both pinned to the server core).

Figures: delivered deltas/s and their share of what the model wrote meanwhile, the latency Vernis adds (p50/p99),
server CPU per delta (each instance's own), Redis's CPU per delta beside it, and how many deltas/s one
core serves in each mode (1 / CPU per delta), so a reader can size a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

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
    wait_ready,
)
from sqlalchemy.ext.asyncio import create_async_engine

POSTGRES = "postgresql+asyncpg://postgres@127.0.0.1:5432"


@dataclass
class Run:
    label: str
    streams: int
    delivered: float
    share: float
    p50: float
    p99: float
    cpu_us: list[float]
    redis_cpu_us: float | None


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


async def measure(
    label: str,
    targets: list[Target],
    model: ModelServers,
    streams: int,
    args: argparse.Namespace,
    redis_pid: int | None,
) -> Run:
    print(
        f"[{label}] {streams} streams x 100 tokens at 50 tokens/s over {len(targets)} instance(s)", flush=True
    )
    redis_before = cpu_seconds(redis_pid) if redis_pid else 0.0
    share = streams // len(targets)
    results = await asyncio.gather(
        *(load(t, model, share, args.seconds, args.warmup, 10_000 * (n + 1)) for n, t in enumerate(targets))
    )
    redis_cpu = cpu_seconds(redis_pid) - redis_before if redis_pid else 0.0
    deltas = sum(tally.deltas for tally, _ in results)
    latencies = [value for tally, _ in results for value in tally.latencies]
    # What the model wrote in the window, for every instance's streams (the windows coincide).
    emitted = results[0][0].emitted
    return Run(
        label,
        streams,
        deltas / args.seconds,
        deltas / max(1, emitted),
        pct(latencies, 0.5),
        pct(latencies, 0.99),
        [cpu / max(1, tally.deltas) * 1e6 for tally, cpu in results],
        # Redis's CPU is counted over warm-up and measurement alike: per delta of the whole load.
        redis_cpu / max(1, deltas * (args.seconds + args.warmup) / args.seconds) * 1e6 if redis_pid else None,
    )


async def main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {LOAD_CORE})
    base_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    model = ModelServers(base_env)
    await model.use(tokens=100, pace=0.02)
    redis_port = free_port()
    redis_dir = Path(tempfile.mkdtemp(prefix="vernis-bench-redis-"))
    redis_cmd = [
        shutil.which("redis-server") or "redis-server",
        *("--port", str(redis_port), "--save", "", "--dir", str(redis_dir)),
    ]
    runs: list[Run] = []
    try:
        async with database() as url:
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
            ports = [free_port(), free_port()]

            def serve(port: int) -> list[str]:
                return [sys.executable, "-m", "vernis", "serve", "--demo", "--port", str(port)]

            def target(port: int, pid: int) -> Target:
                return Target("vernis", f"ws://127.0.0.1:{port}/api/assistant/ws", pid, True)

            with process(serve(ports[0]), env, SERVER_CORE) as server:
                await wait_ready(f"http://127.0.0.1:{ports[0]}/readyz", server)
                runs.append(
                    await measure(
                        "memory, 1 instance", [target(ports[0], server.pid)], model, args.streams, args, None
                    )
                )
            with process(redis_cmd, base_env, LOAD_CORE) as redis:
                await asyncio.sleep(0.5)
                redis_env = {**env, "VERNIS_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"}
                with process(serve(ports[0]), redis_env, SERVER_CORE) as one:
                    await wait_ready(f"http://127.0.0.1:{ports[0]}/readyz", one)
                    runs.append(
                        await measure(
                            "Redis, 1 instance",
                            [target(ports[0], one.pid)],
                            model,
                            args.streams,
                            args,
                            redis.pid,
                        )
                    )
                    # The same instance carrying what each of two carries: what the batching of
                    # a lighter load costs, apart from what a second instance adds.
                    runs.append(
                        await measure(
                            "Redis, 1 instance, half the streams",
                            [target(ports[0], one.pid)],
                            model,
                            args.streams // 2,
                            args,
                            redis.pid,
                        )
                    )
                    with process(serve(ports[1]), redis_env, SERVER_CORE) as two:
                        await wait_ready(f"http://127.0.0.1:{ports[1]}/readyz", two)
                        runs.append(
                            await measure(
                                "Redis, 2 instances",
                                [target(ports[0], one.pid), target(ports[1], two.pid)],
                                model,
                                args.streams,
                                args,
                                redis.pid,
                            )
                        )
    finally:
        model.close()
        shutil.rmtree(redis_dir, ignore_errors=True)
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({cpu_model()}), Python {sys.version.split()[0]}"
    )
    print(
        "| set-up | delivered (of what the model wrote; of the nominal) | added latency p50 / p99 "
        "| server CPU per delta | Redis CPU per delta | deltas/s per core |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for run in runs:
        cpu = " / ".join(f"{value:,.1f} µs" for value in run.cpu_us)
        per_core = " / ".join(f"{1e6 / value:,.0f}" for value in run.cpu_us if value)
        redis_cpu = f"{run.redis_cpu_us:,.1f} µs" if run.redis_cpu_us is not None else "-"
        print(
            f"| {run.label} | {run.delivered:,.0f}/s ({run.share:.1%}; {run.delivered / (run.streams * 50):.0%}) "
            f"| {run.p50:,.1f} / {run.p99:,.1f} ms "
            f"| {cpu} | {redis_cpu} | {per_core} |"
        )
    memory, redis_one, redis_half, redis_two = runs
    print(f"\nRedis mode / memory mode, CPU per delta: {redis_one.cpu_us[0] / memory.cpu_us[0]:.2f}")
    lone = redis_one.cpu_us[0]
    print(
        "Two instances / one, CPU per delta: "
        + " / ".join(f"{value / lone:.2f}" for value in redis_two.cpu_us)
    )
    half = redis_half.cpu_us[0]
    print(
        "Two instances / one carrying as much as each of them, CPU per delta: "
        + " / ".join(f"{value / half:.2f}" for value in redis_two.cpu_us)
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="how long each load is measured")
    parser.add_argument("--warmup", type=float, default=5.0, help="load before measuring starts")
    parser.add_argument("--streams", type=int, default=200, help="concurrent paced answers")
    uvloop.run(main(parser.parse_args()))
