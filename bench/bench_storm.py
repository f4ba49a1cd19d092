"""The load side of `bench_server.py`'s measurements that need many sockets: a worker process on the
load core, driven by `bench_server.py` over its stdin and stdout (one JSON object a line each way).

    python bench/bench_storm.py idle URL --first F --count C [--plain]
    python bench/bench_storm.py storm URL --first F --count C --streaming K --window W --tokens T --seed S

Every socket is its own member (`bench-<n>`, a host token signed with `BENCH_SECRET` from the
environment, owner of the demo organization), a real `websockets` client. Several workers share a
load when one process cannot hold it: a process may hold no more descriptors than its hard limit
(20,000 on the machine of the recorded runs, which even root cannot raise there), and the idle
figure wants 20,000 sockets.

`idle`: opens `count` sockets (250 at a time, each read to `history_end` unless `--plain`, for the
bare relay), replies `{"ready": count}`, holds them until the command `close` (or the end of stdin),
closes them and replies `{"closed": count}`.

`storm`, one command at a time:
- `setup`: every member opens a socket, sends one message and reads its answer to `assistant_end`
  and the conversation's `title_updated` (so that nothing of this exchange is still to come when
  the sockets are cut); then a reader per socket records every event. Replies `{"ready": count}`.
- `stream`: the first `streaming` members send a second message and wait for its first
  `text_delta`: their answers are running. Replies `{"streaming": k}`.
- `cut`: every socket is aborted at once from this side, RST and no close frame (SO_LINGER 0 and
  `transport.abort()`), as when a network path or a load balancer drops them. Each member then
  reconnects after its own delay, uniform in [0, `window`) from the cut, with `conversation_id` and
  `after_seq` (the last seq it saw) in the query and the token it connected with (a page keeps
  its token), and sends `ping` at once. Replies `{"back": count, "cut_us": how long the cut took,
  "cut_at_us": when it began}` when every member is back (or failed), then, once every running
  answer has reached `assistant_end`, `{"results": [...]}`, one object a member (`Member.result`).
- `close`: closes every socket and exits.

Caught up: a resume inside the server's replay window sends `conversation_loaded` (`resumed: true`)
and exactly the missed events, and no `history_end` (SPEC §4; `history_end` ends a plain load's
history). The server reads a socket's commands only once it has queued what the socket opened with
(`vernis/ws/connection.py`, `serve`), and sends every frame of a socket in order, so the `pong`
answering the `ping` sent with the reconnect comes right after the last missed event: its receipt is
the moment the client is caught up, the resume's equivalent of a load's `history_end`. The figure is
the time from the reconnect attempt (before the TCP connect) to that `pong`.

Exactly what it missed, checked for every member: the seqs it received before the cut were
consecutive; `conversation_loaded` says `resumed: true`; the seqs received after the reconnect (the missed ones and then the live rest of a running answer) are
consecutive from `after_seq + 1`, so none is missing, repeated or at or before `after_seq`; for a
member whose answer was running, the answer's text before and after the cut holds each of the
model's `--tokens` stamps once, in order, and ends with `assistant_end` (`bench_server.py` compares
it with the stored message too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import os
import random
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import uvloop
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from vernis.identity import issue_token

# Sockets opened at once: the server's listen backlog and the handshakes' CPU take them in batches.
OPEN_BATCH = 250
# Members in their set-up exchange at once: the server answers them all, and its model client holds
# one connection per answer.
SETUP_CONCURRENCY = 100
# How long anything the server should answer may take before the worker gives up on it: generous,
# for a server saturated by the storm; a member that waits this long is reported, not waited for.
PATIENCE = 120.0
# The storm's two messages; the model server answers every message alike.
SETUP_MESSAGE = '{"type": "user_message", "content": "hello"}'
STORM_MESSAGE = '{"type": "user_message", "content": "How are my contacts doing this week?"}'
PING = '{"type": "ping"}'


def now_us() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def token(n: int) -> str:
    """Member n's host token (as `bench_server.Target.token`)."""
    return issue_token(
        os.environ["BENCH_SECRET"], sub=f"bench-{n}", org="acme", role="owner", name=f"Bench {n}", ttl=7200
    )


async def open_socket(
    url: str, n: int, *, vernis: bool = True, bearer: str | None = None
) -> ClientConnection:
    """Member n's socket (with `bearer`, else a new token), read to `history_end` (under Vernis)."""
    headers = {"Authorization": f"Bearer {bearer or token(n)}"} if vernis else {}
    ws = await connect(url, additional_headers=headers, open_timeout=PATIENCE, max_size=2**22)
    if vernis:
        while orjson.loads(await ws.recv())["type"] != "history_end":
            pass
    return ws


def reply(message: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(message) + b"\n")
    sys.stdout.buffer.flush()


async def command(commands: asyncio.StreamReader) -> str:
    """The next command from the parent; `close` at the end of stdin (the parent is gone)."""
    line = await commands.readline()
    return line.decode().strip() or "close"


async def stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


def cut(ws: ClientConnection) -> None:
    """Drop the connection from this side at once: an RST, no close frame, nothing more read."""
    sock = ws.transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ws.transport.abort()


# --- idle -----------------------------------------------------------------------------------------


async def idle(args: argparse.Namespace) -> None:
    commands = await stdin_reader()
    sockets: list[ClientConnection] = []
    for start in range(0, args.count, OPEN_BATCH):
        batch = range(args.first + start, args.first + min(args.count, start + OPEN_BATCH))
        sockets += await asyncio.gather(*(open_socket(args.url, n, vernis=not args.plain) for n in batch))
    reply({"ready": len(sockets)})
    while await command(commands) != "close":
        pass
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    reply({"closed": len(sockets)})


# --- storm ----------------------------------------------------------------------------------------


@dataclass
class Member:
    """One member of the storm: its socket, what it saw before the cut, what it got back."""

    n: int
    streaming: bool
    # Its token, issued once: a client comes back with the token it holds (a page keeps it).
    bearer: str = ""
    ws: ClientConnection | None = None
    conversation_id: str = ""
    last_seq: int = 0
    # The answer that runs through the cut (streaming members): asked for, its id, its text as
    # received, its end.
    asked: bool = False
    message_id: str | None = None
    text: list[str] = field(default_factory=list)
    ended: bool = False
    started: asyncio.Event = field(default_factory=asyncio.Event)
    # Seqs that went backwards or skipped before the cut (there should be none).
    broken_before: int = 0
    # The reconnect: µs timestamps, what came back.
    attempt: int = 0
    opened: int = 0
    loaded: int = 0
    caught_up: int = 0
    resumed: bool | None = None
    missed: list[int] = field(default_factory=list)  # seqs received before the `pong`
    live: list[int] = field(default_factory=list)  # seqs received after it, to `assistant_end`
    error: str | None = None

    def see(self, event: dict[str, Any], after: list[int] | None = None) -> None:
        """Record one event: its seq (in `after` once reconnected), and the running answer's parts."""
        seq = event.get("seq")
        if seq is not None and after is not None:
            after.append(seq)
        elif seq is not None:
            if self.last_seq and seq != self.last_seq + 1:
                self.broken_before += 1
            self.last_seq = seq
        kind = event["type"]
        if not self.asked:
            return
        if kind == "assistant_start" and self.message_id is None:
            self.message_id = event["message_id"]
        elif kind == "text_delta" and self.message_id is not None and not self.ended:
            self.text.append(event["content"])
            self.started.set()
        elif kind == "assistant_end" and event.get("message_id") == self.message_id:
            self.ended = True

    def exact(self, tokens: int) -> bool:
        """Whether it got exactly what it missed (the module's docstring says what is checked)."""
        seqs = self.missed + self.live
        if self.resumed is not True or self.broken_before or self.caught_up == 0:
            return False
        if seqs != list(range(self.last_seq + 1, self.last_seq + 1 + len(seqs))):
            return False
        if not self.asked:
            return True
        stamps = [int(word[1:]) for word in "".join(self.text).split() if word[0] == "t"]
        return self.ended and len(stamps) == tokens and all(a < b for a, b in itertools.pairwise(stamps))

    def result(self, tokens: int) -> dict[str, Any]:
        """What the parent gets for this member: times in ms from the reconnect attempt."""

        def ms(at: int) -> float | None:
            return (at - self.attempt) / 1000 if at else None

        return {
            "member": self.n,
            "streaming": self.streaming,
            "back": self.caught_up != 0,
            "exact": self.exact(tokens),
            "resumed": self.resumed,
            "after_seq": self.last_seq,
            "attempt_us": self.attempt,
            "open_ms": ms(self.opened),
            "loaded_ms": ms(self.loaded),
            "caught_up_ms": ms(self.caught_up),
            "missed": len(self.missed),
            "live": len(self.live),
            "broken_before": self.broken_before,
            "error": self.error,
            "message_id": self.message_id,
            "text": "".join(self.text) if self.asked else None,
        }


async def set_up(url: str, member: Member, gate: asyncio.Semaphore) -> None:
    """Open the member's socket and run its first exchange, to the answer's end and the title."""
    async with gate:
        member.bearer = token(member.n)
        ws = member.ws = await open_socket(url, member.n, bearer=member.bearer)
        await ws.send(SETUP_MESSAGE)
        answered = titled = False
        async with asyncio.timeout(PATIENCE):
            while not (answered and titled):
                event = orjson.loads(await ws.recv())
                member.see(event)
                kind = event["type"]
                if kind == "assistant_end":
                    answered = True
                    member.conversation_id = event["conversation_id"]
                elif kind == "title_updated":
                    titled = True
                elif kind == "error":
                    raise RuntimeError(f"member {member.n}: {event}")


async def read(member: Member) -> None:
    """Record every event until the socket is cut."""
    assert member.ws is not None
    with contextlib.suppress(ConnectionClosed):
        async for frame in member.ws:
            member.see(orjson.loads(frame))


async def reconnect(url: str, member: Member, at: float) -> None:
    """At loop time `at`, reconnect with `after_seq`, `ping`, and read to the `pong` (caught up)."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, at - loop.time()))
    member.attempt = now_us()
    query = f"?conversation_id={member.conversation_id}&after_seq={member.last_seq}"
    try:
        ws = await connect(
            url + query,
            additional_headers={"Authorization": f"Bearer {member.bearer}"},
            open_timeout=PATIENCE,
            max_size=2**22,
        )
        member.opened = now_us()
        member.ws = ws
        await ws.send(PING)
        async with asyncio.timeout(PATIENCE):
            event = orjson.loads(await ws.recv())
            if event["type"] != "conversation_loaded":
                raise RuntimeError(f"first event {event['type']}, not conversation_loaded")
            member.loaded = now_us()
            member.resumed = event.get("resumed")
            while (event := orjson.loads(await ws.recv()))["type"] != "pong":
                member.see(event, member.missed)
            member.caught_up = now_us()
    except Exception as exc:  # reported per member: the storm goes on
        member.error = f"{type(exc).__name__}: {exc}"[:300]


async def finish(member: Member) -> None:
    """Read a running answer's live rest to its `assistant_end`."""
    ws = member.ws
    if not member.streaming or member.ended or ws is None or not member.caught_up:
        return
    try:
        async with asyncio.timeout(PATIENCE):
            while not member.ended:
                member.see(orjson.loads(await ws.recv()), member.live)
    except Exception as exc:
        member.error = f"after the pong: {type(exc).__name__}: {exc}"[:300]


async def storm(args: argparse.Namespace) -> None:
    commands = await stdin_reader()
    rng = random.Random(args.seed)
    members = [Member(args.first + i, streaming=i < args.streaming) for i in range(args.count)]
    readers: list[asyncio.Task[None]] = []
    while (order := await command(commands)) != "close":
        if order == "setup":
            gate = asyncio.Semaphore(SETUP_CONCURRENCY)
            await asyncio.gather(*(set_up(args.url, m, gate) for m in members))
            readers = [asyncio.create_task(read(m)) for m in members]
            reply({"ready": len(members)})
        elif order == "stream":
            running = [m for m in members if m.streaming]
            for m in running:
                assert m.ws is not None
                m.asked = True
                await m.ws.send(STORM_MESSAGE)
            async with asyncio.timeout(PATIENCE):
                await asyncio.gather(*(m.started.wait() for m in running))
            reply({"streaming": len(running)})
        elif order == "cut":
            loop = asyncio.get_running_loop()
            at = loop.time()
            started = now_us()
            for m in members:
                assert m.ws is not None
                cut(m.ws)
            took = now_us() - started
            await asyncio.gather(*readers)
            await asyncio.gather(*(reconnect(args.url, m, at + rng.uniform(0, args.window)) for m in members))
            reply({"back": sum(1 for m in members if m.caught_up), "cut_us": took, "cut_at_us": started})
            await asyncio.gather(*(finish(m) for m in members))
            reply({"results": [m.result(args.tokens) for m in members]})
        else:
            raise ValueError(f"unknown command {order!r}")
    await asyncio.gather(*(m.ws.close() for m in members if m.ws is not None), return_exceptions=True)


# --- the parent's side ----------------------------------------------------------------------------


class Worker:
    """A worker process seen from `bench_server.py`: commands in, one JSON reply a line out."""

    def __init__(self, child: asyncio.subprocess.Process, log: Path) -> None:
        self.child = child
        self.log = log

    @classmethod
    async def start(cls, args: list[str], env: dict[str, str], core: int, log: Path) -> Worker:
        """`bench/bench_storm.py ARGS` on `core`, its stderr in `log`."""
        with log.open("wb") as stderr:
            child = await asyncio.create_subprocess_exec(
                "taskset",
                "-c",
                str(core),
                sys.executable,
                str(Path(__file__)),
                *args,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                # The storm's results are one line of a few MB.
                limit=2**28,
            )
        return cls(child, log)

    async def send(self, order: str) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write(order.encode() + b"\n")
        await self.child.stdin.drain()

    async def reply(self, within: float = 600.0) -> dict[str, Any]:
        """The worker's next reply, within `within` seconds; its stderr in the error if it ends instead."""
        assert self.child.stdout is not None
        line = await asyncio.wait_for(self.child.stdout.readline(), within)
        if not line:
            await self.child.wait()
            raise RuntimeError(f"worker exited {self.child.returncode}: {self.log.read_text()[-3000:]}")
        answer: dict[str, Any] = orjson.loads(line)
        return answer

    async def close(self, within: float = 120.0) -> None:
        """Ask it to close its sockets and exit; killed past `within` seconds."""
        with contextlib.suppress(ConnectionError):
            await self.send("close")
        try:
            await asyncio.wait_for(self.child.wait(), within)
        except TimeoutError:
            self.child.kill()
            await self.child.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("idle", "storm"))
    parser.add_argument("url", help="the socket's URL, ws://host:port/path")
    parser.add_argument("--first", type=int, required=True, help="the first member's number")
    parser.add_argument("--count", type=int, required=True, help="how many sockets (members)")
    parser.add_argument("--plain", action="store_true", help="idle: not Vernis (no token, no history)")
    parser.add_argument(
        "--streaming", type=int, default=0, help="storm: members whose answer runs at the cut"
    )
    parser.add_argument(
        "--window", type=float, default=10.0, help="storm: reconnects spread over this many s"
    )
    parser.add_argument("--tokens", type=int, default=0, help="storm: tokens of the running answers")
    parser.add_argument("--seed", type=int, default=0, help="storm: the reconnect delays' seed")
    args = parser.parse_args(argv)
    # The load side is the measuring instrument: no collector pauses of its own in the figures.
    gc.disable()
    uvloop.run(idle(args) if args.mode == "idle" else storm(args))


if __name__ == "__main__":
    main()
