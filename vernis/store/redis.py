"""Redis, the store several server instances share (SPEC §10): the one client they all use, made in
the app's lifespan, and how the Lua scripts that run in it are read.

Every Redis-backed part (the hub, the limits, the quotas, the revocations) takes the client made by
`redis_client` as a parameter; none makes its own. A part's Lua scripts are files beside it,
`<package>/lua/<name>.lua`, shipped as package data and read once by `lua_script`.
"""

from __future__ import annotations

from importlib.resources import files

import redis.asyncio as aioredis

__all__ = ["lua_script", "redis_client"]


def redis_client(url: str, max_connections: int = 32) -> aioredis.Redis:
    """A client with bounded timeouts (a Redis that stops answering fails a call, never hangs it)
    and a bounded pool that makes a caller wait for a free connection: hundreds of sockets asking
    at once share `max_connections`, rather than failing (`MaxConnectionsError`) or opening one each."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=5.0,
        decode_responses=True,
        # RESP2: under RESP3 (redis-py's default) every pub/sub message is a push, and redis-py's
        # push handler formats the whole message for a debug log line before looking at the level.
        protocol=2,
        socket_connect_timeout=2.0,
        socket_timeout=5.0,
        health_check_interval=15,
    )
    return aioredis.Redis.from_pool(pool)  # closing the client closes its pool


def lua_script(package: str, name: str) -> str:
    """The text of the script `<package>/lua/<name>.lua`, without the comment lines that open the file.

    Those lines state the script's contract (its keys, its arguments, its reply) for its reader; they
    are not sent to Redis, which loads and digests a script's whole text. A missing file raises at
    once, at the import of the module that names it.
    """
    text = files(package).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = 0
    while start < len(lines) and (lines[start].startswith("--") or not lines[start].strip()):
        start += 1
    return "".join(lines[start:])
