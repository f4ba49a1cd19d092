"""A run's stream (vernis.agui.run): while it waits with nothing queued, an event is translated and
written from its publish; what cannot be written at once waits in order; the run's end still
wakes the stream."""

from __future__ import annotations

import asyncio
import uuid

import orjson

from vernis.agui.run import Stream, follow
from vernis.agui.translate import RunTranslator

MESSAGE = str(uuid.uuid4())


def frame(seq: int, kind: str, **fields: object) -> str:
    return orjson.dumps({"type": kind, "seq": seq, **fields}).decode()


def kinds(text: str) -> list[str]:
    return [orjson.loads(line[6:])["type"] for line in text.splitlines() if line.startswith("data: ")]


async def test_events_go_out_from_their_publish_while_the_stream_waits() -> None:
    """With the stream waiting and nothing queued, each publish writes its SSE at once (the stream yields nothing for them), the answer's end wakes the stream so the run can finish, and nothing is written twice."""
    stream, translator = Stream(), RunTranslator("thread", "run")
    written: list[bytes] = []

    def write_now(data: bytes) -> bool:
        written.append(data)
        return True

    stream.write_now = write_now
    yielded: list[str] = []

    async def consume() -> None:
        async for chunk in follow(translator, stream):
            yielded.append(chunk)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)  # the stream waits
    stream.put(frame(1, "assistant_start", message_id=MESSAGE))
    stream.put(frame(2, "text_delta", content="Hello"))
    stream.put(frame(3, "text_delta", content=" there"))
    assert kinds(b"".join(written).decode()) == [
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
    ]
    stream.put(frame(4, "assistant_end", message_id=MESSAGE, stopped=False))
    await asyncio.wait_for(task, 5)
    assert translator.done
    assert yielded == []
    assert kinds(b"".join(written).decode())[-1] == "TEXT_MESSAGE_END"


async def test_what_cannot_be_written_at_once_waits_in_order() -> None:
    """When the client is not reading (the writer refuses), the translated chunk is queued and the stream yields it, and later events follow it in order, not past it."""
    stream, translator = Stream(), RunTranslator("thread", "run")
    reading = False
    written: list[bytes] = []

    def write_now(data: bytes) -> bool:
        if reading:
            written.append(data)
        return reading

    stream.write_now = write_now
    yielded: list[str] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for chunk in follow(translator, stream):
            yielded.append(chunk)
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    stream.put(frame(1, "assistant_start", message_id=MESSAGE))  # refused: queued, translated
    stream.put(frame(2, "text_delta", content="one"))  # something is queued: queued behind it
    reading = True
    await asyncio.wait_for(first.wait(), 5)
    assert kinds("".join(yielded)) == ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    assert written == []
    await asyncio.sleep(0)  # the stream waits again: the next goes out from its publish
    stream.put(frame(3, "text_delta", content="two"))
    assert kinds(b"".join(written).decode()) == ["TEXT_MESSAGE_CONTENT"]
    stream.put(frame(4, "assistant_end", message_id=MESSAGE, stopped=False))
    await asyncio.wait_for(task, 5)
    text = "".join(yielded) + b"".join(written).decode()
    assert [orjson.loads(line[6:]).get("delta") for line in text.splitlines() if "CONTENT" in line] == [
        "one",
        "two",
    ]
