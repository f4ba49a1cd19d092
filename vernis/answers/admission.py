"""Admission: the one path every answer takes before it may start (SPEC §4 steps 1-2, §15).

A new message, a regenerated answer, an edited message (and whatever else comes to start an answer)
all pass `Gate.admit`, in this order: the connection's rate limit, the member's limit across their
sockets and instances, the token quotas, then the conversation's lease (one answer at a time). A
refusal raises (`RateLimited`, `QuotaExceeded`, `ResponseInProgress`) before anything is stored or
any model is asked, and counts in `vernis_messages_refused` by reason. What was admitted is an
`Admission`: the lease's owner, which the answer holds and releases.

A conversation that does not exist yet (a pending one, stored only once the message is admitted) or
that rolls over takes its lease through `Admission.lease`, the same check with the same metric.

A new message's way on from admission to its answer's task is paced by the gate's `StartLane`: at
most `STARTS_AT_ONCE` at a time, the others in turn, none waiting longer than `STARTS_WAIT_SECONDS`
(a refusal never waits: admission comes first).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from uuid import UUID

from vernis.exceptions import QuotaExceeded, RateLimited, ResponseInProgress
from vernis.hub.base import EventHub
from vernis.identity.members import MemberInfo
from vernis.ids import random_hex
from vernis.limits.quotas import QuotaService
from vernis.limits.rate import RateLimiter, SlidingWindow
from vernis.metrics import Metrics

__all__ = ["STARTS_AT_ONCE", "STARTS_WAIT_SECONDS", "Admission", "Gate", "StartLane"]

# Answers on their way to start at once, at most; and how long, at most, another waits for its turn.
STARTS_AT_ONCE = 2
STARTS_WAIT_SECONDS = 0.25


class StartLane:
    """Paces the starts of answers: at most `slots` at a time (`turn()`), the others wait in the
    order they came, each at most `max_wait` seconds, then goes without a slot (`waited_out`
    counts those): a start waiting on something slow (a file's text, a slow database) holds the
    others up for that long at most.

    Why: an answer's fixed work is about a millisecond of the event loop (`bench/bench_server.py`'s
    fixed cost), much of it in a start's several slices between its awaits.
    When many come at once (a burst of messages, or the next messages of answers that ended
    together), the loop's queue fills with their slices, and every delta of the answers already
    streaming waits behind all of them. Paced, a delta waits behind the slices of a couple of starts,
    and the burst's answers spread out instead of staying in step (`bench/results/2026-11-server.md`).

    A slot paces only a start that yields while it holds it: today the guards' scan of the message
    (`GuardService.check_input`, on a worker thread, back when the loop gives the thread the GIL) is
    that yield; the SQLite writes after it run inline. A start that never yielded would take and
    give back its slot in one slice, and the starts queued behind it would run back to back again
    (what that did to the paced p99: `bench/results/2026-11-server.md`, session 22).
    """

    def __init__(self, slots: int = STARTS_AT_ONCE, max_wait: float = STARTS_WAIT_SECONDS) -> None:
        self._free = slots
        self._max_wait = max_wait
        # Each waiter's future: True once handed a slot, False once its wait is over without one.
        # Only pending ones are here: a waiter leaves when it gets its answer or is cancelled.
        self._waiting: collections.deque[asyncio.Future[bool]] = collections.deque()
        self.waited_out = 0

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """A slot for the body (or none, once the wait is over); given to the next waiter after."""
        held = await self._take()
        try:
            yield
        finally:
            if held:
                self._give()

    async def _take(self) -> bool:
        if self._free and not self._waiting:
            self._free -= 1
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiting.append(waiter)
        timer = loop.call_later(self._max_wait, self._wait_over, waiter)
        try:
            return await waiter
        except BaseException:  # cancelled: a slot handed to it meanwhile goes to the next one
            if waiter.done() and not waiter.cancelled():
                if waiter.result():
                    self._give()
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(waiter)
            raise
        finally:
            timer.cancel()

    def _wait_over(self, waiter: asyncio.Future[bool]) -> None:
        if not waiter.done():
            self._waiting.remove(waiter)
            self.waited_out += 1
            waiter.set_result(False)

    def _give(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():  # not cancelled while its task had yet to resume
                waiter.set_result(True)
                return
        self._free += 1


@dataclass(eq=False)
class Gate:
    """The checks an answer passes before it starts, with the collaborators they need."""

    member_limiter: RateLimiter
    hub: EventHub
    metrics: Metrics
    quotas: QuotaService | None = None
    lane: StartLane = field(default_factory=StartLane)

    async def admit(
        self, member: MemberInfo, rate: SlidingWindow | None, conversation_id: UUID | None
    ) -> Admission:
        """Admit an answer for `member`, asked on a connection whose own limit is `rate` (None for a
        request that has no connection), in `conversation_id` (None: not stored yet; lease it with
        `Admission.lease` once it is). Raises, counting the refusal, when a limit, a quota or the
        conversation's running answer says no; on success the connection's limit has counted it and
        the returned admission holds the lease of `conversation_id`."""
        # 1. Rate limits: the connection's, then the member's across all their sockets.
        retry_after = rate.peek() if rate is not None else None
        if retry_after is None:
            retry_after = await self.member_limiter.hit(member.id)
        if retry_after is not None:
            self._refused("rate_limited")
            raise RateLimited(retry_after)
        if rate is not None:
            rate.hit()
        # Token quotas (SPEC §15): over one, nothing is stored and no model is asked.
        if self.quotas is not None:
            try:
                await self.quotas.check(member)
            except QuotaExceeded:
                self._refused("quota_exceeded")
                raise
        admission = Admission(self)
        if conversation_id is not None:
            await admission.lease(conversation_id)
        return admission

    def _refused(self, reason: str) -> None:
        self.metrics.messages_refused.labels(reason).inc()


@dataclass(eq=False)
class Admission:
    """An admitted answer: `owner` is the lease holder it answers as."""

    gate: Gate
    owner: str = field(default_factory=random_hex)

    async def lease(self, conversation_id: UUID) -> None:
        """Take `conversation_id`'s lease (one answer at a time, across instances), or raise
        `ResponseInProgress`, counted."""
        if not await self.gate.hub.try_acquire(conversation_id, self.owner):
            self.gate._refused("response_in_progress")
            raise ResponseInProgress()

    async def release(self, conversation_id: UUID) -> None:
        """Give the lease back: the answer will not run after all."""
        await self.gate.hub.release(conversation_id, self.owner)
