"""The background tasks a server runs beside its sockets: how they end."""

from __future__ import annotations

import asyncio

import pytest

from vernis.runtime import running


async def test_a_task_that_swallows_its_cancellation_does_not_hold_shutdown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A helper that ignores its cancellation is logged with its stack and left behind after `stop_seconds`; the block ends."""
    release = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()  # swallowed, as a library's lock re-acquire can

    async with running(stubborn(), "stubborn helper", stop_seconds=0.2):
        await asyncio.sleep(0)
    # The block ended while the helper still waits: shutdown did not wait for it.
    (left,) = [task for task in asyncio.all_tasks() if task.get_name() == "stubborn helper"]
    assert not left.done()
    assert "stubborn helper did not end within 0.2 s of its cancellation" in caplog.text
    assert "in stubborn" in caplog.text
    release.set()
    await asyncio.sleep(0)


async def test_a_task_that_ends_on_cancellation_is_awaited() -> None:
    """A well-behaved helper is cancelled and awaited: its clean-up has run when the block ends."""
    cleaned = []

    async def helper() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(True)

    async with running(helper(), "helper"):
        await asyncio.sleep(0)
    assert cleaned == [True]


async def test_a_task_that_failed_raises_its_error_on_the_way_out() -> None:
    """An error a helper ended with is raised when the block ends, not lost."""

    async def broken() -> None:
        raise LookupError("gone")

    with pytest.raises(LookupError, match="gone"):
        async with running(broken(), "broken"):
            await asyncio.sleep(0.01)
