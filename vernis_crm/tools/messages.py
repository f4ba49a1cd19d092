"""Messages tools (SPEC §5): a contact's SMS thread, sending an SMS, and who waits for an answer.

Every query is scoped to the caller's organization: an id from another organization is "not found".

`send_sms` records the message in the outbox: an outbound `sms_message` with status `queued`, sent
by the caller; delivering it is the host product's job. It goes to the number asked for (one of the
contact's), else to the contact's primary number, and leaves from the line the contact last texted
with, else from the organization's first line with a text agent, else from its first line.

`get_unanswered_contacts` lists who waits for an answer, each channel answered in its own kind:

- an SMS waits when it is their latest SMS: no outbound SMS came after it (a queued one counts, it is
  on its way; a failed one does not, it never reached them);
- a missed or voicemail call (unless `include_missed_calls` is false) waits when no call with them
  came after it that we placed (whatever its outcome: we tried to call back) or that was answered.

Only what happened in the last `days` counts. The contacts come newest waiting reach-out first.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.store.models import Member, table_of, utcnow
from vernis.tools import Tool, ToolFailure
from vernis_crm.models import (
    Call,
    CallStatus,
    Contact,
    ContactPhone,
    Direction,
    PhoneNumber,
    SmsMessage,
    SmsStatus,
)
from vernis_crm.resources import CrmContext
from vernis_crm.tools._contacts_common import calling_code, contact_ref, find_contact, local_time, read_phone

__all__ = ["TOOLS"]

CATEGORY = "Messages"
EXCERPT = 200

_sms = table_of(SmsMessage)
_call = table_of(Call)
_contact = table_of(Contact)
_phone = table_of(ContactPhone)
_line = table_of(PhoneNumber)
_member = table_of(Member)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GetContactMessagesArgs(_Args):
    contact_id: uuid.UUID = Field(description="The contact's id, as search_contacts returned it.")
    direction: Literal["inbound", "outbound"] | None = Field(
        None, description="Only messages they sent (inbound) or we sent (outbound)."
    )
    limit: int = Field(20, ge=1, le=50, description="How many messages, newest first (at most 50).")
    offset: int = Field(0, ge=0, le=10_000, description="How many to skip (paging: next_offset).")


class SendSmsArgs(_Args):
    contact_id: uuid.UUID = Field(description="The contact's id, as search_contacts returned it.")
    body: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1600)] = Field(
        description="The text of the message."
    )
    to_number: (
        Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=32)] | None
    ) = Field(
        None, description="One of the contact's numbers, in any format. Leave out for their primary one."
    )


class GetUnansweredContactsArgs(_Args):
    days: int = Field(
        14, ge=1, le=90, description="Only contacts who reached out in the last this many days."
    )
    include_missed_calls: bool = Field(
        True, description="Also count missed or voicemail calls not called back, not only SMS."
    )
    limit: int = Field(20, ge=1, le=50, description="How many contacts, newest first (at most 50).")
    offset: int = Field(0, ge=0, le=10_000, description="How many to skip (paging: next_offset).")


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1].rstrip() + "…"


def _page(result: dict[str, Any], offset: int, shown: int, total: int) -> dict[str, Any]:
    result["total"] = total
    if offset + shown < total:
        result["next_offset"] = offset + shown
    return result


# -- get_contact_messages -----------------------------------------------------------------------


async def get_contact_messages(ctx: CrmContext, args: GetContactMessagesArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        contact = await find_contact(connection, ctx, args.contact_id)
        where = [_sms.c.organization_id == ctx.organization_id, _sms.c.contact_id == contact.id]
        if args.direction is not None:
            where.append(_sms.c.direction == args.direction)
        total = await connection.scalar(sa.select(sa.func.count()).select_from(_sms).where(*where))
        rows = (
            await connection.execute(
                sa.select(
                    _sms.c.id,
                    _sms.c.direction,
                    _sms.c.body,
                    _sms.c.status,
                    _sms.c.created_at,
                    _member.c.name.label("sender"),
                )
                .outerjoin(_member, _member.c.id == _sms.c.sender_id)
                .where(*where)
                .order_by(_sms.c.created_at.desc(), _sms.c.id.desc())
                .offset(args.offset)
                .limit(args.limit)
            )
        ).all()
    messages = []
    for row in rows:
        message = {
            "id": str(row.id),
            "direction": row.direction,
            "body": row.body,
            "status": row.status,
            "at": local_time(ctx, row.created_at),
        }
        if row.sender is not None:
            message["sent_by"] = row.sender
        messages.append(message)
    return _page(
        {"contact": contact_ref(contact), "messages": messages}, args.offset, len(rows), int(total or 0)
    )


# -- send_sms -----------------------------------------------------------------------------------


async def _sending_line(connection: AsyncConnection, ctx: CrmContext, contact_id: uuid.UUID) -> Any:
    last_used = (
        sa.select(_sms.c.phone_number_id)
        .where(
            _sms.c.organization_id == ctx.organization_id,
            _sms.c.contact_id == contact_id,
            _sms.c.phone_number_id.is_not(None),
        )
        .order_by(_sms.c.created_at.desc())
        .limit(1)
        .scalar_subquery()
    )
    preference = sa.case(
        (_line.c.id == last_used, 0),
        (_line.c.text_agent_id.is_not(None), 1),
        else_=2,
    )
    return (
        await connection.execute(
            sa.select(_line.c.id, _line.c.label, _line.c.number)
            .where(_line.c.organization_id == ctx.organization_id)
            .order_by(preference, _line.c.created_at, _line.c.number)
            .limit(1)
        )
    ).first()


async def _plan_sms(connection: AsyncConnection, ctx: CrmContext, args: SendSmsArgs) -> dict[str, Any]:
    contact = await find_contact(connection, ctx, args.contact_id)
    name = contact_ref(contact)["name"]
    phones = (
        await connection.execute(
            sa.select(_phone.c.number, _phone.c.number_e164, _phone.c.label)
            .where(_phone.c.organization_id == ctx.organization_id, _phone.c.contact_id == contact.id)
            .order_by(_phone.c.is_primary.desc(), _phone.c.created_at, _phone.c.number_e164)
        )
    ).all()
    if not phones:
        raise ToolFailure(
            "no_phone", f"{name} has no phone number.", hint="Add one with manage_contact_phones first."
        )
    line = await _sending_line(connection, ctx, contact.id)
    if line is None:
        raise ToolFailure(
            "no_line",
            "The organization has no phone number to send an SMS from.",
            hint="Tell the user an admin must set up a phone number first.",
        )
    phone: Any = phones[0]
    if args.to_number is not None:
        wanted = read_phone(args.to_number, calling_code(line.number))
        phone = next((row for row in phones if row.number_e164 == wanted), None)
        if phone is None:
            raise ToolFailure(
                "not_found",
                f"{args.to_number} is not one of {name}'s numbers "
                f"({', '.join(row.number_e164 for row in phones)}).",
                hint="Send to one of their numbers, or add this one with manage_contact_phones first.",
            )
    return {
        "action": "Send an SMS",
        "to": contact_ref(contact) | {"number": phone.number_e164, "label": phone.label},
        "from": {"label": line.label, "number": line.number},
        "body": args.body,
        "line_id": str(line.id),
    }


def _shown(plan: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in plan.items() if key != "line_id"}


async def preview_send_sms(ctx: CrmContext, args: SendSmsArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        return _shown(await _plan_sms(connection, ctx, args))


async def send_sms(ctx: CrmContext, args: SendSmsArgs) -> dict[str, Any]:
    message_id, now = uuid.uuid4(), utcnow()
    async with ctx.resources.begin() as connection:
        plan = await _plan_sms(connection, ctx, args)
        await connection.execute(
            sa.insert(_sms).values(
                id=message_id,
                organization_id=ctx.organization_id,
                contact_id=args.contact_id,
                contact_number=plan["to"]["number"],
                phone_number_id=uuid.UUID(plan["line_id"]),
                sender_id=ctx.member.id,
                direction=Direction.OUTBOUND.value,
                body=plan["body"],
                status=SmsStatus.QUEUED.value,
                created_at=now,
            )
        )
    shown = _shown(plan)
    return {"message_id": str(message_id), "status": SmsStatus.QUEUED.value, "at": local_time(ctx, now)} | {
        key: shown[key] for key in ("to", "from", "body")
    }


# -- get_unanswered_contacts --------------------------------------------------------------------

# The kinds of events in the union below, inline (not bound) so that PostgreSQL knows their type.
_SMS_IN, _SMS_OUT, _CALL_IN, _CALL_OUT = (sa.literal_column(str(kind), sa.Integer) for kind in range(4))
_INBOUND_SMS = _sms.c.direction == Direction.INBOUND.value
_MISSED_CALL = sa.and_(
    _call.c.direction == Direction.INBOUND.value,
    _call.c.status.in_([CallStatus.MISSED.value, CallStatus.VOICEMAIL.value]),
)


def _events(ctx: CrmContext, args: GetUnansweredContactsArgs, since: datetime) -> sa.Subquery:
    """(contact_id, at, kind): their SMS and missed calls, and our answers to each, since `since`."""
    sms = (
        _sms.c.organization_id == ctx.organization_id,
        _sms.c.contact_id.is_not(None),
        _sms.c.created_at >= since,
    )
    calls = (
        _call.c.organization_id == ctx.organization_id,
        _call.c.contact_id.is_not(None),
        _call.c.started_at >= since,
    )

    def sms_of(kind: Any, *where: Any) -> sa.Select[Any]:
        return sa.select(_sms.c.contact_id, _sms.c.created_at.label("at"), kind.label("kind")).where(
            *sms, *where
        )

    def calls_of(kind: Any, *where: Any) -> sa.Select[Any]:
        return sa.select(_call.c.contact_id, _call.c.started_at.label("at"), kind.label("kind")).where(
            *calls, *where
        )

    parts = [
        sms_of(_SMS_IN, _INBOUND_SMS),
        sms_of(
            _SMS_OUT, _sms.c.direction == Direction.OUTBOUND.value, _sms.c.status != SmsStatus.FAILED.value
        ),
    ]
    if args.include_missed_calls:
        parts += [
            calls_of(_CALL_IN, _MISSED_CALL),
            calls_of(
                _CALL_OUT,
                sa.or_(
                    _call.c.direction == Direction.OUTBOUND.value, _call.c.status == CallStatus.ANSWERED.value
                ),
            ),
        ]
    return sa.union_all(*parts).subquery("events")


async def _reach_outs(
    connection: AsyncConnection,
    ctx: CrmContext,
    args: GetUnansweredContactsArgs,
    since: datetime,
    waiting: dict[uuid.UUID, Any],
) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """The unanswered reach-outs since `since` of the `waiting` contacts (id → their row of the
    waiting query: when each channel was last answered), oldest first."""
    ids = list(waiting)
    sms = await connection.execute(
        sa.select(_sms.c.contact_id, _sms.c.created_at, _sms.c.body, _sms.c.contact_number).where(
            _sms.c.organization_id == ctx.organization_id,
            _sms.c.contact_id.in_(ids),
            _INBOUND_SMS,
            _sms.c.created_at >= since,
        )
    )
    found: dict[uuid.UUID, list[dict[str, Any]]] = {id_: [] for id_ in ids}
    for row in sms:
        answered = waiting[row.contact_id].sms_answered
        if answered is None or row.created_at > answered:
            found[row.contact_id].append(
                {
                    "kind": "sms",
                    "at": row.created_at,
                    "body": _excerpt(row.body),
                    "number": row.contact_number,
                }
            )
    if args.include_missed_calls:
        calls = await connection.execute(
            sa.select(_call.c.contact_id, _call.c.started_at, _call.c.status, _call.c.contact_number).where(
                _call.c.organization_id == ctx.organization_id,
                _call.c.contact_id.in_(ids),
                _MISSED_CALL,
                _call.c.started_at >= since,
            )
        )
        for row in calls:
            answered = waiting[row.contact_id].call_answered
            if answered is None or row.started_at > answered:
                kind = "missed_call" if row.status == CallStatus.MISSED.value else "voicemail"
                found[row.contact_id].append(
                    {"kind": kind, "at": row.started_at, "number": row.contact_number}
                )
    for events in found.values():
        events.sort(key=lambda event: event["at"])
    return found


def _unanswered(last_in: Any, last_answer: Any) -> sa.ColumnElement[bool]:
    return sa.and_(last_in.is_not(None), sa.or_(last_answer.is_(None), last_in > last_answer))


async def get_unanswered_contacts(ctx: CrmContext, args: GetUnansweredContactsArgs) -> dict[str, Any]:
    since = utcnow() - timedelta(days=args.days)
    events = _events(ctx, args, since)
    last = {kind: sa.func.max(sa.case((events.c.kind == kind, events.c.at))) for kind in range(4)}
    sms_waits, call_waits = _unanswered(last[0], last[1]), _unanswered(last[2], last[3])
    # When they last reached out on a channel that waits: what the list is ordered by.
    latest = sa.case(
        (sa.and_(sms_waits, call_waits, last[2] > last[0]), last[2]),
        (sms_waits, last[0]),
        else_=last[2],
    )
    waiting = (
        sa.select(
            events.c.contact_id,
            latest.label("latest"),
            last[1].label("sms_answered"),
            last[3].label("call_answered"),
        )
        .group_by(events.c.contact_id)
        .having(sa.or_(sms_waits, call_waits))
        .subquery("waiting")
    )
    contacts = (
        sa.select(_contact.c.id, _contact.c.first_name, _contact.c.last_name, waiting)
        .join(waiting, waiting.c.contact_id == _contact.c.id)
        .where(_contact.c.organization_id == ctx.organization_id)
    )
    async with ctx.resources.connect() as connection:
        total = await connection.scalar(sa.select(sa.func.count()).select_from(contacts.subquery()))
        rows = (
            await connection.execute(
                contacts.order_by(waiting.c.latest.desc(), _contact.c.id)
                .offset(args.offset)
                .limit(args.limit)
            )
        ).all()
        reach_outs = await _reach_outs(connection, ctx, args, since, {row.id: row for row in rows})
    entries = []
    for row in rows:
        unanswered = reach_outs[row.id]
        latest_one = unanswered[-1]
        entries.append(
            contact_ref(row)
            | {
                "number": latest_one["number"],
                "waiting_since": local_time(ctx, unanswered[0]["at"]),
                "unanswered_messages": sum(1 for event in unanswered if event["kind"] == "sms"),
                "unanswered_calls": sum(1 for event in unanswered if event["kind"] != "sms"),
                "latest": {key: value for key, value in latest_one.items() if key != "number"}
                | {"at": local_time(ctx, latest_one["at"])},
            }
        )
    return _page({"contacts": entries}, args.offset, len(rows), int(total or 0))


TOOLS = (
    Tool(
        "get_contact_messages",
        CATEGORY,
        "A contact's SMS messages with us, newest first; paginated.",
        GetContactMessagesArgs,
        "message:list",
        False,
        get_contact_messages,
    ),
    Tool(
        "send_sms",
        CATEGORY,
        "Send an SMS to a contact (queued in the outbox; the phone system delivers it).",
        SendSmsArgs,
        "message:create",
        True,
        send_sms,
        preview=preview_send_sms,
    ),
    Tool(
        "get_unanswered_contacts",
        CATEGORY,
        "Contacts waiting for an answer: their latest SMS has no SMS reply after it, or a missed call "
        "was not called back; newest first.",
        GetUnansweredContactsArgs,
        "message:list",
        False,
        get_unanswered_contacts,
    ),
)
