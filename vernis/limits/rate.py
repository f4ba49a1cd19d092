"""Sliding-window rate limits: per connection (plain objects owned by the connection) and per
member across all of that member's sockets (`MemberRateLimiter`, shared by the app).

`hit()` records an event if the limit allows it and returns None, or records nothing and returns
how many milliseconds until it would be allowed.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Protocol

from cachetools import TTLCache

from vernis.settings import RateLimit

__all__ = ["MemberRateLimiter", "MemorySocketCap", "RateLimiter", "SlidingWindow", "SocketCap"]


class SlidingWindow:
    __slots__ = ("_clock", "_hits", "limit")

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        # Made at the first event: most sockets sit idle, and two windows each cost a deque.
        self._hits: deque[float] | None = None
        self._clock = clock

    def hit(self) -> int | None:
        retry_after = self.peek()
        if retry_after is None:
            if self._hits is None:
                self._hits = deque()
            self._hits.append(self._clock())
        return retry_after

    def peek(self) -> int | None:
        """Like `hit()` without recording: would an event be refused now?"""
        hits = self._hits
        if not hits:
            return None
        now = self._clock()
        horizon = now - self.limit.seconds
        while hits and hits[0] <= horizon:
            hits.popleft()
        if len(hits) >= self.limit.count:
            return max(1, math.ceil((hits[0] - horizon) * 1000))
        return None


class MemberRateLimiter:
    """One sliding window per key (a member id), forgotten after a window of silence.

    Async so that a Redis-backed limiter shared by several instances fits the same call.
    """

    def __init__(
        self, limit: RateLimit, clock: Callable[[], float] = time.monotonic, max_keys: int = 100_000
    ) -> None:
        self.limit = limit
        self._clock = clock
        self._windows: TTLCache[Hashable, SlidingWindow] = TTLCache(
            maxsize=max_keys, ttl=limit.seconds, timer=clock
        )

    async def hit(self, key: Hashable) -> int | None:
        window = self._windows.get(key)
        if window is None:
            window = SlidingWindow(self.limit, self._clock)
        retry_after = window.hit()
        # Re-inserting refreshes the key's time to live.
        self._windows[key] = window
        return retry_after


class RateLimiter(Protocol):
    """A per-key limit shared by whatever shares it: this process (`MemberRateLimiter`) or every
    instance (`vernis.limits.redis.RedisRateLimiter`)."""

    async def hit(self, key: Hashable) -> int | None: ...


class SocketCap(Protocol):
    """At most `cap` sockets per member: on this instance, or across instances (Redis)."""

    async def acquire(self, member_id: Hashable, socket_id: str) -> bool: ...

    async def release(self, member_id: Hashable, socket_id: str) -> None: ...

    async def refresh(self, sockets: list[tuple[Hashable, str]]) -> None: ...


class MemorySocketCap:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._sockets: dict[Hashable, set[str]] = {}

    async def acquire(self, member_id: Hashable, socket_id: str) -> bool:
        sockets = self._sockets.setdefault(member_id, set())
        if len(sockets) >= self.cap:
            return False
        sockets.add(socket_id)
        return True

    async def release(self, member_id: Hashable, socket_id: str) -> None:
        sockets = self._sockets.get(member_id)
        if sockets is not None:
            sockets.discard(socket_id)
            if not sockets:
                del self._sockets[member_id]

    async def refresh(self, sockets: list[tuple[Hashable, str]]) -> None:
        return None
