"""Admission: the one path every answer takes before it may start (SPEC §4 steps 1-2, §15).

A new message, a regenerated answer, an edited message (and whatever else comes to start an answer)
all pass `Gate.admit`, in this order: the connection's rate limit, the member's limit across their
sockets and instances, the token quotas, then the conversation's lease (one answer at a time). A
refusal raises (`RateLimited`, `QuotaExceeded`, `ResponseInProgress`) before anything is stored or
any model is asked, and counts in `vernis_messages_refused` by reason. What was admitted is an
`Admission`: the lease's owner, which the answer holds and releases.

A conversation that does not exist yet (a pending one, stored only once the message is admitted) or
that rolls over takes its lease through `Admission.lease`, the same check with the same metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID, uuid4

from vernis.exceptions import QuotaExceeded, RateLimited, ResponseInProgress
from vernis.hub.base import EventHub
from vernis.identity.members import MemberInfo
from vernis.limits.quotas import QuotaService
from vernis.limits.rate import RateLimiter, SlidingWindow
from vernis.metrics import Metrics

__all__ = ["Admission", "Gate"]


@dataclass(eq=False)
class Gate:
    """The checks an answer passes before it starts, with the collaborators they need."""

    member_limiter: RateLimiter
    hub: EventHub
    metrics: Metrics
    quotas: QuotaService | None = None

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
    owner: str = field(default_factory=lambda: uuid4().hex)

    async def lease(self, conversation_id: UUID) -> None:
        """Take `conversation_id`'s lease (one answer at a time, across instances), or raise
        `ResponseInProgress`, counted."""
        if not await self.gate.hub.try_acquire(conversation_id, self.owner):
            self.gate._refused("response_in_progress")
            raise ResponseInProgress()

    async def release(self, conversation_id: UUID) -> None:
        """Give the lease back: the answer will not run after all."""
        await self.gate.hub.release(conversation_id, self.owner)
