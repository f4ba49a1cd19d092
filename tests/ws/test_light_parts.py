"""The receive queue and the writability flag of Vernis's protocol (vernis.ws.transport): uvicorn
uses them as an `asyncio.Queue` and an `asyncio.Event`, and they must behave as those do."""

from __future__ import annotations

import asyncio

import pytest

from vernis.ws.transport import Flag, Inbox


async def test_the_inbox_hands_out_messages_in_order() -> None:
    """Messages put before a read come out in the order they were put."""
    inbox: Inbox[int] = Inbox()
    for n in range(3):
        inbox.put_nowait(n)
    assert not inbox.empty()
    assert [await inbox.get() for _ in range(3)] == [0, 1, 2]
    assert inbox.empty()


async def test_a_read_of_an_empty_inbox_waits_for_the_next_message() -> None:
    """A reader waiting on an empty inbox gets the message put after it began to wait."""
    inbox: Inbox[str] = Inbox()
    reader = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    assert not reader.done()
    inbox.put_nowait("hello")
    assert await asyncio.wait_for(reader, 1) == "hello"


async def test_a_cancelled_read_leaves_the_inbox_usable() -> None:
    """A reader cancelled while it waits loses nothing: the next reader gets the next message."""
    inbox: Inbox[str] = Inbox()
    reader = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    inbox.put_nowait("kept")
    assert await asyncio.wait_for(inbox.get(), 1) == "kept"


async def test_a_second_reader_at_once_is_refused() -> None:
    """The inbox has one reader (the app's receive): a second one waiting at the same time is an error, not a lost wake-up."""
    inbox: Inbox[str] = Inbox()
    first = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="two readers"):
        await inbox.get()
    inbox.put_nowait("for the first")
    assert await asyncio.wait_for(first, 1) == "for the first"


async def test_the_flag_starts_set_and_a_wait_on_it_returns_at_once() -> None:
    """Like uvicorn's `writable` event after its `set()`: a socket is writable from the start."""
    flag = Flag()
    assert flag.is_set()
    await asyncio.wait_for(flag.wait(), 1)


async def test_every_waiter_wakes_when_the_flag_is_set_again() -> None:
    """Two senders waiting on a cleared flag (the peer fell behind) both go on once it is set."""
    flag = Flag()
    flag.clear()
    waiters = [asyncio.create_task(flag.wait()) for _ in range(2)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    flag.set()
    await asyncio.wait_for(asyncio.gather(*waiters), 1)
    assert flag.is_set()


async def test_a_cancelled_waiter_does_not_stop_the_others() -> None:
    """A waiter cancelled while the flag is clear is forgotten; the other still wakes on `set()`."""
    flag = Flag()
    flag.clear()
    cancelled, kept = asyncio.create_task(flag.wait()), asyncio.create_task(flag.wait())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    flag.set()
    await asyncio.wait_for(kept, 1)
