"""The Redis hub's answer leases: one answer per conversation across every instance.

A lease is a key with an expiry, `P{c:C}:lease` = `<instance>:<owner>`, taken only if free
(`lua/acquire.lua`) and renewed, all of an instance's at once (`lua/renew.lua`), every third of its
time to live while the instance holds it. An instance that stops renewing (it died, or was out of
reach too long) loses it when it lapses; one that finds its lease taken over stops its answer.

Beside each lease, `P{c:C}:w` names the conversation's last writer: the value of the last lease
taken on it, or a one-off value after a write made without the lease (`touch`). Taking a lease
returns the previous last writer, so an instance knows whether the conversation's messages changed
since it last held the lease (`unchanged`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import cast
from uuid import UUID

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from vernis.store.redis import lua_script

__all__ = ["WRITER_SECONDS", "Leases"]

logger = logging.getLogger("vernis.hub.redis")

# How long an instance may keep using a conversation window it holds after its own last lease.
WRITER_SECONDS = 3600.0

_ACQUIRE = lua_script("vernis.hub", "acquire")
_RELEASE = lua_script("vernis.hub", "release")
_RENEW = lua_script("vernis.hub", "renew")


class Leases:
    """The leases this instance holds, and what it knew of each conversation's last writer when it
    took them. `key(conversation_id, suffix)` names a conversation's keys. Calls that reach Redis
    raise redis-py's errors (the hub turns them into `Unavailable`), except `release` and `touch`,
    which log them: a lease lapses by itself, and a missed `touch` costs one answer from an older
    window on another instance."""

    def __init__(
        self,
        client: aioredis.Redis,
        key: Callable[[UUID, str], str],
        *,
        instance: str,
        lease_seconds: float,
    ) -> None:
        self._redis = client
        self._key = key
        self._instance = instance
        self._lease_seconds = lease_seconds
        self._lease_ms = int(lease_seconds * 1000)
        self._writer_ms = int(WRITER_SECONDS * 1000)
        self._acquire_script = client.register_script(_ACQUIRE)
        self._release_script = client.register_script(_RELEASE)
        self._renew_script = client.register_script(_RENEW)
        self._leases: dict[UUID, str] = {}
        # Per lease held: the conversation's last writer before it was taken (`unchanged`).
        self._previous: dict[UUID, str] = {}
        # Leases whose answer's end is published: the publishing script releases them.
        self._ending: set[str] = set()

    async def acquire(self, conversation_id: UUID, owner: str) -> bool:
        """Take the conversation's lease for `owner`; False when another holds it."""
        value = f"{self._instance}:{owner}"
        previous = await self._acquire_script(
            keys=[self._key(conversation_id, "lease"), self._key(conversation_id, "w")],
            args=[value, self._lease_ms, self._writer_ms],
        )
        if previous is None:
            return False
        self._leases[conversation_id] = value
        self._previous[conversation_id] = previous
        return True

    def mark(self, conversation_id: UUID) -> str | None:
        return self._leases.get(conversation_id)

    def unchanged(self, conversation_id: UUID, mark: str | None) -> bool:
        return mark is not None and self._previous.get(conversation_id) == mark

    async def touch(self, conversation_id: UUID) -> None:
        try:
            await self._redis.set(
                self._key(conversation_id, "w"), f"touch:{uuid.uuid4().hex}", px=self._writer_ms
            )
        except RedisError as exc:
            # The write itself is stored; another instance may answer once from its older window.
            logger.warning("marking a conversation changed failed (%r)", exc)

    def ending(self, conversation_id: UUID) -> str:
        """The lease held on the conversation, for the publish script to release with its answer's
        end (`release` then leaves it to the script); '' when none is held."""
        value = self._leases.get(conversation_id, "")
        if value:
            self._ending.add(value)
        return value

    async def release(self, conversation_id: UUID, owner: str) -> None:
        value = f"{self._instance}:{owner}"
        if self._leases.get(conversation_id) == value:
            del self._leases[conversation_id]
            self._previous.pop(conversation_id, None)
        if value in self._ending:
            # Its answer's end, queued, releases it in the same step that publishes the end.
            self._ending.discard(value)
            return
        try:
            await self._release_script(keys=[self._key(conversation_id, "lease")], args=[value])
        except RedisError as exc:
            logger.warning("releasing a lease failed (%r); it lapses by itself", exc)

    async def holder(self, conversation_id: UUID) -> str | None:
        return cast(str | None, await self._redis.get(self._key(conversation_id, "lease")))

    async def run_renewal(self, lost: Callable[[UUID], None]) -> None:
        """Renew every lease held, every third of their time to live, for as long as it runs;
        `lost(conversation_id)` for each lease found taken over (its answer must stop writing)."""
        while True:
            await asyncio.sleep(self._lease_seconds / 3)
            held = list(self._leases.items())
            if not held:
                continue
            try:
                kept = await self._renew_script(
                    keys=[self._key(conversation_id, "lease") for conversation_id, _ in held],
                    args=[self._lease_ms, *(value for _, value in held)],
                )
            except (RedisError, OSError) as exc:
                logger.warning("renewing leases failed (%r); retrying", exc)
                continue
            for (conversation_id, value), renewed in zip(held, kept, strict=True):
                if not renewed and self._leases.get(conversation_id) == value:
                    # Taken over (this instance was out of reach too long): stop writing.
                    logger.error("lost the answer lease of a conversation; stopping its answer")
                    del self._leases[conversation_id]
                    self._previous.pop(conversation_id, None)
                    lost(conversation_id)
