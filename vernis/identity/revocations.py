"""A member's tokens revoked by the admin API (SPEC §15) reach every instance's sockets at once.

The revocation itself is stored (the member's `tokens_revoked_at`), so a handshake anywhere refuses
the old tokens and each instance's socket watch finds it within `VERNIS_AUTH_CHECK_INTERVAL`; this
module makes it immediate: `publish` tells every instance, and each one closes (4401) the sockets
of that member whose token was issued at or before the revocation. One process keeps it in memory
(`MemoryRevocations`); several instances use a Redis channel (`RedisRevocations`, `P:revoke`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol
from uuid import UUID

import redis.asyncio as aioredis
from redis.exceptions import RedisError

__all__ = ["MemoryRevocations", "RedisRevocations", "RevocationHandler", "Revocations"]

logger = logging.getLogger("vernis.revocations")

# (member id, revoked at: epoch seconds)
RevocationHandler = Callable[[UUID, float], None]


class Revocations(Protocol):
    def on_revoke(self, handler: RevocationHandler) -> None: ...

    async def publish(self, member_id: UUID, revoked_at: float) -> None:
        """Tell every instance (this one included); a failure is logged: the watch catches up."""
        ...

    async def run(self) -> None:
        """Receive other instances' revocations until cancelled."""
        ...


class MemoryRevocations:
    def __init__(self) -> None:
        self._handlers: list[RevocationHandler] = []

    def on_revoke(self, handler: RevocationHandler) -> None:
        self._handlers.append(handler)

    async def publish(self, member_id: UUID, revoked_at: float) -> None:
        _call(self._handlers, member_id, revoked_at)

    async def run(self) -> None:
        await asyncio.Event().wait()


class RedisRevocations:
    def __init__(self, client: aioredis.Redis, *, prefix: str = "vernis:") -> None:
        self._redis = client
        self._channel = f"{prefix}revoke"
        self._handlers: list[RevocationHandler] = []

    def on_revoke(self, handler: RevocationHandler) -> None:
        self._handlers.append(handler)

    async def publish(self, member_id: UUID, revoked_at: float) -> None:
        try:
            await self._redis.publish(self._channel, f"{member_id}\t{revoked_at!r}")
        except (RedisError, OSError) as exc:
            # Stored already: every instance's watch closes the sockets on its next round.
            logger.warning("publishing a revocation failed (%r); the socket watch will close them", exc)
            _call(self._handlers, member_id, revoked_at)

    async def run(self) -> None:
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(self._channel)
                async for message in pubsub.listen():
                    if message["type"] == "message":
                        member, _, revoked_at = str(message["data"]).partition("\t")
                        _call(self._handlers, UUID(member), float(revoked_at))
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                logger.warning("Redis revocation channel lost (%r); reconnecting", exc)
                await asyncio.sleep(0.5)
            except Exception:  # a malformed message must not end the channel for good
                logger.exception("a revocation message failed; reconnecting")
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]


def _call(handlers: list[RevocationHandler], member_id: UUID, revoked_at: float) -> None:
    for handler in handlers:
        try:
            handler(member_id, revoked_at)
        except Exception:
            logger.exception("a revocation handler failed")
