"""The scan workers: results and errors come back to the loop; a stuck scan does not hold the others up."""

from __future__ import annotations

import asyncio
import threading

import pytest

from vernis.guards import _worker
from vernis.guards._worker import ScanWorkers


async def test_result_and_error_reach_the_awaiting_coroutine() -> None:
    """A scan's value is the future's result; its exception is the future's exception."""
    workers = ScanWorkers(2)
    assert await workers.submit(lambda: 6 * 7) == 42

    def fails() -> int:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        await workers.submit(fails)


async def test_a_stuck_scan_is_replaced_and_threads_never_hold_the_process() -> None:
    """After a deadline is missed, another thread takes the next scans; worker threads are daemons."""
    workers = ScanWorkers(1)
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(workers.submit(release.wait), 0.05)
        workers.replace_stuck()
        assert await asyncio.wait_for(workers.submit(lambda: "next"), 10) == "next"
        assert all(thread.daemon for thread in threading.enumerate() if thread.name == "vernis-guard")
    finally:
        release.set()


async def test_idle_threads_end_and_the_next_scan_starts_them_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker thread idle for IDLE_SECONDS ends (an app's threads do not outlive it), and a later scan still runs."""
    monkeypatch.setattr(_worker, "IDLE_SECONDS", 0.05)
    workers = ScanWorkers(2)
    assert await workers.submit(lambda: "first") == "first"
    started = list(workers._threads)
    assert len(started) == 2
    for thread in started:
        await asyncio.to_thread(thread.join, 10)
    assert not any(thread.is_alive() for thread in started)
    assert workers._threads == []
    assert await asyncio.wait_for(workers.submit(lambda: "again"), 10) == "again"
