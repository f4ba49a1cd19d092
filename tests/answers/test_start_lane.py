"""The pacing of answer starts (`vernis.answers.admission.StartLane`): a few at a time, the others in
turn and in order, none held up past the lane's wait."""

from __future__ import annotations

import asyncio

import pytest

from vernis.answers.admission import StartLane


async def _holding(lane: StartLane, name: str, log: list[str], release: asyncio.Event) -> None:
    async with lane.turn():
        log.append(name)
        await release.wait()


async def _settled() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_starts_beyond_the_slots_wait_and_go_in_the_order_they_came() -> None:
    """Two slots: the third and fourth starts wait while two run, and each freed slot goes to the one that waited longest."""
    lane = StartLane(slots=2, max_wait=60)
    log: list[str] = []
    releases = {name: asyncio.Event() for name in "abcd"}
    tasks = {name: asyncio.create_task(_holding(lane, name, log, releases[name])) for name in "abcd"}
    await _settled()
    assert log == ["a", "b"]
    releases["b"].set()
    await _settled()
    assert log == ["a", "b", "c"]
    releases["a"].set()
    await _settled()
    assert log == ["a", "b", "c", "d"]
    for release in releases.values():
        release.set()
    await asyncio.gather(*tasks.values())
    assert lane.waited_out == 0
    async with lane.turn(), lane.turn():  # every slot came back
        assert lane._free == 0


async def test_a_start_waits_no_longer_than_the_lane_allows_and_holds_no_slot_then() -> None:
    """With every slot held by starts that do not end, a waiting start goes once the lane's wait is over, without a slot: the slots' holders, once done, still hand theirs on."""
    lane = StartLane(slots=1, max_wait=0.05)
    log: list[str] = []
    stuck = asyncio.Event()
    holder = asyncio.create_task(_holding(lane, "stuck", log, stuck))
    await _settled()
    async with asyncio.timeout(5):
        async with lane.turn():
            log.append("went")
    assert log == ["stuck", "went"]
    assert lane.waited_out == 1
    stuck.set()
    await holder
    assert lane._free == 1
    assert not lane._waiting


async def test_a_waiting_start_cancelled_gives_up_its_place_and_any_slot_handed_to_it() -> None:
    """A start cancelled while it waits leaves the queue, and a slot handed to it just before it could resume goes on to the next waiter."""
    lane = StartLane(slots=1, max_wait=60)
    log: list[str] = []
    releases = {name: asyncio.Event() for name in ("a", "b", "c")}
    first = asyncio.create_task(_holding(lane, "a", log, releases["a"]))
    await _settled()
    second = asyncio.create_task(_holding(lane, "b", log, releases["b"]))
    third = asyncio.create_task(_holding(lane, "c", log, releases["c"]))
    await _settled()
    releases["a"].set()
    await asyncio.sleep(0)  # "a" ends its turn and hands its slot to "b" ...
    assert first.done()
    second.cancel()  # ... which is cancelled before it resumes: the slot goes to "c"
    with pytest.raises(asyncio.CancelledError):
        await second
    await _settled()
    assert log == ["a", "c"]
    releases["c"].set()
    await third
    assert lane._free == 1
    assert not lane._waiting
