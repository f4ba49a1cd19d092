"""A few daemon threads that run scans off the event loop.

Not a `ThreadPoolExecutor`: its threads are joined when the interpreter exits, so a scan stuck in
a pathological input (the very case the deadline is for) would keep a stopping server alive, and
even idle ones delayed `vernis serve`'s exit after SIGTERM. Daemon threads never hold the process.

A thread idle for `IDLE_SECONDS` ends (the next scan starts one again): an app that stopped, or many
apps in one process (tests), leave no threads behind for long, but those still in a stuck scan.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ScanWorkers"]

_T = TypeVar("_T")
_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]

IDLE_SECONDS = 30.0


class ScanWorkers:
    def __init__(self, size: int, most: int | None = None) -> None:
        self._size = size
        self._most = most if most is not None else 4 * size
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, work: Callable[[], _T]) -> asyncio.Future[_T]:
        """Run `work` in a worker thread; the future (of the running loop) gets its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        # Queued before the threads are counted: a thread leaving idle meanwhile sees it (`_run`).
        self._jobs.put((work, loop, future))
        self._start()
        return future

    def replace_stuck(self) -> None:
        """One more thread, in place of one whose scan missed its deadline and may never end (up to
        a bound: past it, scans wait their turn and fail closed at their deadline)."""
        with self._lock:
            self._size = min(self._size + 1, self._most)

    def _start(self) -> None:
        if len(self._threads) >= self._size:
            return
        with self._lock:
            while len(self._threads) < self._size:
                thread = threading.Thread(target=self._run, name="vernis-guard", daemon=True)
                thread.start()
                self._threads.append(thread)

    def _run(self) -> None:
        while True:
            try:
                work, loop, future = self._jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    # Out of the count first, then a last look: `submit` queues before it counts
                    # (without the lock), so a job it queued is seen here or counted without us.
                    self._threads.remove(threading.current_thread())
                    if self._jobs.empty():
                        return
                    self._threads.append(threading.current_thread())  # a job came: stay for it
                continue
            result: Any = None
            error: BaseException | None = None
            try:
                result = work()
            except BaseException as exc:  # handed to the awaiting coroutine, which fails closed
                error = exc
            # The loop may have closed meanwhile (a scan that outlived its deadline and its app).
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # the awaiting side gave up (deadline) or was cancelled
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
