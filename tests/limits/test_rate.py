"""Sliding-window rate limits, on a fake clock."""

from __future__ import annotations

from vernis.limits.rate import MemberRateLimiter, SlidingWindow
from vernis.settings import RateLimit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_eleventh_hit_in_window_is_refused_with_retry_after() -> None:
    """Ten hits in 60 s pass; the eleventh is refused with the ms until the oldest leaves the window."""
    clock = Clock()
    window = SlidingWindow(RateLimit(10, 60), clock)
    for _ in range(10):
        assert window.hit() is None
        clock.now += 1
    assert window.hit() == 50_000
    clock.now += 50
    assert window.hit() is None


def test_refused_hits_are_not_counted() -> None:
    """A refused hit records nothing, so hammering does not extend the wait."""
    clock = Clock()
    window = SlidingWindow(RateLimit(2, 10), clock)
    window.hit()
    window.hit()
    for _ in range(5):
        assert window.hit() == 10_000
    clock.now += 10
    assert window.peek() is None
    assert window.hit() is None


async def test_member_limit_is_per_key() -> None:
    """Each member has their own window; one member's traffic does not limit another."""
    clock = Clock()
    limiter = MemberRateLimiter(RateLimit(2, 60), clock)
    assert await limiter.hit("a") is None
    assert await limiter.hit("a") is None
    assert await limiter.hit("a") == 60_000
    assert await limiter.hit("b") is None


def test_rate_limit_parses_setting_text() -> None:
    """`N/SECONDS` is the setting syntax; anything else is a clear error."""
    limit = RateLimit.parse("10/60")
    assert (limit.count, limit.seconds) == (10, 60.0)
    for bad in ("10", "a/b", "0/60", "10/0"):
        try:
            RateLimit.parse(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
