"""Test helpers shared by every layer: real servers on free loopback ports."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import random
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvicorn

# Ports `free_port` draws from: below the kernel's ephemeral range, from which bind(0) and
# outgoing connections take theirs (on Linux, /proc/sys/net/ipv4/ip_local_port_range).
_CHOSEN_PORTS_LOW = 10_000
_random = random.SystemRandom()  # not the global `random`, which Hypothesis seeds in every process
# How long a server asked to stop may take: its graceful shutdown (a few seconds) and the app's
# lifespan end. A server still running past it has hung, and the test fails saying where.
STOP_DEADLINE = 30.0
# uvicorn's own logger, for what `TestServer` says in its place.
_uvicorn_logger = logging.getLogger("uvicorn.error")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A loopback port free now, for a server that binds it itself later (`run_server` needs none:
    it binds its own socket).

    Drawn at random below the ephemeral range: no server started with port 0 and no outgoing
    connection, in this test process or another (pytest-xdist), can take it before it is bound.
    """
    low = _ephemeral_low()
    for _ in range(100 if low - _CHOSEN_PORTS_LOW >= 1_000 else 0):
        port = _random.randrange(_CHOSEN_PORTS_LOW, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def _listening_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


class TestServer(uvicorn.Server):
    """uvicorn's server, stopping as soon as it is told to and its connections are gone.

    uvicorn's own looks at `should_exit` every 0.1 s, then gives the connections it asked to close
    0.1 s whatever they do, then looks for those left and for running tasks every 0.1 s, and a test
    stops two servers or more (what that cost: `bench/results/2026-11-suite.md`, session 29). Here
    `should_exit` wakes the main loop at once (an event set by its setter, so the signal handlers
    and tests that set the attribute work as with uvicorn's), and the shutdown waits for the
    connections and tasks themselves, looking every few milliseconds. The rest (the Date header
    renewed every second, the graceful timeout, the lifespan's end) is uvicorn's.
    """

    __test__ = False  # not a test class, for pytest

    _POLL = 0.005

    def __init__(self, config: uvicorn.Config) -> None:
        self._exit = asyncio.Event()
        super().__init__(config)

    @property
    def should_exit(self) -> bool:
        return self._exit.is_set()

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        if value:
            self._exit.set()
        else:
            self._exit.clear()

    async def main_loop(self) -> None:
        counter = 0  # `on_tick` renews the Date header when it is a multiple of 10: each second here
        while not await self.on_tick(counter):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), 1.0)
            counter += 10

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            await asyncio.wait_for(self._drained(), timeout=self.config.timeout_graceful_shutdown)
        except TimeoutError:
            _uvicorn_logger.error(
                "Cancel %s running task(s), timeout graceful shutdown exceeded", len(self.server_state.tasks)
            )
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def _drained(self) -> None:
        state = self.server_state
        # uvicorn's state is plain sets, with nothing to await: looked at, as uvicorn does.
        while (state.connections or state.tasks) and not self.force_exit:  # noqa: ASYNC110
            await asyncio.sleep(self._POLL)
        for server in self.servers:
            await server.wait_closed()


@asynccontextmanager
async def run_server(app: Any, **config: Any) -> AsyncIterator[uvicorn.Server]:
    """Serve `app` with a real uvicorn on a free loopback port, in the running event loop.

    Yields the started `uvicorn.Server`; its URL is `http://127.0.0.1:{server.config.port}`.
    Extra keyword arguments go to `uvicorn.Config` (ws limits, lifespan, ...); `port=` picks the port.
    The socket is bound here, before the server starts: the port cannot be taken by another test
    process between being chosen and being served (the suite runs in several, pytest-xdist).
    """
    sock = _listening_socket(config.pop("port", 0))
    config["port"] = sock.getsockname()[1]
    config.setdefault("log_level", "warning")
    config.setdefault("lifespan", "on")
    server = TestServer(uvicorn.Config(app, host="127.0.0.1", **config))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises the start-up error
                raise RuntimeError("server stopped before it started")
            await asyncio.sleep(0.01)
        yield server
    finally:
        server.should_exit = True
        try:
            await stopped(task)
        finally:
            sock.close()


async def stopped(task: asyncio.Task[Any]) -> None:
    """Wait for a server's `serve()` task to end, at most `STOP_DEADLINE` seconds; past it, fail
    with the stack of every task still running (which one would not stop), the server cancelled."""
    done, _ = await asyncio.wait({task}, timeout=STOP_DEADLINE)
    if done:
        task.result()
        return
    stacks = io.StringIO()
    for running in asyncio.all_tasks():
        if running is not asyncio.current_task():
            running.print_stack(limit=12, file=stacks)
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    raise AssertionError(f"the server did not stop within {STOP_DEADLINE:.0f} s; tasks:\n{stacks.getvalue()}")


def vernis_command(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`vernis ARGS` run in this process (`vernis.cli.main`) with exactly `env` as its environment, in
    `cwd`, its exit status and output returned as `subprocess.run` would; the environment, the
    working directory and the loggers `serve` configures are put back after.

    A process of its own would cost seconds of imports (more under coverage) for each command;
    keep those for the tests of the entry point itself and of what needs a process (a server).
    """
    from vernis.cli import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    loggers = [logging.getLogger(name) for name in ("vernis", "uvicorn")]
    saved_loggers = [(logger.handlers[:], logger.propagate, logger.level) for logger in loggers]
    # Text streams over bytes, as a process's are: a command may write to `sys.stdout.buffer`.
    stdout, stderr = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        for logger, (handlers, propagate, level) in zip(loggers, saved_loggers, strict=True):
            logger.handlers[:], logger.propagate, logger.level = handlers, propagate, level
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "vernis", *args], code, _text(stdout), _text(stderr)
    )


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    written = stream.buffer
    assert isinstance(written, io.BytesIO)
    return written.getvalue().decode()


def squash(kinds: list[str]) -> list[str]:
    """Event types with each run of `text_delta` (or `reasoning_delta`) collapsed into one: how many
    deltas carry a text depends on how the model's chunks were read (one delta per read)."""
    out: list[str] = []
    for kind in kinds:
        if not (kind in ("text_delta", "reasoning_delta") and out and out[-1] == kind):
            out.append(kind)
    return out
