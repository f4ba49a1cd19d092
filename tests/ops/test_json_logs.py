"""`VERNIS_LOG_FORMAT=json` (SPEC §15) through a real server: every stderr line is one JSON object;
an answer's end carries the conversation, the host's org and sub, model, tokens, time to first token,
duration and outcome; a unique marker in a user message and one in a tool argument appear nowhere.
"""

from __future__ import annotations

import io
import logging
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.fixtures.server import VernisFactory
from tests.ops.helpers import is_chat
from vernis.logs import configure_logging
from vernis.model.scripted import Fault, Reply, ScriptedToolCall


@pytest.fixture
def json_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """The server's logging as `vernis serve` configures it (JSON, INFO, to stderr), with stderr
    a buffer of the test's own; undone after."""
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    loggers = [logging.getLogger(name) for name in ("vernis", "uvicorn")]
    saved = [(logger.handlers[:], logger.propagate, logger.level) for logger in loggers]
    configure_logging("INFO", "json")
    try:
        yield stderr
    finally:
        for logger, (handlers, propagate, level) in zip(loggers, saved, strict=True):
            logger.handlers[:] = handlers
            logger.propagate = propagate
            logger.setLevel(level)


def parsed(text: str) -> list[dict[str, Any]]:
    entries = []
    for line in text.splitlines():
        entry = orjson.loads(line)  # every line is one JSON object
        assert isinstance(entry, dict), line
        entries.append(entry)
    return entries


async def test_json_logs_carry_the_answer_and_never_the_users_text_or_tool_arguments(
    vernis_factory: VernisFactory, json_logs: io.StringIO
) -> None:
    """Each log line parses as JSON; the answer's end line names conversation, org, sub, model, tokens, ttft, duration and outcome; a failed answer's line says failed; the markers of the user message and the tool argument are in no line."""
    said, argued = f"zq-said-{uuid.uuid4().hex}", f"zq-argued-{uuid.uuid4().hex}"
    async with vernis_factory(llm_max_retries=0) as vernis:
        vernis.scripted.add(
            Reply(tool_calls=[ScriptedToolCall("search_contacts", {"query": argued})], usage=(120, 12)),
            match=is_chat,
        )
        vernis.scripted.add(Reply("Nobody by that name.", usage=(150, 8)), match=is_chat)
        vernis.scripted.add(Reply(fault=Fault.http(500)), match=is_chat)
        async with vernis.opened() as client:
            events = await client.answer(f"please look for {said}")
            conversation_id = events[0]["conversation_id"]
            await client.until("title_updated")
            await client.answer(f"and again {said}")
    lines = json_logs.getvalue()
    assert said not in lines
    assert argued not in lines
    entries = parsed(lines)
    ended = [e for e in entries if e.get("logger") == "vernis.answers" and "outcome" in e]
    assert [e["outcome"] for e in ended] == ["complete", "failed"]
    complete = ended[0]
    assert complete["event"] == "answer complete"
    assert complete["level"] == "info"
    assert complete["time"].endswith("+00:00")
    assert (complete["conversation_id"], complete["org"], complete["sub"]) == (
        conversation_id,
        "acme",
        "member@acme.test",
    )
    assert complete["model"] == vernis.settings.chat_model
    assert (complete["input_tokens"], complete["output_tokens"]) == (270, 20)
    assert complete["ttft_ms"] >= 0
    assert complete["duration_ms"] >= complete["ttft_ms"]
    assert complete["tool_calls"] == 1
    assert all("event" in e and "level" in e and "time" in e for e in entries)
