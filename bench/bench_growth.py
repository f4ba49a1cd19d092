"""How an answer's cost grows with the conversation it belongs to.

    python bench/bench_growth.py [--clients 200] [--rounds 3]

`vernis serve --demo` runs pinned to core 0 (SQLite, the demo's prompt and 40 CRM tools), the model
server (`bench/model_server.py`, answers of 50 tokens as fast as the socket takes them) and the
clients on core 1, as in `bench_server.py`. Each client is its own member with its own conversation.

A round: every client asks its first question (the answer is message 2, in a conversation created
for it and titled after it: measured) and a second (message 4: measured), then grows its
conversation to 48 messages: 22 more exchanges, 10 of them with a `search_contacts` call and its
result (the message says "look it up"); then asks once more (the answer is message 50: measured);
then goes on to message 100 (past a rollover at 50 stored messages and a compaction of its window)
and asks once more (measured). Every measured answer has the same shape: 50 tokens of text, no tool
call. The figure is the server's CPU (from /proc) for all clients' measured answer, divided by the
number of clients, and the ratio of each length to messages 2 and 4.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import orjson
import uvloop
from bench_server import (
    ROOT,
    SERVER_CORE,
    ModelServers,
    Target,
    cpu_model,
    cpu_seconds,
    server_env,
    vernis_serve,
)
from websockets.asyncio.client import ClientConnection

# Of the 22 exchanges that grow a conversation from message 4 to 48, these ten ask for a tool call.
TOOL_TURNS = frozenset(range(4, 24, 2))


async def ask(ws: ClientConnection, content: str) -> None:
    """One message and its answer, read to `assistant_end`."""
    await ws.send(orjson.dumps({"type": "user_message", "content": content}).decode())
    while True:
        event = orjson.loads(await ws.recv())
        if event["type"] == "assistant_end":
            return
        if event["type"] == "error":
            raise RuntimeError(event)


async def measured(target: Target, sockets: list[ClientConnection], turn: int) -> float:
    """Server CPU per answer, ms, for one plain question on every socket at once."""
    before = cpu_seconds(target.pid)
    await asyncio.gather(*(ask(ws, f"Question {turn}: how are my contacts doing?") for ws in sockets))
    return (cpu_seconds(target.pid) - before) / len(sockets) * 1000


async def grow(sockets: list[ClientConnection], turns: range) -> None:
    for turn in turns:
        ask_for = "please look it up" if turn % 24 in TOOL_TURNS else "what do you make of it"
        await asyncio.gather(*(ask(ws, f"Question {turn}: {ask_for}?") for ws in sockets))


async def round_(target: Target, clients: int, first_member: int) -> tuple[float, float, float, float]:
    sockets = await asyncio.gather(*(target.open(first_member + n) for n in range(clients)))
    try:
        at_2 = await measured(target, sockets, 1)
        at_4 = await measured(target, sockets, 2)
        await grow(sockets, range(3, 25))  # messages 5 to 48
        at_50 = await measured(target, sockets, 25)
        await grow(sockets, range(26, 50))  # messages 51 to 98: a rollover, a compaction
        at_100 = await measured(target, sockets, 50)
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    return at_2, at_4, at_50, at_100


async def main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {1 - SERVER_CORE})
    data = Path(tempfile.mkdtemp(prefix="vernis-bench-"))
    base_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    model = ModelServers(base_env)
    await model.use(tokens=50, pace=0)
    env = server_env(base_env, model, data)
    rows: list[tuple[float, float, float, float]] = []
    try:
        with vernis_serve(env) as server:
            await server.ready()
            target = server.target()
            await round_(target, 20, 900_000)  # warm: imports, caches, the first compactions
            for number in range(args.rounds):
                rows.append(await round_(target, args.clients, number * 10_000))
                print(
                    f"round {number + 1}: "
                    + " / ".join(f"{ms:.2f}" for ms in rows[-1])
                    + " ms per answer at message 2 / 4 / 50 / 100",
                    flush=True,
                )
    finally:
        model.close()
    at_2, at_4, at_50, at_100 = (median(column) for column in zip(*rows, strict=True))
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({cpu_model()}), "
        f"Python {sys.version.split()[0]}, {args.clients} clients, median of {args.rounds} rounds\n"
    )
    print("| the answer is message | server CPU per answer | vs message 2 | vs message 4 |")
    print("|---|---:|---:|---:|")
    print(f"| 2 (a new conversation: created, then titled) | {at_2:.2f} ms | 1.00 | {at_2 / at_4:.2f} |")
    print(f"| 4 | {at_4:.2f} ms | {at_4 / at_2:.2f} | 1.00 |")
    for label, ms in (
        ("50 (48 before it, 10 tool results)", at_50),
        ("100 (after a rollover, compacted)", at_100),
    ):
        print(f"| {label} | {ms:.2f} ms | {ms / at_2:.2f} | {ms / at_4:.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=200, help="conversations measured at once")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each with new conversations")
    # The load side is the measuring instrument: no collector pauses of its own in the figures.
    gc.disable()
    uvloop.run(main(parser.parse_args()))
