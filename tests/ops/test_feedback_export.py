"""Feedback for evaluation (SPEC §22) through a real server: `GET /api/admin/feedback` streams the
rated answers as JSON lines (the rating, the comment, the answer, the user message before it, the
model, the tools, the host's org and sub), filtered by `since` and `org`, behind the admin token; and
`vernis export-feedback` writes the same lines."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.data import add_notification
from tests.e2e.test_approvals import mark_read
from tests.fixtures.server import Client, Vernis, VernisFactory
from tests.ops.test_admin import ADMIN_TOKEN
from tests.utils import vernis_command

REPO = Path(__file__).resolve().parents[2]


async def run_cli(env: dict[str, str], *args: str) -> tuple[int | None, str, str]:
    """`vernis ARGS` (in this process, on a thread of its own: the command runs its own event
    loop): its exit code, standard output and error."""
    result = await asyncio.to_thread(vernis_command, *args, env=env, cwd=REPO)
    return result.returncode, result.stdout, result.stderr


async def feedback(vernis: Vernis, token: str | None = ADMIN_TOKEN, **params: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=vernis.http_url) as http:
        return await http.get("/api/admin/feedback", headers=headers, params=params)


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [orjson.loads(line) for line in response.text.splitlines()]


async def rate(client: Client, content: str, rating: str, comment: str | None = None) -> dict[str, Any]:
    """Ask, then rate the answer; its `assistant_start`."""
    events = await client.answer(content)
    start = next(e for e in events if e["type"] == "assistant_start")
    await client.send("feedback", message_id=start["message_id"], rating=rating, comment=comment)
    await client.send("ping")
    await client.until("pong")
    return start


async def test_the_export_lists_each_rated_answer_with_what_it_answered(
    vernis_factory: VernisFactory,
) -> None:
    """Two members of two organizations rate answers: the export has one line per rating with its fields, filtered by org and since; unrated answers are left out."""
    async with vernis_factory(admin_token=ADMIN_TOKEN) as vernis:
        notification_id = await add_notification(vernis)
        vernis.scripted.add(mark_read(notification_id), match="mark it read")
        async with vernis.opened("member@acme.test") as client:
            down = await rate(client, "mark it read please", "down", "It asked instead of doing it.")
            await client.answer("an unrated question")
        async with vernis.opened("owner@globex.test") as client:
            await rate(client, "hello from globex", "up")
        everything = lines(await feedback(vernis))
        assert [(r["org"], r["sub"], r["rating"]) for r in everything] == [
            ("acme", "member@acme.test", "down"),
            ("globex", "owner@globex.test", "up"),
        ]
        first = everything[0]
        assert first["message_id"] == down["message_id"]
        assert first["conversation_id"] == down["conversation_id"]
        assert first["comment"] == "It asked instead of doing it."
        assert first["user_message"] == "mark it read please"
        assert first["tools"] == ["mark_notification_read"]
        assert first["model"] == vernis.settings.llm_model
        assert first["answer"] is not None
        assert datetime.fromisoformat(first["rated_at"]) >= datetime.fromisoformat(first["answered_at"])
        assert [r["org"] for r in lines(await feedback(vernis, org="globex"))] == ["globex"]
        tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
        assert lines(await feedback(vernis, since=tomorrow)) == []
        assert len(lines(await feedback(vernis, since=first["rated_at"]))) == 2


async def test_the_export_needs_the_admin_token_and_a_valid_since(vernis_factory: VernisFactory) -> None:
    """The export answers 404 without VERNIS_ADMIN_TOKEN, 401 with a wrong token, 400 for a `since` that is not a date."""
    async with vernis_factory() as vernis:
        assert (await feedback(vernis, token="anything")).status_code == 404
    async with vernis_factory(admin_token=ADMIN_TOKEN) as vernis:
        assert (await feedback(vernis, token="wrong-token-of-enough-length-xxxxxxxx")).status_code == 401
        response = await feedback(vernis, since="last tuesday")
        assert response.status_code == 400
        assert "ISO 8601" in response.json()["error"]["message"]


async def test_the_command_writes_the_same_lines(vernis: Vernis) -> None:
    """`vernis export-feedback --since ... --org ...` prints the export's JSON lines to standard output."""
    async with vernis.opened() as client:
        start = await rate(client, "hello", "up", "Nice.")
    env = {**os.environ, "VERNIS_DATABASE_URL": vernis.settings.database_url}
    code, out, err = await run_cli(env, "export-feedback", "--since", "2020-01-01", "--org", "acme")
    assert code == 0, err
    (record,) = [orjson.loads(line) for line in out.splitlines()]
    assert (record["message_id"], record["rating"], record["comment"]) == (start["message_id"], "up", "Nice.")
    assert "1 rated answers exported" in err
    code, _, err = await run_cli(env, "export-feedback", "--since", "soon")
    assert code == 2
    assert "ISO 8601" in err
