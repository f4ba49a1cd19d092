"""The wire protocol under random abuse (SPEC §2, §3), with Hypothesis.

Every malformed frame (a JSON value that is not an object, an unknown type, a known type with wrong
types or unknown fields, huge and deeply nested values, broken JSON, binary frames) is answered with
`error invalid_message` on the same socket, which then answers a valid command; nothing stored
changes. Text frames that are not UTF-8 break the WebSocket protocol itself: closed with 1007, and
the next socket works.

Hypothesis drives the examples from a worker thread; each example runs on the test's event loop (one
server and one socket for the whole run). `database=None`: nothing is written to the working tree.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from tests.e2e.test_transport import closed_with
from tests.fixtures.server import Client, Vernis, VernisFactory
from tests.proofs.conftest import DRAWN_BESIDE_THE_SERVER, Figures

pytestmark = DRAWN_BESIDE_THE_SERVER

T = TypeVar("T")

MAX_FRAME = 65536
COMMAND_FIELDS: dict[str, set[str]] = {
    "user_message": {"content", "page_context", "client_message_id"},
    "new_conversation": set(),
    "list_conversations": {"before"},
    "load_conversation": {"conversation_id", "after_seq"},
    "stop": set(),
    "confirm_tool": {"confirmation_id", "approved"},
    "rename_conversation": {"conversation_id", "title"},
    "delete_conversation": {"conversation_id"},
    "feedback": {"message_id", "rating", "comment"},
    "authenticate": {"token"},
    "ping": set(),
}
UNLIMITED = {"rate_limit": "1000000/60", "member_rate_limit": "1000000/60", "flood_limit": "1000000/10"}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)
containers = st.lists(json_values, max_size=3) | st.dictionaries(st.text(max_size=8), json_values, max_size=3)


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


@st.composite
def unknown_field(draw: st.DrawFn) -> str:
    """A known command with at least one field it does not have (extra fields are refused)."""
    kind = draw(st.sampled_from(sorted(COMMAND_FIELDS)))
    extra = draw(st.text(min_size=1, max_size=20).filter(lambda k: k not in COMMAND_FIELDS[kind] | {"type"}))
    return dumps({"type": kind, extra: draw(json_values)})


@st.composite
def wrong_type(draw: st.DrawFn) -> str:
    """A known command whose field holds a list or an object where a scalar belongs."""
    kind = draw(st.sampled_from(sorted(k for k, fields in COMMAND_FIELDS.items() if fields)))
    field = draw(st.sampled_from(sorted(COMMAND_FIELDS[kind])))
    return dumps({"type": kind, field: draw(containers)})


@st.composite
def deeply_nested(draw: st.DrawFn) -> str:
    depth = draw(st.integers(min_value=200, max_value=20_000))
    opening, closing = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    inner = opening * depth + "1" + closing * depth
    if draw(st.booleans()):
        inner = '{"type":"ping","x":' + inner + "}"
    return inner[:MAX_FRAME]


@st.composite
def huge(draw: st.DrawFn) -> str:
    """A big value (up to the frame cap) in a field, an unknown field or the type itself."""
    size = draw(st.integers(min_value=1_000, max_value=MAX_FRAME - 200))
    body = draw(st.sampled_from("ax\u00e9\u4e2d\U0001f600")) * (size // 4)
    where = draw(st.sampled_from(["type", "title", "extra", "route"]))
    if where == "type":
        return dumps({"type": body})
    if where == "title":  # the value twice: half of it each time
        half = body[: len(body) // 2]
        return dumps({"type": "rename_conversation", "conversation_id": half, "title": half})
    if where == "route":  # a route is at most 2,048 characters
        route = "/" + "r" * 2048 + body[:5000]
        return dumps({"type": "user_message", "content": "hi", "page_context": {"route": route}})
    return dumps({"type": "ping", "extra": body})


text_frames = st.one_of(
    json_values.filter(lambda value: not isinstance(value, dict)).map(dumps),
    st.dictionaries(st.text(max_size=10), json_values, max_size=4)
    .filter(lambda d: not isinstance(d.get("type"), str) or d["type"] not in COMMAND_FIELDS)
    .map(dumps),
    unknown_field(),
    wrong_type(),
    deeply_nested(),
    huge(),
    st.text(max_size=200).filter(lambda t: not t.strip().startswith("{")),
    json_values.map(dumps).map(lambda frame: frame[: max(0, len(frame) - 1)] + "\x00"),
)
binary_frames = st.one_of(
    st.binary(max_size=2_000),
    text_frames.map(str.encode),
    st.just(b'{"type":"ping"}'),
    st.binary(min_size=1, max_size=50).map(lambda b: b'{"type":"ping","x":"' + b"\xff" + b + b'"}'),
)
frames: st.SearchStrategy[str | bytes] = st.one_of(text_frames, binary_frames)


def fingerprint(vernis: Vernis) -> str:
    """A digest of every row of every table of the server's SQLite file."""
    path = make_url(vernis.settings.database_url).database
    assert path is not None
    assert Path(path).exists()
    digest = hashlib.sha256()
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in sorted(tables):
            digest.update(table.encode())
            for row in connection.execute(f'SELECT * FROM "{table}" ORDER BY 1'):
                digest.update(repr(row).encode())
    return digest.hexdigest()


def on_loop(loop: asyncio.AbstractEventLoop, make: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
    """Run a coroutine on the test's event loop from Hypothesis's worker thread; its result."""

    async def run() -> T:
        return await make()

    return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)


async def answer_and_ping(client: Client, frame: str | bytes) -> list[dict[str, Any]]:
    await client.send_raw(frame)
    await client.send("ping")
    return await client.until("pong")


@pytest.mark.slow
@pytest.mark.parametrize(
    "examples", [pytest.param(300, id="300"), pytest.param(10000, id="10000", marks=pytest.mark.long)]
)
async def test_malformed_frames_get_invalid_message_and_change_nothing(
    vernis_factory: VernisFactory, figures: Figures, examples: int
) -> None:
    """Any malformed frame, text or binary, gets exactly one `error invalid_message`, the same socket answers the next valid command, and no stored row changes."""
    loop = asyncio.get_running_loop()
    seen: dict[str, int] = {"text": 0, "binary": 0, "largest": 0}
    async with vernis_factory(**UNLIMITED) as vernis, vernis.opened() as client:
        await client.answer("hello before the fuzzing")
        await client.until("title_updated")  # the first exchange's title
        before = fingerprint(vernis)

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.data_too_large,
                HealthCheck.filter_too_much,
            ],
        )
        @given(frame=frames)
        def check(frame: str | bytes) -> None:
            seen["text" if isinstance(frame, str) else "binary"] += 1
            size = len(frame.encode() if isinstance(frame, str) else frame)
            assert (
                size <= MAX_FRAME
            )  # larger frames close the socket (1009): tests/proofs/test_limits_abuse.py
            seen["largest"] = max(seen["largest"], size)
            events = on_loop(loop, lambda: answer_and_ping(client, frame))
            assert [e["type"] for e in events] == ["error", "pong"], (frame[:200], events)
            assert events[0]["code"] == "invalid_message", events
            assert "Traceback" not in events[0]["message"]

        await asyncio.to_thread(check)
        await client.send("list_conversations")
        (listed,) = await client.expect("conversation_list")
        assert len(listed["conversations"]) == 1
        after = fingerprint(vernis)
    assert after == before
    figures(examples=examples, **seen)


@pytest.mark.parametrize("frame", [b"\xff\xfe", b'{"type":"ping","x":"\xc3\x28"}', b"\xed\xa0\x80"])
async def test_text_frame_that_is_not_utf8_closes_with_1007_and_the_next_socket_works(
    vernis: Vernis, frame: bytes
) -> None:
    """A text frame that is not UTF-8 breaks the WebSocket protocol: the server closes with 1007 (RFC 6455), stores nothing, and the member's next socket works."""
    before = fingerprint(vernis)
    async with vernis.opened() as client:
        # The sans-I/O protocol object sends text frames as given bytes, unchecked.
        client.ws.protocol.send_text(frame)
        client.ws.send_data()
        assert await closed_with(client) == 1007
    async with vernis.opened() as client:
        await client.send("ping")
        await client.expect("pong")
    assert fingerprint(vernis) == before


@st.composite
def well_formed(draw: st.DrawFn, own_conversation: str) -> dict[str, Any]:
    """A valid command with random values: unknown ids, extreme numbers, odd cursors and text."""
    unknown = str(draw(st.uuids()))
    text = st.text(min_size=1, max_size=255).filter(str.strip)
    choice = draw(st.sampled_from(["load", "load_own", "rename", "delete", "feedback", "confirm", "list"]))
    if choice in ("load", "load_own"):
        command: dict[str, Any] = {
            "type": "load_conversation",
            "conversation_id": own_conversation if choice == "load_own" else unknown,
        }
        if draw(st.booleans()):
            command["after_seq"] = draw(st.integers(min_value=0, max_value=2**63 - 1))
        return command
    if choice == "rename":
        return {"type": "rename_conversation", "conversation_id": unknown, "title": draw(text)}
    if choice == "delete":
        return {"type": "delete_conversation", "conversation_id": unknown}
    if choice == "feedback":
        comment = draw(st.none() | st.text(max_size=2000))
        rating = draw(st.sampled_from(["up", "down"]))
        return {"type": "feedback", "message_id": unknown, "rating": rating, "comment": comment}
    if choice == "confirm":
        return {"type": "confirm_tool", "confirmation_id": unknown, "approved": draw(st.booleans())}
    return {"type": "list_conversations", "before": draw(st.none() | st.text(max_size=256))}


@pytest.mark.parametrize(
    "examples", [pytest.param(150, id="150"), pytest.param(5000, id="5000", marks=pytest.mark.long)]
)
async def test_valid_commands_with_random_values_get_a_clear_answer_and_change_nothing(
    vernis_factory: VernisFactory, figures: Figures, examples: int
) -> None:
    """Valid commands with unknown ids, extreme after_seq values, odd cursors and any text get their reply or one clear error (never `internal`), and change no stored row."""
    loop = asyncio.get_running_loop()
    codes: dict[str, int] = {}
    async with vernis_factory(**UNLIMITED) as vernis, vernis.opened() as client:
        events = await client.answer("hello before the fuzzing")
        own = events[-1]["conversation_id"]
        await client.until("title_updated")
        before = fingerprint(vernis)

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(command=well_formed(own))
        def check(command: dict[str, Any]) -> None:
            events = on_loop(loop, lambda: answer_and_ping(client, dumps(command)))
            errors = [e for e in events if e["type"] == "error"]
            kinds = {e["type"] for e in events} - {"error", "pong"}
            for error in errors:
                codes[error["code"]] = codes.get(error["code"], 0) + 1
            assert len(errors) <= 1, (command, events)
            assert {e["code"] for e in errors} <= {"not_found", "invalid_message"}, (command, events)
            assert errors or kinds, (command, events)
            assert kinds <= {"conversation_list", "conversation_loaded", "history_message", "history_end"}

        await asyncio.to_thread(check)
        after = fingerprint(vernis)
    assert after == before
    figures(examples=examples, **codes)
