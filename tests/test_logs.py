"""Structured logs: one JSON object per record, carrying the member and conversation in scope."""

from __future__ import annotations

import asyncio
import io
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from vernis.logs import JSONFormatter, conversation_context, member_context, set_conversation

CONVERSATION = uuid.UUID("0b7c5c1e-5d0e-4f57-9d43-5a1c2f3e4d5a")
MEMBER = uuid.UUID("9e3a1f0c-2b4d-4c6e-8f10-1a2b3c4d5e6f")


class Captured:
    """A logger of its own whose records are formatted by `JSONFormatter` into a buffer."""

    def __init__(self, logger: logging.Logger, stream: io.StringIO) -> None:
        self.logger = logger
        self.stream = stream

    def lines(self) -> list[str]:
        return self.stream.getvalue().splitlines()

    def entries(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.lines()]


@pytest.fixture
def captured() -> Iterator[Captured]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    logger = logging.getLogger(f"vernis.test_logs.{uuid.uuid4().hex}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield Captured(logger, stream)
    finally:
        logger.removeHandler(handler)


def test_record_is_one_json_object_with_time_level_logger_message(captured: Captured) -> None:
    """A record becomes exactly one line holding one JSON object with time, level, logger and the formatted message."""
    captured.logger.warning("answer %s failed after %d tokens", "abc", 12)
    (line,) = captured.lines()
    entry = orjson.loads(line)
    assert entry["level"] == "warning"
    assert entry["logger"] == captured.logger.name
    assert entry["message"] == "answer abc failed after 12 tokens"
    assert entry["time"].endswith("+00:00")
    assert "T" in entry["time"]
    assert "conversation_id" not in entry
    assert "member_id" not in entry
    assert "exception" not in entry


def test_multiline_message_stays_on_one_line(captured: Captured) -> None:
    """Newlines in a message are escaped inside the JSON string, so one record is still one line."""
    captured.logger.info("first line\nsecond line")
    (entry,) = captured.entries()
    assert entry["message"] == "first line\nsecond line"


def test_conversation_and_member_in_scope_are_carried(captured: Captured) -> None:
    """Inside conversation_context and member_context a record carries conversation_id and member_id; after, neither."""
    with member_context(MEMBER):
        captured.logger.info("connected")
        with conversation_context(CONVERSATION):
            captured.logger.info("answering")
        captured.logger.info("between answers")
    captured.logger.info("gone")
    connected, answering, between, gone = captured.entries()
    assert connected["member_id"] == str(MEMBER)
    assert "conversation_id" not in connected
    assert answering["conversation_id"] == str(CONVERSATION)
    assert answering["member_id"] == str(MEMBER)
    assert "conversation_id" not in between
    assert between["member_id"] == str(MEMBER)
    assert "member_id" not in gone
    assert "conversation_id" not in gone


async def test_task_started_in_scope_keeps_the_conversation(captured: Captured) -> None:
    """A task created inside conversation_context logs with that conversation even after the scope has ended."""
    proceed = asyncio.Event()

    async def later() -> None:
        await proceed.wait()
        captured.logger.info("background work")

    with conversation_context(CONVERSATION):
        task = asyncio.create_task(later())
    captured.logger.info("outside")
    proceed.set()
    await task
    outside, background = captured.entries()
    assert "conversation_id" not in outside
    assert background["conversation_id"] == str(CONVERSATION)


async def test_set_conversation_switches_the_socket_scope(captured: Captured) -> None:
    """set_conversation changes the conversation a long-lived scope logs with, and None removes it."""

    async def socket() -> None:
        set_conversation(CONVERSATION)
        captured.logger.info("showing one")
        set_conversation(None)
        captured.logger.info("pending")

    # In a task of its own, as a socket runs: its context changes do not leak into this test.
    await asyncio.create_task(socket())
    captured.logger.info("test")
    showing, pending, test = captured.entries()
    assert showing["conversation_id"] == str(CONVERSATION)
    assert "conversation_id" not in pending
    assert "conversation_id" not in test


def test_exception_is_logged_under_the_exception_key(captured: Captured) -> None:
    """logger.exception puts the formatted traceback under `exception`, still on one line."""
    try:
        raise ValueError("database said no")
    except ValueError:
        captured.logger.exception("command failed")
    (line,) = captured.lines()
    entry = orjson.loads(line)
    assert entry["message"] == "command failed"
    assert entry["level"] == "error"
    assert entry["exception"].startswith("Traceback (most recent call last):")
    assert "ValueError: database said no" in entry["exception"]


def test_extra_fields_are_included(captured: Captured) -> None:
    """Fields passed as `extra` appear as keys; values JSON cannot hold are written as text."""
    captured.logger.info("vernis started", extra={"model": "llama3.1", "member": MEMBER})
    (entry,) = captured.entries()
    assert entry["model"] == "llama3.1"
    assert entry["member"] == str(MEMBER)
