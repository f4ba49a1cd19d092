"""Analytics tools (SPEC §5): the organization's numbers over a range of days, computed by SQL.

A range is given as calendar days (`from`, `to`, both inclusive) on the organization's own calendar:
Acme's "June 3" runs from local midnight to local midnight, whatever UTC says. `Period` turns the
days into UTC instants in Python, and the database only compares stored instants with them, so
SQLite and PostgreSQL count the same rows. Per-day series are bucketed in SQL by a CASE over the
precomputed boundaries; a duration between two stored instants uses `seconds_since_epoch`, compiled
per dialect. Point-in-time figures (open and overdue tasks, active plans) are as of the moment the
user asked.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from vernis.store.models import table_of
from vernis.tools import Shown, Tool, ToolFailure, links, metrics
from vernis_crm.models import (
    Call,
    CallStatus,
    Contact,
    ContactNote,
    Direction,
    Plan,
    PlanStatus,
    PlanTemplate,
    SmsMessage,
    SmsStatus,
    Task,
    TaskStatus,
)
from vernis_crm.resources import CrmContext

__all__ = [
    "TOOLS",
    "DateRangeArgs",
    "Period",
    "local_midnight",
    "organization_zone",
    "seconds_since_epoch",
]

CATEGORY = "Analytics"
MAX_DAYS = 366
MAX_SERIES_DAYS = 92

_call = table_of(Call)
_sms = table_of(SmsMessage)
_contact = table_of(Contact)
_note = table_of(ContactNote)
_task = table_of(Task)
_plan = table_of(Plan)
_template = table_of(PlanTemplate)


# -- time ---------------------------------------------------------------------------------------


def organization_zone(ctx: CrmContext) -> ZoneInfo:
    """The caller's organization's time zone (UTC if its name is unknown to this system)."""
    try:
        return ZoneInfo(ctx.member.organization_timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def local_midnight(day: date, zone: ZoneInfo) -> datetime:
    """The UTC instant `day` begins at in `zone`."""
    return datetime.combine(day, time(), tzinfo=zone).astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Period:
    """Whole local days `first` to `last` (inclusive) in `zone`: the instants [start, end)."""

    first: date
    last: date
    zone: ZoneInfo

    @property
    def start(self) -> datetime:
        return local_midnight(self.first, self.zone)

    @property
    def end(self) -> datetime:
        return local_midnight(self.last + timedelta(days=1), self.zone)

    def days(self) -> list[date]:
        return [self.first + timedelta(days=n) for n in range((self.last - self.first).days + 1)]

    def contains(self, column: sa.ColumnElement[datetime]) -> sa.ColumnElement[bool]:
        return sa.and_(column >= self.start, column < self.end)

    def by_day(self, column: sa.ColumnElement[datetime]) -> sa.ColumnElement[int]:
        """The index of the local day `column` falls on (for rows already within the period)."""
        ends = [local_midnight(day + timedelta(days=1), self.zone) for day in self.days()]
        return sa.case(*((column < end, index) for index, end in enumerate(ends)), else_=-1)

    def describe(self) -> dict[str, str]:
        return {"from": self.first.isoformat(), "to": self.last.isoformat(), "timezone": self.zone.key}


class seconds_since_epoch(FunctionElement[float]):
    """Seconds from 1970-01-01 UTC to a stored instant; the difference of two is a duration."""

    type = sa.Float()
    inherit_cache = True


@compiles(seconds_since_epoch, "sqlite")
def _seconds_sqlite(element: seconds_since_epoch, compiler: SQLCompiler, **kw: Any) -> str:
    # SQLite keeps UTC instants as ISO text; julianday() reads it (day 2440587.5 is the epoch).
    return f"((julianday({compiler.process(element.clauses, **kw)}) - 2440587.5) * 86400.0)"


@compiles(seconds_since_epoch, "postgresql")
def _seconds_postgresql(element: seconds_since_epoch, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(EXTRACT(EPOCH FROM {compiler.process(element.clauses, **kw)}) AS DOUBLE PRECISION)"


# -- arguments ----------------------------------------------------------------------------------


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DateRangeArgs(_Args):
    from_: date | None = Field(
        None,
        alias="from",
        description="First day, inclusive (YYYY-MM-DD), on the organization's calendar.",
    )
    to: date | None = Field(
        None, description="Last day, inclusive (YYYY-MM-DD), on the organization's calendar. Default: today."
    )

    def period(self, ctx: CrmContext, default_days: int) -> Period:
        """The days asked for; a missing end is today, a missing start `default_days` before the end."""
        zone = organization_zone(ctx)
        today = ctx.asked_at.astimezone(zone).date()
        last = self.to or (max(today, self.from_) if self.from_ else today)
        first = self.from_ or last - timedelta(days=default_days - 1)
        if first > last:
            raise ToolFailure(
                "invalid_arguments",
                f"The range starts ({first}) after it ends ({last}).",
                hint="Give 'from' on or before 'to'.",
            )
        if (last - first).days >= MAX_DAYS:
            raise ToolFailure(
                "invalid_arguments",
                f"The range covers more than {MAX_DAYS} days.",
                hint=f"Ask for at most {MAX_DAYS} days at a time.",
            )
        return Period(first, last, zone)


class EngagementArgs(DateRangeArgs):
    group_by: Literal["channel", "day"] = Field(
        "channel",
        description=(
            "'channel': totals per channel (calls, SMS); 'day': the same totals plus one row per day "
            f"(ranges of at most {MAX_SERIES_DAYS} days)."
        ),
    )


# -- SQL helpers --------------------------------------------------------------------------------


def _count_if(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)


def _count(table: sa.Table, *conditions: sa.ColumnElement[bool]) -> sa.ScalarSelect[int]:
    return sa.select(sa.func.count()).select_from(table).where(*conditions).scalar_subquery()


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def _minutes(seconds: Any) -> float | None:
    return None if seconds is None else round(float(seconds) / 60, 1)


def _org(table: sa.Table, ctx: CrmContext) -> sa.ColumnElement[bool]:
    return table.c.organization_id == ctx.organization_id


def _is(column: sa.ColumnElement[str], value: enum.StrEnum) -> sa.ColumnElement[bool]:
    return column == value.value


# -- tools --------------------------------------------------------------------------------------


async def get_dashboard_stats(ctx: CrmContext, args: DateRangeArgs) -> Shown:
    period = args.period(ctx, 7)
    now = ctx.asked_at
    calls = sa.select(
        sa.func.count().label("total"),
        _count_if(_is(_call.c.direction, Direction.INBOUND)).label("inbound"),
        _count_if(_is(_call.c.direction, Direction.OUTBOUND)).label("outbound"),
        _count_if(_is(_call.c.status, CallStatus.ANSWERED)).label("answered"),
        _count_if(_is(_call.c.status, CallStatus.MISSED)).label("missed"),
        _count_if(
            sa.and_(_is(_call.c.direction, Direction.INBOUND), _is(_call.c.status, CallStatus.MISSED))
        ).label("missed_inbound"),
        _count_if(_is(_call.c.status, CallStatus.VOICEMAIL)).label("voicemail"),
        sa.func.avg(sa.case((_is(_call.c.status, CallStatus.ANSWERED), _call.c.duration_seconds))).label(
            "average_duration"
        ),
    ).where(_org(_call, ctx), period.contains(_call.c.started_at))
    open_task = sa.and_(_org(_task, ctx), _is(_task.c.status, TaskStatus.OPEN))
    others = sa.select(
        _count(
            _sms,
            _org(_sms, ctx),
            period.contains(_sms.c.created_at),
            _is(_sms.c.direction, Direction.INBOUND),
        ),
        _count(
            _sms,
            _org(_sms, ctx),
            period.contains(_sms.c.created_at),
            _is(_sms.c.direction, Direction.OUTBOUND),
        ),
        _count(_contact, _org(_contact, ctx), period.contains(_contact.c.created_at)),
        _count(_task, open_task),
        _count(_task, open_task, _task.c.due_at < now),
        _count(_plan, _org(_plan, ctx), _is(_plan.c.status, PlanStatus.ACTIVE)),
    )
    async with ctx.resources.connect() as connection:
        call_row = (await connection.execute(calls)).one()
        sms_in, sms_out, new_contacts, open_tasks, overdue, active_plans = (
            await connection.execute(others)
        ).one()
    average = call_row.average_duration
    stats = {
        "period": period.describe(),
        "calls": {
            "total": call_row.total,
            "inbound": call_row.inbound,
            "outbound": call_row.outbound,
            "answered": call_row.answered,
            "missed": call_row.missed,
            "missed_inbound": call_row.missed_inbound,
            "voicemail": call_row.voicemail,
            "average_duration_seconds": None if average is None else round(float(average)),
        },
        "messages": {"inbound": sms_in, "outbound": sms_out},
        "new_contacts": new_contacts,
        "current": {"open_tasks": open_tasks, "overdue_tasks": overdue, "active_plans": active_plans},
    }
    figures = metrics(
        [
            ("Calls", call_row.total),
            ("Missed calls", call_row.missed),
            ("Messages", sms_in + sms_out),
            ("New contacts", new_contacts),
            ("Open tasks", open_tasks),
            ("Overdue tasks", overdue),
        ]
    )
    return Shown(stats, ui=[figures, links([("Contacts", "/contacts"), ("Calls", "/calls")])])


_Condition = Callable[[sa.FromClause], sa.ColumnElement[bool]]


async def _first_answer(
    connection: AsyncConnection,
    ctx: CrmContext,
    period: Period,
    table: sa.Table,
    at: str,
    asked: _Condition,
    answer: _Condition,
) -> Any:
    """How the rows matching `asked` in the period (with a contact) were answered: by the first
    later row matching `answer` with the same contact, at any time up to now.

    One row: (asked, answered, average seconds to the answer, answered within an hour).
    """
    later = table.alias("answer")
    answered_at = (
        sa.select(sa.func.min(later.c[at]))
        .where(
            later.c.organization_id == ctx.organization_id,
            later.c.contact_id == table.c.contact_id,
            later.c[at] > table.c[at],
            answer(later),
        )
        .scalar_subquery()
    )
    pairs = (
        sa.select(table.c[at].label("asked_at"), answered_at.label("answered_at"))
        .where(_org(table, ctx), table.c.contact_id.is_not(None), period.contains(table.c[at]), asked(table))
        .subquery()
    )
    delay = seconds_since_epoch(pairs.c.answered_at) - seconds_since_epoch(pairs.c.asked_at)
    query = sa.select(
        sa.func.count(),
        sa.func.count(pairs.c.answered_at),
        sa.func.avg(delay),
        # Rounded: julianday() arithmetic makes an answer exactly an hour later 3600.00001 s.
        _count_if(sa.func.round(delay) <= 3600),
    )
    return (await connection.execute(query)).one()


def _inbound(table: sa.FromClause) -> sa.ColumnElement[bool]:
    return table.c.direction == Direction.INBOUND.value


def _outbound(table: sa.FromClause) -> sa.ColumnElement[bool]:
    return table.c.direction == Direction.OUTBOUND.value


def _missed_inbound_call(table: sa.FromClause) -> sa.ColumnElement[bool]:
    return sa.and_(table.c.direction == Direction.INBOUND.value, table.c.status == CallStatus.MISSED.value)


async def get_engagement_stats(ctx: CrmContext, args: EngagementArgs) -> dict[str, Any]:
    period = args.period(ctx, 30)
    if args.group_by == "day" and len(period.days()) > MAX_SERIES_DAYS:
        raise ToolFailure(
            "invalid_arguments",
            f"A per-day series covers at most {MAX_SERIES_DAYS} days.",
            hint="Shorten the range, or use group_by='channel'.",
        )
    inbound_call = _is(_call.c.direction, Direction.INBOUND)
    calls = sa.select(
        _count_if(inbound_call).label("inbound"),
        _count_if(_is(_call.c.direction, Direction.OUTBOUND)).label("outbound"),
        _count_if(sa.and_(inbound_call, _is(_call.c.status, CallStatus.ANSWERED))).label("inbound_answered"),
        _count_if(
            sa.and_(_is(_call.c.direction, Direction.OUTBOUND), _is(_call.c.status, CallStatus.ANSWERED))
        ).label("outbound_answered"),
        sa.func.coalesce(sa.func.sum(_call.c.duration_seconds), 0).label("talk_seconds"),
    ).where(_org(_call, ctx), period.contains(_call.c.started_at))
    sms = sa.select(
        _count_if(_is(_sms.c.direction, Direction.INBOUND)).label("inbound"),
        _count_if(_is(_sms.c.direction, Direction.OUTBOUND)).label("outbound"),
        _count_if(_is(_sms.c.status, SmsStatus.FAILED)).label("failed"),
    ).where(_org(_sms, ctx), period.contains(_sms.c.created_at))
    engaged = sa.union(
        sa.select(_call.c.contact_id.label("contact_id")).where(
            _org(_call, ctx), period.contains(_call.c.started_at), _call.c.contact_id.is_not(None)
        ),
        sa.select(_sms.c.contact_id.label("contact_id")).where(
            _org(_sms, ctx), period.contains(_sms.c.created_at), _sms.c.contact_id.is_not(None)
        ),
    ).subquery()
    async with ctx.resources.connect() as connection:
        call_row = (await connection.execute(calls)).one()
        sms_row = (await connection.execute(sms)).one()
        contacts = await connection.scalar(sa.select(sa.func.count()).select_from(engaged))
        replies = await _first_answer(connection, ctx, period, _sms, "created_at", _inbound, _outbound)
        callbacks = await _first_answer(
            connection, ctx, period, _call, "started_at", _missed_inbound_call, _outbound
        )
        days = await _days(connection, ctx, period) if args.group_by == "day" else None
    result: dict[str, Any] = {
        "period": period.describe(),
        "calls": {
            "inbound": call_row.inbound,
            "outbound": call_row.outbound,
            "inbound_answered": call_row.inbound_answered,
            "answer_rate": _rate(call_row.inbound_answered, call_row.inbound),
            "outbound_answered": call_row.outbound_answered,
            "outbound_connect_rate": _rate(call_row.outbound_answered, call_row.outbound),
            "talk_time_minutes": _minutes(call_row.talk_seconds),
        },
        "sms": {"inbound": sms_row.inbound, "outbound": sms_row.outbound, "failed": sms_row.failed},
        "contacts_engaged": contacts,
        "response_times": {
            "sms_replies": _answers("messages", "replied", replies),
            "missed_call_callbacks": _answers("missed_calls", "called_back", callbacks),
        },
    }
    if days is not None:
        result["days"] = days
    return result


def _answers(asked: str, answered: str, row: Any) -> dict[str, Any]:
    total, done, average, within_hour = row
    return {
        asked: total,
        answered: done,
        "average_minutes": _minutes(average),
        "within_1_hour": within_hour,
    }


async def _days(connection: AsyncConnection, ctx: CrmContext, period: Period) -> list[dict[str, Any]]:
    # Bucketed in a subquery so that GROUP BY names a column, not a second copy of the CASE and its
    # parameters (which PostgreSQL would not recognise as the same expression).
    calls = (
        sa.select(
            period.by_day(_call.c.started_at).label("day"),
            _call.c.status,
        )
        .where(_org(_call, ctx), period.contains(_call.c.started_at))
        .subquery()
    )
    messages = (
        sa.select(period.by_day(_sms.c.created_at).label("day"), _sms.c.direction)
        .where(_org(_sms, ctx), period.contains(_sms.c.created_at))
        .subquery()
    )
    call_rows = await connection.execute(
        sa.select(
            calls.c.day,
            sa.func.count(),
            _count_if(calls.c.status == CallStatus.ANSWERED.value),
            _count_if(calls.c.status == CallStatus.MISSED.value),
        ).group_by(calls.c.day)
    )
    sms_rows = await connection.execute(
        sa.select(
            messages.c.day,
            _count_if(messages.c.direction == Direction.INBOUND.value),
            _count_if(messages.c.direction == Direction.OUTBOUND.value),
        ).group_by(messages.c.day)
    )
    per_call = {day: (total, answered, missed) for day, total, answered, missed in call_rows}
    per_sms = {day: (inbound, outbound) for day, inbound, outbound in sms_rows}
    series = []
    for index, day in enumerate(period.days()):
        total, answered, missed = per_call.get(index, (0, 0, 0))
        inbound, outbound = per_sms.get(index, (0, 0))
        series.append(
            {
                "date": day.isoformat(),
                "calls": total,
                "answered": answered,
                "missed": missed,
                "sms_in": inbound,
                "sms_out": outbound,
            }
        )
    return series


async def get_plan_stats(ctx: CrmContext, args: DateRangeArgs) -> dict[str, Any]:
    period = args.period(ctx, 30)
    started = sa.and_(
        _plan.c.template_id == _template.c.id,
        _plan.c.organization_id == _template.c.organization_id,
        period.contains(_plan.c.started_at),
    )
    by_template = (
        sa.select(
            _template.c.id,
            _template.c.name,
            sa.func.count(_plan.c.id).label("started"),
            _count_if(_is(_plan.c.status, PlanStatus.ACTIVE)).label("active"),
            _count_if(_is(_plan.c.status, PlanStatus.COMPLETED)).label("completed"),
            _count_if(_is(_plan.c.status, PlanStatus.CANCELLED)).label("cancelled"),
        )
        .select_from(_template.outerjoin(_plan, started))
        .where(_org(_template, ctx))
        .group_by(_template.c.id, _template.c.name)
        .order_by(sa.func.count(_plan.c.id).desc(), _template.c.name)
    )
    finished = sa.and_(_org(_plan, ctx), _is(_plan.c.status, PlanStatus.COMPLETED))
    completed = sa.select(
        sa.func.count(),
        sa.func.avg(seconds_since_epoch(_plan.c.completed_at) - seconds_since_epoch(_plan.c.started_at)),
    ).where(finished, period.contains(_plan.c.completed_at))
    async with ctx.resources.connect() as connection:
        templates = (await connection.execute(by_template)).all()
        completed_count, average_seconds = (await connection.execute(completed)).one()
        active_now = await connection.scalar(
            sa.select(sa.func.count())
            .select_from(_plan)
            .where(_org(_plan, ctx), _is(_plan.c.status, PlanStatus.ACTIVE))
        )
    total = sum(row.started for row in templates)
    by_status = {status.value: sum(getattr(row, status.value) for row in templates) for status in PlanStatus}
    return {
        "period": period.describe(),
        "started": total,
        "by_status": by_status,
        "completion_rate": _rate(by_status[PlanStatus.COMPLETED], total),
        "by_template": [
            {
                "template_id": str(row.id),
                "name": row.name,
                "started": row.started,
                "active": row.active,
                "completed": row.completed,
                "cancelled": row.cancelled,
                "completion_rate": _rate(row.completed, row.started),
            }
            for row in templates
        ],
        "completed_in_period": completed_count,
        "average_days_to_complete": (
            None if average_seconds is None else round(float(average_seconds) / 86400, 1)
        ),
        "active_now": active_now,
    }


async def get_activity_counts(ctx: CrmContext, args: DateRangeArgs) -> dict[str, Any]:
    period = args.period(ctx, 7)
    sms_in_period = sa.and_(_org(_sms, ctx), period.contains(_sms.c.created_at))
    task = _org(_task, ctx)
    query = sa.select(
        _count(_call, _org(_call, ctx), period.contains(_call.c.started_at)).label("calls"),
        _count(_sms, sms_in_period, _is(_sms.c.direction, Direction.INBOUND)).label("messages_received"),
        _count(_sms, sms_in_period, _is(_sms.c.direction, Direction.OUTBOUND)).label("messages_sent"),
        _count(_note, _org(_note, ctx), period.contains(_note.c.created_at)).label("notes"),
        _count(_task, task, period.contains(_task.c.created_at)).label("tasks_created"),
        _count(_task, task, period.contains(_task.c.completed_at)).label("tasks_completed"),
        _count(_contact, _org(_contact, ctx), period.contains(_contact.c.created_at)).label(
            "contacts_created"
        ),
        _count(_plan, _org(_plan, ctx), period.contains(_plan.c.started_at)).label("plans_started"),
    )
    async with ctx.resources.connect() as connection:
        row = (await connection.execute(query)).one()
    return {"period": period.describe(), **row._asdict()}


TOOLS = (
    Tool(
        "get_dashboard_stats",
        CATEGORY,
        "Key numbers for a range of days (default: the last 7): calls by direction and outcome (missed: "
        "nobody picked up, either way; missed_inbound: callers nobody answered), average answered call "
        "length, SMS in and out, new contacts; plus open and overdue tasks and active plans right now.",
        DateRangeArgs,
        "dashboard:view",
        False,
        get_dashboard_stats,
    ),
    Tool(
        "get_engagement_stats",
        CATEGORY,
        "How the organization engaged with contacts over a range of days (default: the last 30): calls and "
        "SMS per channel, inbound answer rate, contacts reached, SMS reply and missed-call callback "
        "times; optionally one row per day.",
        EngagementArgs,
        "dashboard:view",
        False,
        get_engagement_stats,
    ),
    Tool(
        "get_plan_stats",
        CATEGORY,
        "Plans started in a range of days (default: the last 30) by status and by template, with the "
        "completion rate (completed / started); plans completed in the range and how long they took.",
        DateRangeArgs,
        "dashboard:view",
        False,
        get_plan_stats,
    ),
    Tool(
        "get_activity_counts",
        CATEGORY,
        "How much happened in a range of days (default: the last 7): calls, SMS received and sent, notes, "
        "tasks created and completed, contacts created, plans started.",
        DateRangeArgs,
        "dashboard:view",
        False,
        get_activity_counts,
    ),
)
