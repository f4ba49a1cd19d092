import asyncio
import faulthandler
import gc
import os
import sys
import threading
import time
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
    # The fault handler writes at most 100 threads, the newest first: the main thread, the oldest,
    # may be left out, and in an async test it only waits in `select`. So first, from Python, the
    # main thread and every unfinished asyncio task down its chain of awaits: where the test waits.
    python_dump = threading.Timer(max(timeout - 12, 1), _write_python_stacks, (file, item.nodeid))
    python_dump.daemon = True
    python_dump.start()
    faulthandler.dump_traceback_later(max(timeout - 10, 1), file=file)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()
        python_dump.cancel()


def _write_python_stacks(file: IO[str], nodeid: str) -> None:
    """The main thread's stack, then each unfinished asyncio task's chain of awaits, to `file`."""
    lines = [f"== {nodeid} still running at {time.strftime('%H:%M:%S')}: the main thread, then its tasks"]
    main = sys._current_frames().get(threading.main_thread().ident or 0)
    frame = main
    while frame is not None:
        lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        frame = frame.f_back
    # `type()`, not `isinstance`: an object's `__class__` may be a property (openai's lazy module
    # proxies import the whole client when asked), and this runs on a timer thread near the end.
    for task in [task for task in gc.get_objects() if issubclass(type(task), asyncio.Task)]:
        if task.done():
            continue
        lines.append(f"task {task.get_name()!r}:")
        awaited: object = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is not None:
                lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
            else:
                lines.append(f"  {awaited!r}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    file.write("\n".join(lines) + "\n")
    file.flush()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked `slow` first, in their order: pytest-xdist (`--dist load`) gives each worker
    a first chunk of a sixteenth of the suite, so they run one after the other on the first worker,
    from the start, while the others take the short tests, rather than alone at the end while the
    other workers wait. (All of them at once on every worker was slower: bench/results/2026-11-suite.md.)"""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
