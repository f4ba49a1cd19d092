"""Structured logs: one JSON object per line, carrying the member and conversation in scope.

`conversation_context()` / `member_context()` set context variables that every log record made
inside them carries, including records of tasks started inside them (tasks copy the context).

A JSON line (`VERNIS_LOG_FORMAT=json`, SPEC §15) holds `time`, `level`, `logger`, `event` (the
message, also under `message`), `conversation_id`, `member_id` and the host's `org` and `sub` when
in scope, and the record's own fields (an answer's end: `outcome`, `model`, `input_tokens`,
`output_tokens`, `ttft_ms`, `duration_ms`). What users write and tool arguments are never logged at
INFO or above.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import orjson

__all__ = ["configure_logging", "conversation_context", "member_context"]

_conversation: contextvars.ContextVar[str | None] = contextvars.ContextVar("conversation_id", default=None)
_member: contextvars.ContextVar[str | None] = contextvars.ContextVar("member_id", default=None)
# The host's ids of the member in scope: (org, sub).
_host: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("host", default=None)

# Not written out: the attributes every record has, and the copy of the message with terminal
# colours that uvicorn adds to some of its records.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_SKIPPED = _STANDARD | {"color_message"}


@contextmanager
def conversation_context(conversation_id: UUID | None) -> Iterator[None]:
    token = _conversation.set(str(conversation_id) if conversation_id else None)
    try:
        yield
    finally:
        _conversation.reset(token)


@contextmanager
def member_context(member_id: UUID, org: str | None = None, sub: str | None = None) -> Iterator[None]:
    token = _member.set(str(member_id))
    host = _host.set((org, sub) if org is not None and sub is not None else None)
    try:
        yield
    finally:
        _host.reset(host)
        _member.reset(token)


def set_conversation(conversation_id: UUID | None) -> None:
    """For a long-lived scope (a socket) whose conversation changes as it goes."""
    _conversation.set(str(conversation_id) if conversation_id else None)


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        entry["message"] = entry["event"]
        if (conversation := _conversation.get()) is not None:
            entry["conversation_id"] = conversation
        if (member := _member.get()) is not None:
            entry["member_id"] = member
        if (host := _host.get()) is not None:
            entry["org"], entry["sub"] = host
        for key, value in record.__dict__.items():
            if key not in _SKIPPED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        conversation = _conversation.get()
        return f"{line} [conversation={conversation}]" if conversation else line


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # uvicorn's loggers too (the server runs with log_config=None): else its warnings and the
    # tracebacks of "Exception in ASGI application" reach stderr as plain text, not JSON lines.
    for name in ("vernis", "uvicorn"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.propagate = False
    logging.getLogger("vernis").setLevel(level.upper())
