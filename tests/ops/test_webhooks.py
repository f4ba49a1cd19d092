"""Webhooks (SPEC §22) end to end: a real Vernis, a real receiver on loopback, the real outbox."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import signal
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.data import add_notification, database
from tests.e2e.test_approvals import preview
from tests.e2e.test_questions import QUESTIONS, ask
from tests.e2e.test_reviews import REVIEWER, ask_for_review
from tests.e2e.test_serve import Launcher, connected, environment, member_token
from tests.fixtures.server import Vernis, VernisFactory, text_of
from tests.ops.webhook_receiver import receiver, verify
from vernis.cli import main
from vernis.store.models import WebhookDelivery, table_of

_delivery = table_of(WebhookDelivery)

SECRET = "whsec-test-0123456789abcdef"
FAST = {"webhook_backoff": 0.2, "webhook_poll_interval": 0.05}


def config_file(
    directory: Path,
    url: str,
    events: tuple[str, ...] = ("answer.completed",),
    *,
    include_text: bool = False,
    allow_private: bool = True,
) -> Path:
    path = directory / "vernis.toml"
    path.write_text(
        f"""
[[webhooks]]
url = "{url}"
events = [{", ".join(f'"{event}"' for event in events)}]
secret_env = "HOOK_SECRET"
include_text = {str(include_text).lower()}
allow_private = {str(allow_private).lower()}
"""
    )
    return path


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_SECRET", SECRET)


async def deliveries(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as connection:
        result = await connection.execute(sa.select(_delivery).order_by(_delivery.c.created_at))
        return list(result.all())


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 15.0) -> None:
    """Waits for a state the test cannot be told of (a row another process writes), checking often."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not so after {timeout} s")


async def delivered(vernis: Vernis, count: int = 1) -> list[Any]:
    async with database(vernis) as engine:

        async def done() -> bool:
            rows = await deliveries(engine)
            return sum(1 for row in rows if row.status == "delivered") >= count

        await until(done)
        return await deliveries(engine)


async def test_a_completed_answer_is_posted_signed_without_its_text(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """An answer's end is POSTed as `answer.completed`: signed as the docs say, with its id in a header, and no text."""
    async with receiver() as hooks:
        config = config_file(tmp_path, hooks.url)
        async with vernis_factory(config=config, **FAST) as vernis:
            async with vernis.opened() as client:
                events = await client.answer("hello there")
            got = await hooks.next()
            rows = await delivered(vernis)
    assert verify(SECRET, got.headers["vernis-signature"], got.body)
    assert not verify("another secret", got.headers["vernis-signature"], got.body)
    assert not verify(SECRET, got.headers["vernis-signature"], got.body + b" ")
    payload = got.json
    assert payload["type"] == got.headers["vernis-event"] == "answer.completed"
    assert payload["id"] == got.headers["vernis-delivery"] == str(rows[0].id)
    end = events[-1]
    assert payload["data"]["conversation_id"] == end["conversation_id"]
    assert payload["data"]["message_id"] == end["message_id"]
    assert (payload["data"]["org"], payload["data"]["sub"]) == ("acme", "member@acme.test")
    assert "text" not in payload["data"]
    assert text_of(events) not in got.body.decode()
    assert got.headers["content-type"] == "application/json"
    assert [(row.status, row.attempts) for row in rows] == [("delivered", 1)]


async def test_approvals_are_posted_with_their_text_when_include_text(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """A previewed write sends `approval.requested`, its approval `approval.resolved`; with include_text, the preview goes along."""
    async with receiver() as hooks:
        config = config_file(
            tmp_path, hooks.url, ("approval.requested", "approval.resolved"), include_text=True
        )
        async with vernis_factory(config=config, **FAST) as vernis:
            notification_id = await add_notification(vernis)
            async with vernis.opened() as client:
                confirmation, _ = await preview(client, vernis, notification_id)
                requested = await hooks.next()
                await client.send(
                    "confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True
                )
                await client.until("tool_call_completed")
                resolved = await hooks.next()
    assert requested.json["type"] == "approval.requested"
    data = requested.json["data"]
    assert data["approval_id"] == confirmation["confirmation_id"]
    assert data["preview"]["changes"] == {"read": {"from": False, "to": True}}
    assert data["arguments"] == {"notification_id": notification_id}
    assert resolved.json["type"] == "approval.resolved"
    assert resolved.json["data"] | {"status": "approved", "via": "button"} == resolved.json["data"]
    assert requested.json["id"] != resolved.json["id"]


async def test_a_review_is_posted_when_requested_and_when_resolved(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """A write sent to review posts `review.requested` (the requester's ids, no text) and, once the reviewer rejects it, `review.resolved`."""
    async with receiver() as hooks:
        config = config_file(tmp_path, hooks.url, ("review.requested", "review.resolved"))
        started = vernis_factory(config=config, **FAST)
        async with started as vernis, vernis.opened() as member, vernis.opened(REVIEWER) as admin:
            _, requested = await ask_for_review(vernis, member, "Your refund is on its way")
            asked = await hooks.next()
            await admin.until("review_required")
            await admin.send("review_tool", review_id=requested["review_id"], approved=False, note="not yet")
            await admin.until("review_resolved")
            resolved = await hooks.next()
    assert asked.json["type"] == "review.requested"
    assert asked.json["data"]["review_id"] == requested["review_id"]
    assert (asked.json["data"]["org"], asked.json["data"]["sub"]) == ("acme", "member@acme.test")
    assert "arguments" not in asked.json["data"]
    assert b"refund" not in asked.body
    assert resolved.json["type"] == "review.resolved"
    assert resolved.json["data"]["status"] == "rejected"
    assert "note" not in resolved.json["data"]


async def test_a_question_is_posted_with_its_questions_only_when_include_text(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """ask_user posts `question.asked` to both receivers: the include_text one gets the title and questions, the other ids only."""
    async with receiver() as plain, receiver() as chatty:
        config = config_file(tmp_path, plain.url, ("question.asked",))
        config.write_text(
            config.read_text()
            + config_file(tmp_path, chatty.url, ("question.asked",), include_text=True).read_text()
        )
        async with vernis_factory(config=config, **FAST) as vernis, vernis.opened() as client:
            question, _ = await ask(vernis, client)
            without, with_text = await plain.next(), await chatty.next()
    for got in (without, with_text):
        assert got.json["type"] == "question.asked"
        assert got.json["data"]["question_id"] == question["question_id"]
    assert "questions" not in without.json["data"]
    assert with_text.json["data"]["title"] == "Follow-up"
    assert [q["id"] for q in with_text.json["data"]["questions"]] == [q["id"] for q in QUESTIONS]


async def test_failures_are_retried_with_growing_waits_until_delivered(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """A receiver answering 500, then dropping the connection, gets the same delivery again after longer and longer waits."""
    async with receiver("500", "close", "500", "ok") as hooks:
        config = config_file(tmp_path, hooks.url)
        async with vernis_factory(config=config, **FAST) as vernis:
            async with vernis.opened() as client:
                await client.answer("hello")
            attempts = [await hooks.next() for _ in range(4)]
            rows = await delivered(vernis)
    assert [got.behaviour for got in attempts] == ["500", "close", "500", "ok"]
    assert len({got.headers["vernis-delivery"] for got in attempts}) == 1
    assert len({got.body for got in attempts}) == 1
    waits = [later.at - earlier.at for earlier, later in itertools.pairwise(attempts)]
    # 0.2 s, 0.4 s, 0.8 s: each wait at least the backoff, and longer than the one before.
    assert [wait >= least for wait, least in zip(waits, (0.2, 0.4, 0.8), strict=True)] == [True] * 3, waits
    assert waits[0] < waits[1] < waits[2], waits
    assert [(row.status, row.attempts) for row in rows] == [("delivered", 4)]


@pytest.mark.slow
async def test_a_receiver_slower_than_five_seconds_is_retried(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """A receiver that never answers, then one that answers 200 after 6 s, both count as failures: the third try delivers."""
    async with receiver("hang", "slow", "ok") as hooks:
        config = config_file(tmp_path, hooks.url)
        async with vernis_factory(config=config, **FAST) as vernis:
            async with vernis.opened() as client:
                await client.answer("hello")
            attempts = [await hooks.next() for _ in range(3)]
            rows = await delivered(vernis)
    waits = [later.at - earlier.at for earlier, later in itertools.pairwise(attempts)]
    # Each failed try ended at the 5 s timeout (then the backoff): not before, not at 6 s.
    assert all(5.0 <= wait < 6.0 for wait in waits), waits
    assert [(row.status, row.attempts, row.last_error) for row in rows] == [("delivered", 3, None)]


async def test_a_private_receiver_is_refused_then_retried_from_the_cli(
    vernis_factory: VernisFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With allow_private = false a loopback receiver gets nothing and the delivery fails; `webhooks list --failed` shows it, `retry` sends it."""
    async with receiver() as hooks:
        async with vernis_factory(
            config=config_file(tmp_path, hooks.url, allow_private=False), **FAST
        ) as vernis:
            async with vernis.opened() as client:
                await client.answer("hello")
            async with database(vernis) as engine:

                async def failed() -> bool:
                    return [row.status for row in await deliveries(engine)] == ["failed"]

                await until(failed)
                (row,) = await deliveries(engine)
        assert hooks.seen == []
        assert row.attempts == 1
        assert "127.0.0.1 is at 127.0.0.1, not a public address (allow_private = false)" in row.last_error

        monkeypatch.setenv("VERNIS_DATABASE_URL", vernis.settings.database_url)
        assert await asyncio.to_thread(main, ["webhooks", "list", "--failed"]) == 0
        listed = capsys.readouterr().out
        (line,) = [line for line in listed.splitlines() if str(row.id) in line]
        assert "answer.completed" in line
        assert "failed" in line
        assert await asyncio.to_thread(main, ["webhooks", "retry", str(uuid.uuid4())]) == 1
        assert await asyncio.to_thread(main, ["webhooks", "retry", str(row.id)]) == 0
        assert await asyncio.to_thread(main, ["webhooks", "list", "--failed"]) == 0
        assert "no failed deliveries" in capsys.readouterr().out

        async with vernis_factory(config=config_file(tmp_path, hooks.url), **FAST) as vernis:
            got = await hooks.next()
            rows = await delivered(vernis)
    assert got.headers["vernis-delivery"] == str(row.id)
    assert [(r.id, r.status) for r in rows] == [(row.id, "delivered")]


async def test_nothing_is_written_for_an_event_no_webhook_asks_for(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """The outbox holds only the events a receiver asked for: an answer with only approval events configured writes no row."""
    async with receiver() as hooks:
        config = config_file(tmp_path, hooks.url, ("approval.requested",))
        async with vernis_factory(config=config, **FAST) as vernis:
            async with vernis.opened() as client:
                await client.answer("hello")
            async with database(vernis) as engine:
                assert await deliveries(engine) == []
    assert hooks.seen == []


@pytest.fixture
async def launcher(tmp_path: Path, sqlite_seeded_template: Any) -> AsyncIterator[Launcher]:
    """Starts `vernis serve` processes on a copy of the seeded database; kills what still runs."""
    shutil.copyfile(sqlite_seeded_template.location, tmp_path / "vernis.db")
    launcher = Launcher(tmp_path, environment(tmp_path, VERNIS_SHUTDOWN_GRACE="5"))
    try:
        yield launcher
    finally:
        await launcher.stop_all()


@pytest.mark.slow
async def test_deliveries_pending_at_a_sigkill_are_sent_after_the_restart(launcher: Launcher) -> None:
    """`vernis serve` killed (SIGKILL) while its receiver fails: after the restart every event still arrives, once delivered."""
    async with receiver(*["500"] * 1000) as hooks:
        config = config_file(launcher.directory, hooks.url)
        launcher.env |= {
            "VERNIS_CONFIG": str(config),
            "HOOK_SECRET": SECRET,
            "VERNIS_WEBHOOK_POLL_INTERVAL": "0.05",
            # Long enough that no try is under way when the process is killed (its lease would hold
            # the row for 30 s more).
            "VERNIS_WEBHOOK_BACKOFF": "3",
        }
        served = await launcher.start("--scripted-model", "--demo")
        async with connected(served, member_token()) as client:
            await client.until("history_end")
            for n in range(3):
                await client.answer(f"message {n}")
        ids: set[str] = set()
        while len(ids) < 3:
            ids.add((await hooks.next()).headers["vernis-delivery"])

        def tried() -> list[tuple[str, int, str | None]]:
            with sqlite3.connect(launcher.database) as connection:
                rows = connection.execute(
                    "SELECT status, attempts, lease_until FROM webhook_delivery"
                ).fetchall()
            return [(str(status), int(attempts), lease) for status, attempts, lease in rows]

        async def all_failed_once() -> bool:
            rows = tried()
            return len(rows) == 3 and all(s == "pending" and a >= 1 and lease is None for s, a, lease in rows)

        await until(all_failed_once)
        served.process.kill()
        assert await served.exited(timeout=5) == -signal.SIGKILL

        hooks.script.clear()  # the receiver is fixed
        launcher.env["VERNIS_WEBHOOK_BACKOFF"] = "0.2"
        restarted = await launcher.start("--scripted-model", "--demo")
        ok: set[str] = set()
        while ok != ids:
            got = await hooks.next(timeout=30)
            if got.behaviour == "ok":
                assert verify(SECRET, got.headers["vernis-signature"], got.body)
                ok.add(got.headers["vernis-delivery"])

        async def all_delivered() -> bool:
            return [status for status, _, _ in tried()] == ["delivered"] * 3

        await until(all_delivered)
        restarted.process.send_signal(signal.SIGTERM)
        assert await restarted.exited(timeout=10) == 0
