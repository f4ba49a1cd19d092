import faulthandler
import os
from collections.abc import Generator
from pathlib import Path
from typing import IO

import pytest

pytest_plugins = [
    "tests.fixtures.db",
    "tests.fixtures.figures",
    "tests.fixtures.redis",
    "tests.fixtures.scripted",
    "tests.fixtures.server",
]

_CRASH_FILE = pytest.StashKey[IO[str]]()


def pytest_configure(config: pytest.Config) -> None:
    """Where `VERNIS_TEST_CRASH_DIR` names a directory (scripts/test sets it, with pytest's own
    fault handler off), each process of the run (each xdist worker) writes the fault handler's
    tracebacks to a file of its own there: a worker killed by a segfault or an abort leaves the
    stack it died in, which scripts/test prints after the run (a crashed worker's stderr is lost
    in the middle of the run's output)."""
    directory = os.environ.get("VERNIS_TEST_CRASH_DIR")
    if directory:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        file = open(Path(directory) / f"{worker}.txt", "w")  # noqa: SIM115 (open until the process ends)
        faulthandler.enable(file=file, all_threads=True)
        config.stash[_CRASH_FILE] = file


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """A test that hangs is ended by pytest-timeout (`timeout` in pyproject.toml), which ends its
    worker as a crash; its stacks go to the worker's stderr, lost in the run's output. So, with a
    crash file (above), every thread's stack is written there too, ten seconds before that end."""
    file = item.config.stash.get(_CRASH_FILE, None)
    marker = item.get_closest_marker("timeout")
    timeout = float(
        (marker.args[0] if marker.args else marker.kwargs["timeout"])
        if marker
        else item.config.getini("timeout")
    )
    if file is None or timeout <= 0:  # 0: no timeout (pytest-timeout's convention)
        return (yield)
    faulthandler.dump_traceback_later(max(timeout - 10, 1), file=file)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked `slow` first, in their order: pytest-xdist (`--dist load`) hands the first
    tests out one per worker in turn, so each long test then runs beside short ones from the start
    rather than alone at the end while the other workers wait."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
