"""Calls tools (SPEC §5): the organization's phone calls, newest first, and one call in full.

Every query is scoped to the caller's organization: a call or contact id of another organization is
"not found". Times are shown in the organization's time zone; a date filter is a range of whole
local days (see `vernis.tools.analytics.Period`).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from vernis.store.models import table_of
from vernis.tools import Shown, Tool, ToolFailure, block
from vernis_crm.models import Call, Contact, PhoneNumber, VoiceAgent
from vernis_crm.resources import CrmContext
from vernis_crm.tools.analytics import local_midnight, organization_zone

__all__ = ["TOOLS"]

CATEGORY = "Calls"
MAX_LIMIT = 50
SUMMARY_EXCERPT = 160

_call = table_of(Call)
_contact = table_of(Contact)
_line = table_of(PhoneNumber)
_agent = table_of(VoiceAgent)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GetRecentCallsArgs(_Args):
    direction: Literal["inbound", "outbound"] | None = Field(
        None, description="Only calls in this direction."
    )
    status: Literal["answered", "missed", "voicemail", "failed"] | None = Field(
        None, description="Only calls that ended so (e.g. 'missed')."
    )
    contact_id: UUID | None = Field(None, description="Only calls with this contact.")
    from_: date | None = Field(
        None,
        alias="from",
        description="Only calls on or after this day (YYYY-MM-DD, organization's time zone).",
    )
    to: date | None = Field(
        None, description="Only calls on or before this day (YYYY-MM-DD, organization's time zone)."
    )
    limit: int = Field(20, ge=1, le=MAX_LIMIT, description=f"How many, newest first (at most {MAX_LIMIT}).")
    cursor: str | None = Field(
        None, max_length=100, description="next_cursor of the previous page, to continue the list."
    )


class CallIdArgs(_Args):
    call_id: UUID = Field(description="The id of the call, as get_recent_calls returned it.")


def _name(first: str | None, last: str | None) -> str:
    return f"{first or ''} {last or ''}".strip()


def _cursor(row: Any) -> str:
    return f"{row.started_at.isoformat()}|{row.id}"


def _after_cursor(cursor: str) -> sa.ColumnElement[bool]:
    try:
        at, _, id_ = cursor.rpartition("|")
        started_at, call_id = datetime.fromisoformat(at), UUID(id_)
    except ValueError:
        started_at = None
    if started_at is None or started_at.tzinfo is None:
        raise ToolFailure(
            "invalid_arguments",
            "The cursor is not one this tool gave out.",
            hint="Pass next_cursor from the previous result unchanged, or leave it out.",
        )
    return sa.or_(
        _call.c.started_at < started_at,
        sa.and_(_call.c.started_at == started_at, _call.c.id < call_id),
    )


def _joined() -> sa.FromClause:
    """Calls with their contact, line and agent, each only if it belongs to the call's organization."""
    return (
        _call.outerjoin(
            _contact,
            sa.and_(
                _contact.c.id == _call.c.contact_id, _contact.c.organization_id == _call.c.organization_id
            ),
        )
        .outerjoin(
            _line,
            sa.and_(
                _line.c.id == _call.c.phone_number_id, _line.c.organization_id == _call.c.organization_id
            ),
        )
        .outerjoin(
            _agent,
            sa.and_(_agent.c.id == _call.c.agent_id, _agent.c.organization_id == _call.c.organization_id),
        )
    )


_COLUMNS = (
    _call,
    _contact.c.first_name,
    _contact.c.last_name,
    _contact.c.company,
    _line.c.label.label("line_label"),
    _line.c.number.label("line_number"),
    _agent.c.name.label("agent_name"),
)


async def _contact_exists(ctx: CrmContext, contact_id: UUID) -> None:
    async with ctx.resources.connect() as connection:
        found = await connection.scalar(
            sa.select(
                sa.exists().where(
                    _contact.c.id == contact_id, _contact.c.organization_id == ctx.organization_id
                )
            )
        )
    if not found:
        raise ToolFailure(
            "not_found",
            "No such contact in this organization.",
            hint="Find the contact with search_contacts.",
        )


async def get_recent_calls(ctx: CrmContext, args: GetRecentCallsArgs) -> dict[str, Any]:
    zone = organization_zone(ctx)
    query = sa.select(*_COLUMNS).select_from(_joined()).where(_call.c.organization_id == ctx.organization_id)
    if args.direction is not None:
        query = query.where(_call.c.direction == args.direction)
    if args.status is not None:
        query = query.where(_call.c.status == args.status)
    if args.contact_id is not None:
        await _contact_exists(ctx, args.contact_id)
        query = query.where(_call.c.contact_id == args.contact_id)
    if args.from_ is not None and args.to is not None and args.from_ > args.to:
        raise ToolFailure("invalid_arguments", "'from' is after 'to'.", hint="Give 'from' on or before 'to'.")
    if args.from_ is not None:
        query = query.where(_call.c.started_at >= local_midnight(args.from_, zone))
    if args.to is not None:
        query = query.where(_call.c.started_at < local_midnight(args.to + timedelta(days=1), zone))
    if args.cursor is not None:
        query = query.where(_after_cursor(args.cursor))
    query = query.order_by(_call.c.started_at.desc(), _call.c.id.desc()).limit(args.limit + 1)
    async with ctx.resources.connect() as connection:
        rows = (await connection.execute(query)).all()
    page = rows[: args.limit]
    has_more = len(rows) > args.limit
    return {
        "calls": [_compact(row, zone) for row in page],
        "has_more": has_more,
        "next_cursor": _cursor(page[-1]) if has_more else None,
    }


def _excerpt(text: str | None) -> str | None:
    if text is None or len(text) <= SUMMARY_EXCERPT:
        return text
    return text[: SUMMARY_EXCERPT - 1].rstrip() + "…"


def _compact(row: Any, zone: Any) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "at": row.started_at.astimezone(zone).isoformat(timespec="minutes"),
        "direction": row.direction,
        "status": row.status,
        "duration_seconds": row.duration_seconds,
        "contact": (
            {"id": str(row.contact_id), "name": _name(row.first_name, row.last_name)}
            if row.first_name is not None
            else None
        ),
        "number": row.contact_number,
        "line": row.line_label,
        "agent": row.agent_name,
        "summary": _excerpt(row.summary),
    }


# The CRM's own UI block kind (SPEC §16): one call as a card. A host page may draw it with a renderer
# of its own (`el.registerRenderer("crm.call_summary", ...)`); the panel falls back to its fields.
CALL_SUMMARY_KIND = "crm.call_summary"
CALL_SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["call_id", "direction", "status", "at"],
    "additionalProperties": False,
    "properties": {
        "call_id": {"type": "string"},
        "direction": {"enum": ["inbound", "outbound"]},
        "status": {"type": "string", "maxLength": 40},
        "at": {"type": "string", "maxLength": 40},
        "duration_seconds": {"type": ["integer", "null"], "minimum": 0},
        "contact": {"type": ["string", "null"], "maxLength": 200},
        "url": {"type": "string", "maxLength": 300},
        "agent": {"type": ["string", "null"], "maxLength": 200},
        "summary": {"type": ["string", "null"], "maxLength": 4000},
    },
}


async def get_call_details(ctx: CrmContext, args: CallIdArgs) -> Shown:
    zone = organization_zone(ctx)
    async with ctx.resources.connect() as connection:
        row = (
            await connection.execute(
                sa.select(*_COLUMNS)
                .select_from(_joined())
                .where(_call.c.organization_id == ctx.organization_id, _call.c.id == args.call_id)
            )
        ).first()
    if row is None:
        raise ToolFailure(
            "not_found", "No such call in this organization.", hint="Use an id from get_recent_calls."
        )
    details = {
        "id": str(row.id),
        "at": row.started_at.astimezone(zone).isoformat(timespec="seconds"),
        "direction": row.direction,
        "status": row.status,
        "duration_seconds": row.duration_seconds,
        "contact": (
            {
                "id": str(row.contact_id),
                "name": _name(row.first_name, row.last_name),
                "company": row.company,
            }
            if row.first_name is not None
            else None
        ),
        "number": row.contact_number,
        "line": (
            {"id": str(row.phone_number_id), "label": row.line_label, "number": row.line_number}
            if row.line_label is not None
            else None
        ),
        "agent": {"id": str(row.agent_id), "name": row.agent_name} if row.agent_name is not None else None,
        "summary": row.summary,
    }
    card: dict[str, Any] = {
        "call_id": details["id"],
        "direction": row.direction,
        "status": row.status,
        "at": details["at"],
        "duration_seconds": row.duration_seconds,
        "contact": details["contact"]["name"] if details["contact"] else row.contact_number,
        "agent": row.agent_name,
        "summary": row.summary,
    }
    if details["contact"]:
        card["url"] = f"/contacts/{details['contact']['id']}"
    return Shown(details, ui=[block(CALL_SUMMARY_KIND, card)])


TOOLS = (
    Tool(
        "get_recent_calls",
        CATEGORY,
        "List the organization's calls, newest first; filter by direction, outcome (e.g. missed), contact "
        "or days. Times are in the organization's time zone.",
        GetRecentCallsArgs,
        "call:list",
        False,
        get_recent_calls,
    ),
    Tool(
        "get_call_details",
        CATEGORY,
        "One call in full: when, direction, outcome, duration, the contact, our line, the agent that "
        "handled it and the whole summary.",
        CallIdArgs,
        "call:view",
        False,
        get_call_details,
    ),
)
