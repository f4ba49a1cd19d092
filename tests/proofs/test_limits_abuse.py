"""Limits under abuse (SPEC §2): a thousand sockets at once from one member, a client that never
reads, frames at the size limit and one byte either side."""

from __future__ import annotations

import asyncio
import gc
import socket
from contextlib import AsyncExitStack

import pytest
from websockets.exceptions import InvalidStatus

from tests.e2e.test_transport import closed_with, user_message_frame
from tests.fixtures.server import Client, Vernis, VernisFactory, text_of
from tests.proofs.conftest import Figures
from vernis.model.scripted import Reply
from vernis.ws.connection import SEND_QUEUE_FRAMES, Connection

MAX_FRAME = 65536
CAP = 16


async def still_open(client: Client) -> None:
    """The socket answers a ping (past events still on their way, a title say)."""
    await client.send("ping")
    await client.until("pong")


async def open_one(vernis: Vernis, held: AsyncExitStack) -> Client | int:
    """A socket opened and held by `held` (its opening replay read), or the HTTP status that refused it."""
    try:
        # Generous deadlines: a thousand handshakes at once queue up on a busy machine, and so do
        # the opening replays of the sockets accepted.
        client = await held.enter_async_context(vernis.connect(open_timeout=60))
    except InvalidStatus as refused:
        return refused.response.status_code
    await client.until("history_end", timeout=60)
    return client


@pytest.mark.slow
@pytest.mark.parametrize(
    "sockets", [pytest.param(1000, id="1000"), pytest.param(3000, id="3000", marks=pytest.mark.long)]
)
async def test_a_thousand_sockets_at_once_from_one_member_hold_the_cap(
    vernis_factory: VernisFactory, figures: Figures, sockets: int
) -> None:
    """1,000 sockets opened at once by one member: exactly the cap (16) are accepted, every other one is refused with HTTP 403, other members still connect, and the slots come back."""
    async with vernis_factory(max_sockets_per_member=CAP) as vernis:
        async with AsyncExitStack() as held:
            outcomes = await asyncio.gather(*(open_one(vernis, held) for _ in range(sockets)))
            accepted = [o for o in outcomes if isinstance(o, Client)]
            refused = [o for o in outcomes if not isinstance(o, Client)]
            assert len(accepted) == CAP
            assert set(refused) == {403}
            async with vernis.opened("owner@acme.test") as other:
                await still_open(other)
            for client in accepted:
                await still_open(client)
        # Every slot is given back once the sockets are gone: the member can fill the cap again.
        async with AsyncExitStack() as held, asyncio.timeout(10):
            again = 0
            while again < CAP:
                if isinstance(await open_one(vernis, held), Client):
                    again += 1
                else:
                    await asyncio.sleep(0.05)
    figures(sockets=sockets, accepted=len(accepted), refused_403=len(refused))


def live_connections() -> list[Connection]:
    # `type()`, not isinstance(): the heap holds weak proxies, some of them dead.
    return [o for o in gc.get_objects() if type(o) is Connection]


@pytest.mark.parametrize(
    "words",
    [pytest.param(20000, id="20k-words"), pytest.param(60000, id="60k-words", marks=pytest.mark.long)],
)
async def test_a_client_that_never_reads_is_bounded_and_harms_no_one(
    vernis: Vernis, figures: Figures, words: int
) -> None:
    """A slowloris client that asks for a long answer and never reads: the server holds at most its bounded queue for it and drops it, while another member's answer streams whole."""
    long_answer = " ".join(f"w{n:05d}-{'x' * 300}" for n in range(words))
    vernis.scripted.add(Reply(long_answer, chunk_delay=0), match="flood")
    vernis.scripted.add(Reply("a short answer for someone else"), match="hello")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", vernis.port))
    async with vernis.connect(sock=sock, max_queue=1) as slow:
        await slow.until("history_end")
        await slow.send("user_message", content="flood please")
        await slow.until("text_delta")
        # From here on the slow client reads nothing at all.
        largest = 0
        # A deadline, not a speed: the server shares this test's process, and under coverage on a busy
        # machine the flood's turns of the loop are slow; what counts is that the other member gets in
        # and gets the whole answer.
        async with vernis.opened("owner@acme.test", open_timeout=30) as other:
            events = await other.answer("hello", timeout=30)
            assert text_of(events) == "a short answer for someone else"
            async with asyncio.timeout(60):
                while True:
                    mine = [c for c in live_connections() if c.identity.member.email == "member@acme.test"]
                    queued = [len(c._frames or ()) for c in mine]
                    largest = max([largest, *queued])
                    assert all(n <= SEND_QUEUE_FRAMES for n in queued), queued
                    if not mine or all(c.state.value != "open" for c in mine):
                        break
                    await asyncio.sleep(0.1)
            await still_open(other)
        slow.ws.transport.abort()
    figures(answer_bytes=len(long_answer), largest_queue_frames=largest, cap_frames=SEND_QUEUE_FRAMES)


@pytest.mark.parametrize("delta", [-1, 0, 1])
@pytest.mark.parametrize("kind", ["text", "binary"])
async def test_frames_at_the_size_limit_plus_or_minus_one(vernis: Vernis, delta: int, kind: str) -> None:
    """Frames of 64 KiB - 1 and exactly 64 KiB are read and answered (message_too_long / invalid_message) on an open socket; 64 KiB + 1 closes it with 1009."""
    frame = user_message_frame(MAX_FRAME + delta)
    async with vernis.opened() as client:
        await client.send_raw(frame if kind == "text" else frame.encode())
        if delta > 0:
            assert await closed_with(client) == 1009
            return
        (error,) = await client.expect("error")
        assert error["code"] == ("message_too_long" if kind == "text" else "invalid_message")
        await still_open(client)
    async with vernis.opened() as client:
        await still_open(client)


async def test_a_flood_of_malformed_frames_is_answered_then_closed_with_1008(vernis: Vernis) -> None:
    """60 malformed frames within 10 s each get invalid_message; the 61st closes the socket with 1008 (flood), and the member's next socket works."""
    async with vernis.opened() as client:
        for n in range(60):
            await client.send_raw(f'{{"type": "nonsense-{n}"')
        errors = [await client.recv() for _ in range(60)]
        assert {(e["type"], e["code"]) for e in errors} == {("error", "invalid_message")}
        await client.send_raw(b"\x00binary")
        assert await closed_with(client) == 1008
    async with vernis.opened() as client:
        await still_open(client)
