"""An approved write does not freeze the socket (SPEC §5): it runs as a task of the conversation,
`stop` ends it, and `VERNIS_TOOL_TIMEOUT` bounds it; through a real server with a toolkit of the
test's own whose write waits until the test lets it finish."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, Field

from tests.data import database
from tests.fixtures.server import Client, Vernis, VernisFactory
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis.tools import Toolkit, tool
from vernis.tools.catalog import Catalog


class Slow:
    """A write that starts, then waits for `release` (or is cancelled)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.finished: list[str] = []
        self.cancelled: list[str] = []

    def toolkit(self) -> Toolkit[None]:
        async def archive_report(ctx: Any, args: Report) -> dict[str, Any]:
            """Archive a report."""
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.append(args.report_id)
                raise
            self.finished.append(args.report_id)
            return {"archived": args.report_id}

        async def preview(ctx: Any, args: Report) -> dict[str, Any]:
            return {"archive": args.report_id}

        return Toolkit(
            "reports",
            tools=[tool(permission="reports:write", writes=True, preview=preview)(archive_report)],
            permissions={"reports:write": "Archive reports"},
            role_grants={"member": ["reports:write"]},
        )


class Report(BaseModel):
    report_id: str = Field(description="The report to archive.")


@asynccontextmanager
async def approved(vernis: Vernis, client: Client) -> AsyncIterator[dict[str, Any]]:
    """Preview the write and approve it with the button; yields the confirmation."""
    call = ScriptedToolCall("archive_report", {"report_id": "R-1"}, call_id="call_archive")
    vernis.scripted.add(Reply(tool_calls=[call]), match="archive")
    vernis.scripted.add("Shall I?", match=lambda body: body["messages"][-1]["role"] == "tool")
    events = await client.answer("archive report R-1")
    await client.until("title_updated")  # the first exchange's title: out of the way
    (confirmation,) = [e for e in events if e["type"] == "confirmation_required"]
    await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True)
    yield confirmation


async def audit(vernis: Vernis) -> list[tuple[str, str, str | None]]:
    async with database(vernis) as engine, engine.connect() as connection:
        rows = await connection.execute(
            sa.text("SELECT tool_name, outcome, detail FROM audit_log ORDER BY created_at")
        )
        return [(row.tool_name, row.outcome, row.detail) for row in rows]


async def test_the_socket_answers_while_an_approved_write_runs_and_stop_ends_it(
    vernis_factory: VernisFactory,
) -> None:
    """While an approved write runs, ping is answered at once; stop cancels the write, whose card ends as stopped and whose audit says so."""
    slow = Slow()
    async with vernis_factory(demo=False, catalog=Catalog([slow.toolkit()])) as vernis:
        async with vernis.opened() as client, approved(vernis, client):
            await asyncio.wait_for(slow.started.wait(), 10)
            await client.send("ping")
            await client.expect("pong", timeout=2)
            await client.send("stop")
            events = await client.until("tool_call_completed")
            done = events[-1]
            assert done["status"] == "error"
            assert done["result"]["error"]["code"] == "stopped"
        assert slow.cancelled == ["R-1"]
        assert slow.finished == []
        assert await audit(vernis) == [("archive_report", "error", "stopped")]


async def test_an_approved_write_past_the_tool_timeout_ends_as_a_timeout(
    vernis_factory: VernisFactory,
) -> None:
    """An approved write still running after VERNIS_TOOL_TIMEOUT ends as an error `timeout`, audited."""
    slow = Slow()
    async with vernis_factory(demo=False, catalog=Catalog([slow.toolkit()]), tool_timeout=0.5) as vernis:
        async with vernis.opened() as client, approved(vernis, client):
            done = (await client.until("tool_call_completed"))[-1]
            assert done["status"] == "error"
            assert done["result"]["error"]["code"] == "timeout"
        assert slow.cancelled == ["R-1"]
        assert await audit(vernis) == [("archive_report", "error", "timeout")]


async def test_an_approved_write_that_finishes_ends_its_card_as_before(vernis_factory: VernisFactory) -> None:
    """An approved write let finish ends its card ok with its result, audited once."""
    slow = Slow()
    slow.release.set()
    async with vernis_factory(demo=False, catalog=Catalog([slow.toolkit()])) as vernis:
        async with vernis.opened() as client, approved(vernis, client):
            done = (await client.until("tool_call_completed"))[-1]
            assert done["status"] == "ok"
            assert done["result"]["data"] == {"archived": "R-1"}
        assert await audit(vernis) == [("archive_report", "ok", None)]
