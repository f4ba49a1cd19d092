"""The instructions an answer costs the server, counted by valgrind (callgrind), Vernis and the relay.

    python bench/bench_instructions.py [--answers 60] [--pace 0.01]

Time on a shared machine moves from one minute to the next; the instructions a process executes
for the same work barely do (how much, run after run: `bench/results/2026-11-server.md`, session
24). So a change too small to see in `bench_server.py`'s seconds is measured here, before and
after, in the same terms for Vernis and the floor:

- `vernis serve --demo` (SQLite, the demo's prompt and 40 tools), or `bench/relay.py`, runs under
  `valgrind --tool=callgrind` with its instrumentation off while it starts; `bench/model_server.py`
  answers in bursts (the whole answer as fast as the socket takes it), as `bench_server.py`'s burst
  and fixed-cost rows do; with `--pace`, one chunk every that many seconds, as its paced load does
  (each chunk a read of the model's stream and a frame of its own).
- One member on one socket asks 5 questions to warm up, then instrumentation goes on
  (`callgrind_control -i on`) for `--answers` more, one after the other: one client, so the
  server's work does not depend on how answers interleave.
- For answers of 10 and 100 tokens: instructions per answer, per extra token (their difference over
  90) and per answer at no token (the fixed part, what is left of a 10-token answer).

The figures are user-space instructions of all the server's threads (the kernel's work, cache misses
and waiting are not in them): a proxy for CPU that ranks changes, not CPU itself. Figures and their
dates go to `bench/results/`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench_server import (
    LOAD_CORE,
    ROOT,
    SERVER_CORE,
    ModelServers,
    Tally,
    Target,
    converse,
    free_port,
    process,
    server_env,
    tail,
    vernis_serve,
    wait_ready,
)

WARM_ANSWERS = 5
LENGTHS = (10, 100)
# Starting under valgrind is slower than `wait_ready`'s one wait allows for a loaded machine: it
# waits this many times.
READY_TRIES = 5


@dataclass
class Count:
    target: str
    tokens: int
    answers: int
    instructions: int

    @property
    def per_answer(self) -> float:
        return self.instructions / self.answers


def callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def totals(folder: Path) -> int:
    """The instructions of the dump taken after the answers (the parts before it hold none: the
    instrumentation was off)."""
    found = 0
    for dump in folder.glob("callgrind.out.*"):
        for line in dump.read_text().splitlines():
            if line.startswith("totals:"):
                found = max(found, int(line.split()[1]))
    return found


async def count(
    target: str, tokens: int, answers: int, model: ModelServers, base_env: dict[str, str], pace: float = 0
) -> Count:
    """`answers` answers of `tokens` tokens on a fresh server under callgrind."""
    await model.use(tokens=tokens, pace=pace)
    data = Path(tempfile.mkdtemp(prefix="vernis-bench-instr-"))
    valgrind = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={data}/callgrind.out.%p",
    ]
    # The dump is written before the server is stopped: a kill past `process`'s wait loses nothing.
    with contextlib.ExitStack() as stack:
        if target == "vernis":
            env = {**server_env(base_env, model, data), "PYTHONHASHSEED": "0"}
            vernis = stack.enter_context(vernis_serve(env, wrapper=valgrind))
            server, ws_url, ready = vernis.child, vernis.ws_url, vernis.ready_url
        else:
            port = free_port()
            relay = [*valgrind, sys.executable, "bench/relay.py", str(port), model.base_url]
            server = stack.enter_context(process(relay, {**base_env, "PYTHONHASHSEED": "0"}, SERVER_CORE))
            ws_url, ready = f"ws://127.0.0.1:{port}/ws", f"http://127.0.0.1:{port}/"
        for attempt in range(READY_TRIES):
            try:
                await wait_ready(ready, server)
                break
            except RuntimeError:
                if server.poll() is not None or attempt == READY_TRIES - 1:
                    raise
        client = Target(target, ws_url, server.pid, target == "vernis")
        ws = await client.open(0)
        tally, stop = Tally(), asyncio.Event()
        await converse(ws, tally, stop, WARM_ANSWERS)
        callgrind_control("--instr=on", str(server.pid))
        await converse(ws, tally, stop, answers)
        callgrind_control("--instr=off", str(server.pid))
        callgrind_control("--dump", str(server.pid))
        await ws.close()
    instructions = totals(data)
    if not instructions:
        raise RuntimeError(f"no instructions counted for {target}; the server's log: {tail(server)}")
    shutil.rmtree(data, ignore_errors=True)
    return Count(target, tokens, answers, instructions)


def table(counts: Sequence[Count], paced: bool) -> str:
    by = {(c.target, c.tokens): c.per_answer for c in counts}
    short, long = LENGTHS

    def figures(target: str) -> tuple[float, float, float, float]:
        per_token = (by[target, long] - by[target, short]) / (long - short)
        return by[target, short], by[target, long], per_token, by[target, short] - short * per_token

    ours, floor = figures("vernis"), figures("relay")
    labels = (
        f"an answer of {short} tokens",
        f"an answer of {long} tokens ({'the paced load' if paced else 'the burst'}'s)",
        "each token more",
        "an answer at no token (the fixed part)",
    )
    lines = ["| instructions | Vernis | bare relay | ratio |", "|---|---:|---:|---:|"]
    for label, vernis, relay in zip(labels, ours, floor, strict=True):
        unit, scale = ("K", 1e3) if label == "each token more" else ("M", 1e6)
        lines.append(
            f"| {label} | {vernis / scale:,.2f} {unit} | {relay / scale:,.2f} {unit} | {vernis / relay:.2f} |"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    for tool in ("valgrind", "callgrind_control", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench_instructions: {tool} is not installed (Debian: valgrind, util-linux)")
    os.sched_setaffinity(0, {LOAD_CORE})
    base_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    model = ModelServers(base_env)
    counts = []
    try:
        for target in ("vernis", "relay"):
            for tokens in LENGTHS:
                print(f"[{target}] {args.answers} answers of {tokens} tokens under callgrind", flush=True)
                counts.append(await count(target, tokens, args.answers, model, base_env, args.pace))
    finally:
        model.close()
    print()
    print(table(counts, args.pace > 0))


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, default=60, help="answers counted per server and length")
    parser.add_argument(
        "--pace",
        type=float,
        default=0,
        help="seconds between the model's chunks (0: bursts; paced, each chunk is a read and a frame of its own)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_arguments()))
