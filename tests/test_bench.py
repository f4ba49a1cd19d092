"""The benchmarks run (bench/README.md): smoke runs of `bench/bench_server.py` and
`bench/bench_instances.py` at tiny sizes.

Benchmarks are not timed tests: this proves that every measurement runs against a real `vernis
serve` and prints its row, never what the figures are (on a machine busy with the rest of the suite
they mean nothing).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# A deadline, not a speed: the smoke run takes well under a minute alone, longer beside the suite.
SMOKE_DEADLINE = 200

# A fragment of each row of the table, whatever the figures.
ROWS = (
    "delivered of what the model wrote",
    "delivered of the nominal",
    "added latency p50",
    "added latency p99 ",
    "added latency p99.9",
    "burst, 50 x 100 tokens: deltas/s",
    "burst: the frames that carried them",
    "server CPU per paced delta",
    "fixed CPU per answer",
    "added time to first token",
    "memory per idle socket",
    "load core busy (clients and model)",
    "sockets cut at once",
    "reconnect storm: reconnect to caught up",
    "reconnect storm: server CPU from the cut to the last one back",
    "reconnect storm: events missed per running answer",
)

# The set-ups of `bench/bench_instances.py`'s table.
INSTANCE_ROWS = (
    "bare relay (the floor)",
    "memory, 1 instance",
    "Redis, 1 instance",
    "Redis, 1 instance, half the streams",
    "Redis, 2 instances",
)


def bench_environment() -> dict[str, str]:
    """This process's environment without Vernis settings or coverage start-up: the bench sets what
    its servers need, and measures them as users run them."""
    drop = ("VERNIS_", "COV_CORE_", "COVERAGE_PROCESS_", "OPENAI_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def smoke_run(script: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """`script --smoke`, run to its end and checked to have exited 0; its output and its table's lines."""
    done = subprocess.run(
        [sys.executable, script, "--smoke"],
        cwd=REPO,
        env=bench_environment(),
        capture_output=True,
        text=True,
        timeout=SMOKE_DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, [line for line in done.stdout.splitlines() if line.startswith("| ")]


@pytest.mark.slow
def test_bench_server_smoke_run_prints_every_row() -> None:
    """`bench/bench_server.py --smoke` runs every measurement (paced, burst, fixed cost, first token, idle sockets, the reconnect storm, the relay) and prints each row of the table."""
    done, table = smoke_run("bench/bench_server.py")
    for fragment in ROWS:
        assert any(fragment in line for line in table), f"no row {fragment!r} in:\n{done.stdout}"
    assert "Reconnect storm: " in done.stdout


@pytest.mark.slow
@pytest.mark.postgres
def test_bench_instances_smoke_run_prints_every_set_up() -> None:
    """`bench/bench_instances.py --smoke` (PostgreSQL, its own redis-server, three `vernis serve` and the relay) measures every set-up once and prints each row of its table and its ratios."""
    done, table = smoke_run("bench/bench_instances.py")
    for label in INSTANCE_ROWS:
        assert any(line.startswith(f"| {label} |") for line in table), f"no row {label!r} in:\n{done.stdout}"
    assert "Redis mode / memory mode, CPU per delta: " in done.stdout


@pytest.mark.parametrize("options", [[], ["--smoke"]], ids=["full", "smoke"])
def test_every_option_the_server_bench_reads_is_set(options: list[str]) -> None:
    """Every `args.<name>` bench_server.py reads has a value, in a full run and in a smoke run (a size set only for smoke runs once broke the full one)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import bench_server
    finally:
        sys.path.remove(str(REPO / "bench"))
    source = (REPO / "bench" / "bench_server.py").read_text()
    read = set(re.findall(r"\bargs\.([a-z_]+)", source))
    assert read, "the bench reads its options as args.<name>"
    parsed = vars(bench_server.parse_arguments(options))
    assert read <= parsed.keys(), f"read but never set: {sorted(read - parsed.keys())}"
