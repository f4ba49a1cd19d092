"""Fallback models (SPEC §19, `[[model.fallbacks]]`) through a real server: two scripted
OpenAI-compatible servers on loopback, the chat model's and a fallback's, reached by the real
`openai` client. A model that fails before the first token hands the answer over; after it, no
switch; every model failing is one `llm_unavailable` and no stored answer."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.data import database
from tests.e2e.test_llm_faults import replay
from tests.fixtures.server import Vernis, VernisFactory, text_of, types_of
from tests.ops.helpers import sample, scrape
from tests.utils import free_port, run_server
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, SCRIPTED_TITLE_MODEL, Fault, Reply, ScriptedModel
from vernis.model.scripted.scenarios import TitleScenario

BACKUP = "backup-model"


class Backup:
    """The fallback's own scripted server."""

    def __init__(self, model: ScriptedModel, base_url: str) -> None:
        self.model = model
        self.base_url = base_url

    def chat(self) -> list[dict[str, Any]]:
        return [body for body in self.model.requests if not is_title(body)]


def is_title(body: Mapping[str, Any]) -> bool:
    return TitleScenario(SCRIPTED_TITLE_MODEL).is_title_request(body)


def is_chat(body: Mapping[str, Any]) -> bool:
    return body.get("model") == SCRIPTED_CHAT_MODEL


@pytest.fixture
async def backup() -> AsyncIterator[Backup]:
    model = ScriptedModel(chat_model=BACKUP)
    async with run_server(model.app) as server:
        yield Backup(model, f"http://127.0.0.1:{server.config.port}/v1")


def config_with(tmp_path: Path, *base_urls: str) -> Path:
    path = tmp_path / "vernis.toml"
    entries = "".join(
        f'[[model.fallbacks]]\nbase_url = "{url}"\nmodel = "{BACKUP if n == 0 else f"{BACKUP}-{n}"}"\n\n'
        for n, url in enumerate(base_urls)
    )
    path.write_text(entries)
    return path


async def usage_rows(vernis: Vernis) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=vernis.http_url) as http:
        response = await http.get(
            "/api/assistant/usage", headers={"Authorization": f"Bearer {vernis.token('owner@acme.test')}"}
        )
    days: list[dict[str, Any]] = response.json()["days"]
    return days


async def test_a_chat_model_failing_before_its_first_token_hands_the_answer_to_the_fallback(
    vernis_factory: VernisFactory, backup: Backup, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """HTTP 500 from the chat model after its retry: the fallback answers, and assistant_end, the stored answer, the usage rows, the log line and /metrics name it."""
    config = config_with(tmp_path, backup.base_url)
    async with vernis_factory(config=config, llm_max_retries=1) as vernis:
        vernis.scripted.add(Reply(fault=Fault.http(500)), match=is_chat, times=None)
        backup.model.add(Reply("The backup answers.", usage=(40, 4)), match=lambda body: not is_title(body))
        with caplog.at_level(logging.INFO, logger="vernis.answers"):
            async with vernis.opened("owner@acme.test") as client:
                events = await client.answer("hello there")
        rows = await usage_rows(vernis)
        samples = await scrape(vernis.http_url)
        history = await replay(vernis, "owner@acme.test")
        async with database(vernis) as engine, engine.connect() as connection:
            stored_model = await connection.scalar(
                sa.text("SELECT model FROM assistant_message WHERE id = :id"),
                {"id": uuid.UUID(events[-1]["message_id"]).hex},
            )
    assert "error" not in types_of(events)
    assert text_of(events) == "The backup answers."
    assert events[-1]["model"] == BACKUP
    assert stored_model == BACKUP  # the stored answer names it too
    # The chat model was asked, and asked again (its retries), before the fallback took over.
    assert len([body for body in vernis.scripted.requests if is_chat(body)]) >= 2
    (asked,) = backup.chat()
    assert asked["model"] == BACKUP
    assert asked["messages"][-1]["role"] == "user"
    (row,) = rows
    assert (row["input_tokens"], row["output_tokens"]) == (40, 4)
    (ended,) = [record for record in caplog.records if record.getMessage() == "answer complete"]
    assert ended.model == BACKUP  # type: ignore[attr-defined]
    chat = {"gen_ai_operation_name": "chat", "gen_ai_token_type": "input"}
    assert sample(samples, "gen_ai_client_token_usage_sum", **chat, gen_ai_request_model=BACKUP) == 40
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "hello there"),
        ("assistant", "The backup answers."),
    ]


async def test_an_unreachable_chat_model_and_a_stalled_one_fall_back(
    vernis_factory: VernisFactory, backup: Backup, tmp_path: Path
) -> None:
    """Connection refused (nothing listens on the chat model's port), or a stream that stalls before its first token: the fallback answers."""
    config = config_with(tmp_path, backup.base_url)
    backup.model.add(Reply("Backup here."), match=lambda body: not is_title(body), times=None)
    closed = f"http://127.0.0.1:{free_port()}/v1"
    async with vernis_factory(config=config, llm_base_url=closed, llm_max_retries=0) as vernis:
        async with vernis.opened() as client:
            events = await client.answer("anyone there?")
        assert (text_of(events), events[-1]["model"]) == ("Backup here.", BACKUP)
    async with vernis_factory(config=config, llm_max_retries=0, llm_stall_timeout=0.5) as vernis:
        vernis.scripted.add(Reply("never", fault=Fault.stall(after=1)), match=is_chat)
        async with vernis.opened() as client:
            events = await client.answer("anyone there?")
        assert (text_of(events), events[-1]["model"]) == ("Backup here.", BACKUP)
    assert len(backup.chat()) == 2


async def test_every_model_failing_is_one_llm_unavailable_and_no_stored_answer(
    vernis_factory: VernisFactory, backup: Backup, tmp_path: Path
) -> None:
    """The chat model and both fallbacks fail before their first token: one llm_unavailable, then assistant_end; no answer text is stored."""
    second = ScriptedModel(chat_model=f"{BACKUP}-1")
    second.add(Reply(fault=Fault.http(429)), times=None)
    async with run_server(second.app) as server:
        config = config_with(tmp_path, backup.base_url, f"http://127.0.0.1:{server.config.port}/v1")
        async with vernis_factory(config=config, llm_max_retries=0) as vernis:
            vernis.scripted.add(Reply(fault=Fault.http(503)), match=is_chat, times=None)
            backup.model.add(Reply(fault=Fault.http(502)), times=None)
            async with vernis.opened() as client:
                events = await client.answer("hello")
            history = await replay(vernis)
    assert [e["type"] for e in events if e["type"] in ("error", "assistant_end")] == [
        "error",
        "assistant_end",
    ]
    (error,) = [e for e in events if e["type"] == "error"]
    assert error["code"] == "llm_unavailable"
    assert text_of(events) == ""
    assert len(backup.chat()) == 1
    assert len([body for body in second.requests if not is_title(body)]) == 1
    assert [(m["role"], m["content"]) for m in history if m["content"]] == [("user", "hello")]


async def test_a_failure_after_the_first_token_does_not_switch(
    vernis_factory: VernisFactory, backup: Backup, tmp_path: Path
) -> None:
    """The chat model streams text, then an error: llm_unavailable with the partial answer stored; the fallback is never asked."""
    config = config_with(tmp_path, backup.base_url)
    async with vernis_factory(config=config, llm_max_retries=0) as vernis:
        vernis.scripted.add(
            Reply(["Half ", "an ", "answer ", "and more"], fault=Fault.error_mid_stream(after=3)),
            match=is_chat,
        )
        async with vernis.opened() as client:
            events = await client.answer("tell me")
        history = await replay(vernis)
    assert text_of(events) == "Half an "
    assert [e["code"] for e in events if e["type"] == "error"] == ["llm_unavailable"]
    assert events[-1]["model"] == SCRIPTED_CHAT_MODEL
    assert backup.chat() == []
    assert [(m["role"], m["content"], m["status"]) for m in history][-1] == (
        "assistant",
        "Half an ",
        "failed",
    )


async def test_a_fallback_that_fails_after_its_first_token_does_not_switch_again(
    vernis_factory: VernisFactory, backup: Backup, tmp_path: Path
) -> None:
    """The chat model fails at once, the fallback streams then fails: one llm_unavailable, its partial text stored, no third model asked."""
    second = ScriptedModel(chat_model=f"{BACKUP}-1")
    async with run_server(second.app) as server:
        config = config_with(tmp_path, backup.base_url, f"http://127.0.0.1:{server.config.port}/v1")
        async with vernis_factory(config=config, llm_max_retries=0) as vernis:
            vernis.scripted.add(Reply(fault=Fault.http(500)), match=is_chat, times=None)
            backup.model.add(Reply(["From ", "the ", "backup"], fault=Fault.cut(after=3)))
            async with vernis.opened() as client:
                events = await client.answer("go")
    assert text_of(events) == "From the "
    assert [e["code"] for e in events if e["type"] == "error"] == ["llm_unavailable"]
    assert events[-1]["model"] == BACKUP
    assert [body for body in second.requests if not is_title(body)] == []


async def test_the_title_falls_back_like_the_answer(
    vernis_factory: VernisFactory, backup: Backup, tmp_path: Path
) -> None:
    """The title model fails: the fallback model writes the title."""
    config = config_with(tmp_path, backup.base_url)
    async with vernis_factory(config=config, llm_max_retries=0) as vernis:
        vernis.scripted.add(Reply(fault=Fault.http(500)), match=is_title, times=None)
        backup.model.add(Reply("Backup title"), match=is_title)
        async with vernis.opened() as client:
            events = await client.answer("plan the quarterly review with Jane")
            (title,) = await client.expect("title_updated")
    assert events[-1]["model"] == SCRIPTED_CHAT_MODEL
    assert title["title"] == "Backup title"
    (asked,) = [body for body in backup.model.requests if is_title(body)]
    assert asked["model"] == BACKUP


async def test_a_refused_request_does_not_switch(
    vernis_factory: VernisFactory, backup: Backup, tmp_path: Path
) -> None:
    """HTTP 401 (a wrong key) is not an outage: the error stands and the fallback is not asked."""
    config = config_with(tmp_path, backup.base_url)
    async with vernis_factory(config=config, llm_max_retries=0) as vernis:
        vernis.scripted.add(Reply(fault=Fault.http(401)), match=is_chat)
        async with vernis.opened() as client:
            events = await client.answer("hello")
    assert [e["code"] for e in events if e["type"] == "error"] == ["llm_unavailable"]
    assert backup.chat() == []
