"""The limits shared by several server instances, in Redis (SPEC §10): the per-member rate limit
(`RedisRateLimiter`) and socket cap (`RedisSocketCap`), the `RateLimiter` and `SocketCap` of
`vernis.limits.rate` across every instance.

Both count on Redis's clock (instances' clocks may differ), in one sorted set per key under the
deployment's prefix `P`: `Prate:<key>` and `Psockets:<member>`. Counting (`hit`, `acquire`) raises
`Unavailable` when Redis cannot be reached; releasing a socket ignores it (its entry lapses by
itself). The Lua scripts are the files of `lua/`, read once, at import.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Hashable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from vernis.exceptions import Unavailable
from vernis.settings import RateLimit
from vernis.store.redis import lua_script

__all__ = ["RedisRateLimiter", "RedisSocketCap"]

_RATE = lua_script("vernis.limits", "rate")
_SOCKET_ACQUIRE = lua_script("vernis.limits", "socket_acquire")
_SOCKET_REFRESH = lua_script("vernis.limits", "socket_refresh")


class RedisRateLimiter:
    """The per-member rate limit across instances: a sliding window per key in a sorted set."""

    def __init__(self, client: aioredis.Redis, limit: RateLimit, *, prefix: str = "vernis:") -> None:
        self.limit = limit
        self._prefix = prefix
        self._script = client.register_script(_RATE)
        self._window_ms = str(max(1, int(limit.seconds * 1000)))

    async def hit(self, key: Hashable) -> int | None:
        try:
            retry_after = int(
                await self._script(
                    keys=[f"{self._prefix}rate:{key}"],
                    args=[self.limit.count, self._window_ms, uuid.uuid4().hex],
                )
            )
        except (RedisError, OSError) as exc:
            raise Unavailable() from exc
        return None if retry_after < 0 else math.ceil(retry_after)


class RedisSocketCap:
    """The per-member socket cap across instances. An instance that dies leaves its sockets'
    entries behind until they lapse (`ttl`, refreshed while the socket lives)."""

    def __init__(
        self, client: aioredis.Redis, cap: int, *, prefix: str = "vernis:", ttl: float = 90.0
    ) -> None:
        self.cap = cap
        self._redis = client
        self._prefix = prefix
        self._ttl_ms = str(int(ttl * 1000))
        self._acquire = client.register_script(_SOCKET_ACQUIRE)
        self._refresh = client.register_script(_SOCKET_REFRESH)

    def _key(self, member_id: Hashable) -> str:
        return f"{self._prefix}sockets:{member_id}"

    async def acquire(self, member_id: Hashable, socket_id: str) -> bool:
        try:
            return bool(
                await self._acquire(keys=[self._key(member_id)], args=[self.cap, self._ttl_ms, socket_id])
            )
        except (RedisError, OSError) as exc:
            raise Unavailable() from exc

    async def release(self, member_id: Hashable, socket_id: str) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self._redis.zrem(self._key(member_id), socket_id)

    async def refresh(self, sockets: list[tuple[Hashable, str]]) -> None:
        for member_id, socket_id in sockets:
            await self._refresh(keys=[self._key(member_id)], args=[self._ttl_ms, socket_id])
