"""Token quotas (SPEC §15): per member per UTC day and per organization per UTC month.

Limits: `VERNIS_MEMBER_DAILY_TOKENS` / `VERNIS_ORG_MONTHLY_TOKENS`, else the configuration's
`[quotas]`; overridden per organization (`[quotas.organizations."<org>"]`) and, for the member's
daily quota, per role (`[quotas.roles.<role>]`, which wins). 0 means no quota.

Before each answer `QuotaService.check` compares what was used in the current windows with the
limits and raises `QuotaExceeded` when one is used up; an answer already running finishes, and
its tokens count. At an answer's end its tokens (`spent`) go to the usage table
(`vernis.limits.usage`), in the transaction of the answer's final row, then to the running
counters (`count`).

The counters sit behind one small interface (`QuotaCounter`): this process's memory
(`MemoryQuotaCounter`), or Redis (`RedisQuotaCounter`) with several instances, where every change
is one atomic script. A counter that does not exist yet (a new window, a restarted process, an
evicted key) starts from the usage table, so counts survive restarts; counts are only ever added
to counters that exist, so nothing is counted twice in the usual case (an answer ending while
another instance seeds the same counter can be counted twice: the error is on the safe side).
"""

from __future__ import annotations

import calendar
import functools
import logging
import math
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal, Protocol
from uuid import UUID

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from vernis.config import QuotasSection
from vernis.exceptions import QuotaExceeded, Unavailable
from vernis.identity.members import MemberInfo
from vernis.limits.usage import Spent, UsageStore

__all__ = [
    "MemoryQuotaCounter",
    "QuotaCounter",
    "QuotaLimits",
    "QuotaPolicy",
    "QuotaService",
    "QuotaStatus",
    "RedisQuotaCounter",
]

logger = logging.getLogger("vernis.quotas")

# A counter outlives its window by this much (a clock a little behind another instance's).
EXPIRY_SLACK = 3600


class QuotaCounter(Protocol):
    """Token counts by key, shared by whatever shares them: this process, or every instance."""

    async def get(self, keys: Sequence[str]) -> list[int | None]:
        """The counts, None for a key that does not exist."""
        ...

    async def seed(self, key: str, value: int, expires_at: float) -> int:
        """Create `key` with `value` unless it exists; the count it holds now."""
        ...

    async def add(self, items: Sequence[tuple[str, int]]) -> None:
        """Add to the keys that exist (the others start from the usage table when next read)."""
        ...


class MemoryQuotaCounter:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._values: dict[str, tuple[int, float]] = {}
        self._clock = clock

    async def get(self, keys: Sequence[str]) -> list[int | None]:
        now = self._clock()
        for key in [key for key, (_, expires) in self._values.items() if expires <= now]:
            del self._values[key]
        return [self._values[key][0] if key in self._values else None for key in keys]

    async def seed(self, key: str, value: int, expires_at: float) -> int:
        current = self._values.setdefault(key, (value, expires_at))
        return current[0]

    async def add(self, items: Sequence[tuple[str, int]]) -> None:
        for key, tokens in items:
            if key in self._values:
                value, expires = self._values[key]
                self._values[key] = (value + tokens, expires)


_SEED = """
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EXAT', ARGV[2])
return tonumber(redis.call('GET', KEYS[1]))
"""
# INCRBY keeps the key's expiry.
_ADD = """
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, ARGV[i]) end
end
return 0
"""


class RedisQuotaCounter:
    def __init__(self, client: aioredis.Redis) -> None:
        self._redis = client
        self._seed = client.register_script(_SEED)
        self._add = client.register_script(_ADD)

    async def get(self, keys: Sequence[str]) -> list[int | None]:
        try:
            values = await self._redis.mget(list(keys))
        except (RedisError, OSError) as exc:
            raise Unavailable() from exc
        return [None if value is None else int(value) for value in values]

    async def seed(self, key: str, value: int, expires_at: float) -> int:
        try:
            return int(await self._seed(keys=[key], args=[value, int(expires_at)]))
        except (RedisError, OSError) as exc:
            raise Unavailable() from exc

    async def add(self, items: Sequence[tuple[str, int]]) -> None:
        try:
            await self._add(keys=[key for key, _ in items], args=[tokens for _, tokens in items])
        except (RedisError, OSError) as exc:
            raise Unavailable() from exc


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """A member's limits; None: no quota."""

    member_daily: int | None
    org_monthly: int | None


class QuotaPolicy:
    def __init__(
        self,
        config: QuotasSection | None = None,
        *,
        member_daily_tokens: int | None = None,
        org_monthly_tokens: int | None = None,
    ) -> None:
        self._config = config or QuotasSection()
        self._member_daily = _first(member_daily_tokens, self._config.member_daily_tokens)
        self._org_monthly = _first(org_monthly_tokens, self._config.org_monthly_tokens)

    def limits(self, role: str, org: str) -> QuotaLimits:
        """The limits of a member of role `role` in the organization `org` (the host's id)."""
        organization = self._config.organizations.get(org)
        role_quota = self._config.roles.get(role)
        member_daily = _first(
            role_quota.member_daily_tokens if role_quota else None,
            organization.member_daily_tokens if organization else None,
            self._member_daily,
        )
        org_monthly = _first(organization.org_monthly_tokens if organization else None, self._org_monthly)
        return QuotaLimits(member_daily or None, org_monthly or None)


def _first(*values: int | None) -> int | None:
    return next((value for value in values if value is not None), None)


@dataclass(frozen=True, slots=True)
class Window:
    """A quota's current window: from `start` (a UTC day) until `reset_at`; `label` names it in its
    counter's key (the day, or the month)."""

    start: date
    reset_at: datetime
    label: str

    @classmethod
    def day(cls, now: datetime) -> Window:
        return _day(now.date())

    @classmethod
    def month(cls, now: datetime) -> Window:
        return _month(now.date().replace(day=1))


# Every answer counts its tokens in the windows of its day and month: each built once.
@functools.lru_cache(maxsize=4)
def _day(start: date) -> Window:
    reset_at = datetime(start.year, start.month, start.day, tzinfo=UTC) + timedelta(days=1)
    return Window(start, reset_at, start.isoformat())


@functools.lru_cache(maxsize=4)
def _month(start: date) -> Window:
    days = calendar.monthrange(start.year, start.month)[1]
    reset_at = datetime(start.year, start.month, 1, tzinfo=UTC) + timedelta(days=days)
    return Window(start, reset_at, f"{start:%Y-%m}")


@dataclass(frozen=True, slots=True)
class QuotaStatus:
    """One quota as a member sees it: its limit (None: none), what was used in its window (from
    `start`, a UTC day), when it resets."""

    limit: int | None
    used: int
    start: date
    reset_at: datetime


class QuotaService:
    def __init__(
        self,
        policy: QuotaPolicy,
        counter: QuotaCounter,
        usage: UsageStore,
        *,
        prefix: str = "",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.policy = policy
        self.usage = usage
        self._counter = counter
        self._prefix = prefix
        self._clock = clock

    def _member_key(self, member_id: UUID, window: Window) -> str:
        return f"{self._prefix}quota:member:{member_id}:{window.label}"

    def _org_key(self, organization_id: UUID, window: Window) -> str:
        return f"{self._prefix}quota:org:{organization_id}:{window.label}"

    async def check(self, member: MemberInfo) -> None:
        """Raise `QuotaExceeded` when one of the member's quotas is used up (the organization's
        first: it resets later); `Unavailable` when the shared counters cannot be read."""
        limits = self.policy.limits(member.role, member.org)
        if limits.member_daily is None and limits.org_monthly is None:
            return
        now = self._clock()
        if limits.org_monthly is not None:
            month = Window.month(now)
            key = self._org_key(member.organization_id, month)
            used = await self._used(
                key, month, self.usage.organization_tokens(member.organization_id, month.start)
            )
            if used >= limits.org_monthly:
                raise _exceeded("organization", limits.org_monthly, used, month.reset_at, now)
        if limits.member_daily is not None:
            day = Window.day(now)
            key = self._member_key(member.id, day)
            used = await self._used(key, day, self.usage.member_tokens(member.id, day.start))
            if used >= limits.member_daily:
                raise _exceeded("member", limits.member_daily, used, day.reset_at, now)

    async def status(self, member: MemberInfo) -> tuple[QuotaStatus, QuotaStatus]:
        """The member's day and their organization's month, read from the usage table."""
        limits = self.policy.limits(member.role, member.org)
        now = self._clock()
        day, month = Window.day(now), Window.month(now)
        return (
            QuotaStatus(
                limits.member_daily,
                await self.usage.member_tokens(member.id, day.start),
                day.start,
                day.reset_at,
            ),
            QuotaStatus(
                limits.org_monthly,
                await self.usage.organization_tokens(member.organization_id, month.start),
                month.start,
                month.reset_at,
            ),
        )

    def spent(
        self,
        *,
        organization_id: UUID,
        member_id: UUID,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
    ) -> Spent:
        """One answer's tokens on today's row of the usage table: `UsageStore.rows` writes them (in the
        answer's own transaction), then `count` adds them to the running counters."""
        day = Window.day(self._clock()).start
        return Spent(organization_id, member_id, day, model[:255], input_tokens, output_tokens, cached_tokens)

    async def count(self, spent: Spent) -> None:
        """Add tokens already in the usage table to the running counters (of their row's day)."""
        day, month = _day(spent.day), _month(spent.day.replace(day=1))
        tokens = spent.input_tokens + spent.output_tokens
        await self._counter.add(
            [
                (self._member_key(spent.member_id, day), tokens),
                (self._org_key(spent.organization_id, month), tokens),
            ]
        )

    async def _used(self, key: str, window: Window, stored: Coroutine[Any, Any, int]) -> int:
        """The counter's count, started from `stored` (the usage table's) when it does not exist."""
        try:
            (used,) = await self._counter.get([key])
            if used is not None:
                return used
            return await self._counter.seed(key, await stored, window.reset_at.timestamp() + EXPIRY_SLACK)
        finally:
            stored.close()  # not awaited when the counter exists


def _exceeded(
    scope: Literal["member", "organization"], limit: int, used: int, reset_at: datetime, now: datetime
) -> QuotaExceeded:
    if scope == "member":
        sentence = (
            f"You have used today's assistant allowance ({used:,} of {limit:,} tokens). "
            f"It renews at {reset_at:%H:%M} UTC."
        )
    else:
        sentence = (
            f"Your organization has used this month's assistant allowance ({used:,} of {limit:,} tokens). "
            f"It renews on {reset_at:%B} {reset_at.day} at {reset_at:%H:%M} UTC."
        )
    return QuotaExceeded(
        max(1, math.ceil((reset_at - now).total_seconds() * 1000)),
        scope=scope,
        limit=limit,
        used=used,
        reset_at=reset_at.isoformat().replace("+00:00", "Z"),
        public_message=sentence,
    )
