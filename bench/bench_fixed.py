"""The fixed server CPU of an answer, over the socket and over AG-UI, on one `vernis serve --demo`.

    python bench/bench_fixed.py [--rounds 2]

The server pinned to core 0, the model server (`bench/model_server.py`, answers as fast as the socket
takes them) and the clients on core 1, as in `bench_server.py`. Per path and round: 20 members each
ask once (warm), then 10 answers each of 10 tokens, then of 200 tokens; server CPU from /proc per
answer for each length; the per-delta cost is their difference over 190 tokens, and the fixed cost
what is left of a 10-token answer. Figures: `bench/results/2026-11-agui.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

import aiohttp
import uvloop
from bench_server import (
    LOAD_CORE,
    ROOT,
    ModelServers,
    Tally,
    Target,
    converse,
    converse_agui,
    cpu_seconds,
    server_env,
    vernis_serve,
)

MEMBERS, ANSWERS = 20, 10


async def per_answer(target: Target, model: ModelServers, tokens: int, agui: bool, first: int) -> float:
    """Server CPU seconds per answer of `tokens` tokens, `MEMBERS` x `ANSWERS` run to completion."""
    await model.use(tokens=tokens, pace=0)
    stop = asyncio.Event()
    if agui:
        base_url = target.ws_url.replace("ws://", "http://").removesuffix("/api/assistant/ws")
        async with aiohttp.ClientSession(base_url) as client:
            tokens_of = [target.token(first + n) for n in range(MEMBERS)]
            await asyncio.gather(*(converse_agui(client, token, Tally(), stop, 1) for token in tokens_of))
            cpu = cpu_seconds(target.pid)
            await asyncio.gather(
                *(converse_agui(client, token, Tally(), stop, ANSWERS) for token in tokens_of)
            )
            return (cpu_seconds(target.pid) - cpu) / (MEMBERS * ANSWERS)
    sockets = await asyncio.gather(*(target.open(first + n) for n in range(MEMBERS)))
    await asyncio.gather(*(converse(ws, Tally(), stop, 1) for ws in sockets))
    cpu = cpu_seconds(target.pid)
    await asyncio.gather(*(converse(ws, Tally(), stop, ANSWERS) for ws in sockets))
    cpu = cpu_seconds(target.pid) - cpu
    await asyncio.gather(*(ws.close() for ws in sockets))
    return cpu / (MEMBERS * ANSWERS)


async def main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {LOAD_CORE})
    base_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    model = ModelServers(base_env)
    await model.use(tokens=10, pace=0)
    env = server_env(base_env, model, Path(tempfile.mkdtemp(prefix="vernis-bench-")))
    try:
        with vernis_serve(env) as server:
            await server.ready()
            target = server.target()
            member = 0
            for _ in range(args.rounds):
                for agui in (False, True):
                    short = await per_answer(target, model, 10, agui, member)
                    long = await per_answer(target, model, 200, agui, member + 100)
                    member += 200
                    per_delta = (long - short) / 190
                    print(
                        f"{'AG-UI ' if agui else 'socket'}: 10 tokens {short * 1000:.2f} ms, 200 tokens "
                        f"{long * 1000:.2f} ms, per delta {per_delta * 1e6:.1f} µs, "
                        f"fixed {(short - 10 * per_delta) * 1000:.2f} ms",
                        flush=True,
                    )
    finally:
        model.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    uvloop.run(main(parser.parse_args()))
