"""What the infrastructure and phone number tests share: the demo members, and the whole write flow."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from tests.crm.tools.conftest import Tools
from vernis.store.models import AuditEntry, table_of
from vernis_crm.models import Analyzer, PhoneNumber, PhoneNumberAnalyzer, TextAgent, VoiceAgent

OWNER = "owner@acme.test"
ADMIN = "admin@acme.test"
MEMBER = "member@acme.test"
VIEWER = "viewer@acme.test"
GLOBEX = "owner@globex.test"

TABLES = [table_of(model) for model in (VoiceAgent, TextAgent, Analyzer, PhoneNumber, PhoneNumberAnalyzer)]
_audit = table_of(AuditEntry)


async def snapshot(tools: Tools) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the infrastructure tables, all organizations."""
    async with tools.engine.connect() as connection:
        return {
            table.name: sorted(tuple(row) for row in await connection.execute(sa.select(table)))
            for table in TABLES
        }


async def audited(tools: Tools, approval_id: Any) -> list[Any]:
    async with tools.engine.connect() as connection:
        return list(await connection.execute(sa.select(_audit).where(_audit.c.approval_id == approval_id)))


async def confirmed(tools: Tools, email: str, name: str, arguments: dict[str, Any]) -> tuple[Any, Any]:
    """The whole flow: a preview that changes nothing, then the approved write and its audit row.
    Returns (preview, result)."""
    before = await snapshot(tools)
    preview = await tools.call(email, name, arguments)
    assert preview.status == "needs_confirmation", preview.envelope
    assert await snapshot(tools) == before
    shown, envelope = await tools.write(email, name, arguments)
    assert shown.preview == preview.preview
    assert envelope["ok"], envelope
    [entry] = await audited(tools, shown.confirmation_id)
    assert (entry.tool_name, entry.outcome) == (name, "ok")
    return preview.preview, envelope["data"]
