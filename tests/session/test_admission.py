"""One admission path (vernis.answers.admission) for every answer, through a real server: `regenerate`
and `edit_message` are refused over a token quota exactly like a new message (the quota fields, no
model call, nothing stored), and every refusal counts in `vernis_messages_refused` by reason."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fixtures.server import Client, Vernis, VernisFactory
from tests.ops.helpers import chat_requests, is_chat, sample, scrape
from vernis.model.scripted import Reply


async def stored(engine: AsyncEngine) -> list[tuple[str, str, str]]:
    """Every stored message: role, status, content."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            sa.text("SELECT role, status, content FROM assistant_message ORDER BY created_at, position")
        )
        return [(str(role), str(status), str(content)) for role, status, content in rows]


async def over_quota(vernis: Vernis, client: Client) -> dict[str, Any]:
    """Spend past the member's daily quota of 100 tokens with one answered message; its answer's
    `assistant_start`."""
    vernis.scripted.add(Reply("Done.", usage=(80, 30)), match=is_chat)
    events = await client.answer("spend it all")
    assert events[-1]["type"] == "assistant_end"
    # The first exchange's title, made in the background, comes once; wait for it rather than for a
    # quiet moment (a title slower than that came in the middle of a refusal's events).
    await client.until("title_updated")
    return next(e for e in events if e["type"] == "assistant_start")


async def refused(client: Client, command: str, **fields: Any) -> dict[str, Any]:
    await client.send(command, **fields)
    events = await client.until("error")
    assert [e["type"] for e in events] == ["error"], events
    return events[0]


def assert_member_quota(error: dict[str, Any]) -> None:
    assert error["code"] == "quota_exceeded"
    assert (error["scope"], error["limit"], error["used"]) == ("member", 100, 110)
    assert error["reset_at"]
    assert int(error["retry_after_ms"]) > 0


async def test_regenerate_over_the_quota_is_refused_with_no_model_call_and_nothing_stored(
    vernis_factory: VernisFactory, engine: AsyncEngine
) -> None:
    """`regenerate` past the member's daily quota gets quota_exceeded with scope, limit, used, reset_at and retry_after_ms; no request reaches the model and no row is written."""
    async with vernis_factory(member_daily_tokens=100) as vernis, vernis.opened() as client:
        await over_quota(vernis, client)
        requests, rows = len(chat_requests(vernis)), await stored(engine)
        error = await refused(client, "regenerate")
        assert_member_quota(error)
        await client.silent(0.3)
        assert len(chat_requests(vernis)) == requests
        assert await stored(engine) == rows
        samples = await scrape(vernis.http_url)
        assert sample(samples, "vernis_messages_refused_total", reason="quota_exceeded") == 1


async def test_edit_message_over_the_quota_is_refused_with_no_model_call_and_nothing_stored(
    vernis_factory: VernisFactory, engine: AsyncEngine
) -> None:
    """`edit_message` past the member's daily quota gets quota_exceeded with the quota fields; the model is not asked, the original exchange is not superseded and the edit is not stored."""
    async with vernis_factory(member_daily_tokens=100) as vernis, vernis.opened() as client:
        start = await over_quota(vernis, client)
        requests, rows = len(chat_requests(vernis)), await stored(engine)
        error = await refused(client, "edit_message", message_id=start["message_id"], content="Edited text")
        assert_member_quota(error)
        await client.silent(0.3)
        assert len(chat_requests(vernis)) == requests
        assert await stored(engine) == rows
        assert all(status != "superseded" for _, status, _ in rows)
        assert all(content != "Edited text" for _, _, content in rows)


async def test_regenerate_while_an_answer_streams_is_refused_and_counted(vernis: Vernis) -> None:
    """`regenerate` while the conversation's answer still streams gets response_in_progress, counted in vernis_messages_refused by that reason; the answer finishes."""
    async with vernis.opened() as client:
        vernis.scripted.add(Reply("Done."), match=is_chat)
        await client.answer("first")
        await client.drain()
        vernis.scripted.add(Reply("one two three four five six", chunk_delay=0.05), match=is_chat)
        await client.send("regenerate")
        await client.until("text_delta")
        await client.send("regenerate")
        events = await client.until("assistant_end")
        errors = [e for e in events if e["type"] == "error"]
        assert [e["code"] for e in errors] == ["response_in_progress"]
        assert events[-1]["stopped"] is False
    samples = await scrape(vernis.http_url)
    assert sample(samples, "vernis_messages_refused_total", reason="response_in_progress") == 1
