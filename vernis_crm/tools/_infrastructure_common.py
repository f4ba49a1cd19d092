"""What the Infrastructure tools share: tables, argument bases, paging and scoped lookups."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.store.models import table_of
from vernis.tools import ToolFailure
from vernis_crm.models import Analyzer, PhoneNumber, PhoneNumberAnalyzer, TextAgent, VoiceAgent
from vernis_crm.resources import CrmContext

CATEGORY = "Infrastructure"
MAX_PAGE = 50
EXCERPT = 300

_phone = table_of(PhoneNumber)
_voice = table_of(VoiceAgent)
_text = table_of(TextAgent)
_analyzer = table_of(Analyzer)
_phone_analyzer = table_of(PhoneNumberAnalyzer)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class _Page(_Args):
    limit: int = Field(20, ge=1, le=MAX_PAGE, description=f"How many to return (at most {MAX_PAGE}).")
    offset: int = Field(0, ge=0, le=10_000, description="How many to skip: next_offset of the previous page.")


def _excerpt(text: str, limit: int = EXCERPT) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _paged(rows: Sequence[Any], page: _Page, key: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {key: items, "has_more": len(rows) > page.limit}
    if result["has_more"]:
        result["next_offset"] = page.offset + page.limit
    return result


def _ref(row: Any) -> dict[str, Any] | None:
    return None if row is None else {"id": str(row.id), "name": row.name}


def _not_found(what: str, hint: str) -> ToolFailure:
    return ToolFailure("not_found", f"No {what} with that id in this organization.", hint=hint)


async def _phone_number(connection: AsyncConnection, ctx: CrmContext, phone_number_id: UUID) -> Any:
    row = (
        await connection.execute(
            sa.select(_phone).where(
                _phone.c.organization_id == ctx.organization_id, _phone.c.id == phone_number_id
            )
        )
    ).first()
    if row is None:
        raise _not_found("phone number", "Use an id from get_phone_numbers.")
    return row


async def _one(connection: AsyncConnection, ctx: CrmContext, table: sa.Table, id_: UUID | None) -> Any:
    """The row `id_` of `table` in the caller's organization, or None (also for `id_` None)."""
    if id_ is None:
        return None
    return (
        await connection.execute(
            sa.select(table).where(table.c.organization_id == ctx.organization_id, table.c.id == id_)
        )
    ).first()


def _number(row: Any) -> dict[str, Any]:
    return {"id": str(row.id), "label": row.label, "number": row.number}


async def _taken(
    connection: AsyncConnection, ctx: CrmContext, table: sa.Table, name: str, but: UUID | None = None
) -> bool:
    # Case-insensitive: "Front desk" beside "Front Desk" would only confuse people.
    same = sa.and_(
        table.c.organization_id == ctx.organization_id, sa.func.lower(table.c.name) == name.lower()
    )
    if but is not None:
        same = sa.and_(same, table.c.id != but)
    return bool(await connection.scalar(sa.select(sa.exists().where(same))))


@contextlib.asynccontextmanager
async def _writing(ctx: CrmContext, what: str) -> AsyncIterator[AsyncConnection]:
    """A transaction in which a unique-name clash (a concurrent write got there first) is a conflict."""
    try:
        async with ctx.resources.begin() as connection:
            yield connection
    except sa.exc.IntegrityError as exc:
        raise ToolFailure(
            "conflict",
            f"Another {what} with that name was just created; nothing was changed.",
            retryable=True,
        ) from exc


# -- phone numbers -----------------------------------------------------------------------------


async def _analyzers_of(
    connection: AsyncConnection, ctx: CrmContext, phone_ids: Sequence[UUID]
) -> dict[UUID, list[dict[str, Any]]]:
    rows = await connection.execute(
        sa.select(_phone_analyzer.c.phone_number_id, _analyzer.c.id, _analyzer.c.name)
        .join(_analyzer, _analyzer.c.id == _phone_analyzer.c.analyzer_id)
        .where(
            _phone_analyzer.c.organization_id == ctx.organization_id,
            _phone_analyzer.c.phone_number_id.in_(phone_ids),
        )
        .order_by(_analyzer.c.name, _analyzer.c.id)
    )
    found: dict[UUID, list[dict[str, Any]]] = {id_: [] for id_ in phone_ids}
    for row in rows:
        found[row.phone_number_id].append({"id": str(row.id), "name": row.name})
    return found
