"""Test helpers shared by every layer: real servers on free loopback ports."""

from __future__ import annotations

import asyncio
import io
import random
import socket
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
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", **config))
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
