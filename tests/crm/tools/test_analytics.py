"""Analytics tools against the seeded demo: every figure equals what the test computes itself from
the raw rows, over days on the organization's calendar (Acme: New York), on both backends."""

from __future__ import annotations

import bisect
import uuid
from collections import Counter
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from tests.crm.tools.conftest import Tools, data
from vernis.store.models import Member, table_of
from vernis_crm.models import Call, Contact, ContactNote, Plan, PlanTemplate, SmsMessage, Task

NEW_YORK = ZoneInfo("America/New_York")
call = table_of(Call)
sms = table_of(SmsMessage)
contact = table_of(Contact)
note = table_of(ContactNote)
task = table_of(Task)
plan = table_of(Plan)
template = table_of(PlanTemplate)
member = table_of(Member)
ANALYTICS = {"get_dashboard_stats", "get_engagement_stats", "get_plan_stats", "get_activity_counts"}


def midnight(day: date, zone: ZoneInfo = NEW_YORK) -> datetime:
    return datetime.combine(day, time(), tzinfo=zone).astimezone(UTC)


def today(tools: Tools) -> date:
    return tools.seed.anchor.astimezone(NEW_YORK).date()


def days_ago(tools: Tools, first: int, last: int = 0) -> dict[str, str]:
    """The tool arguments for the New York days `first` to `last` days before the demo's today."""
    return {
        "from": (today(tools) - timedelta(days=first)).isoformat(),
        "to": (today(tools) - timedelta(days=last)).isoformat(),
    }


async def rows(tools: Tools, table: sa.Table, slug: str = "acme") -> list[Any]:
    """Every row of `table` that belongs to the organization `slug`."""
    async with tools.engine.connect() as connection:
        result = await connection.execute(
            sa.select(table).where(table.c.organization_id == tools.seed.organizations[slug])
        )
        return list(result)


def within(moment: datetime | None, args: dict[str, str], zone: ZoneInfo = NEW_YORK) -> bool:
    if moment is None:
        return False
    start = midnight(date.fromisoformat(args["from"]), zone)
    end = midnight(date.fromisoformat(args["to"]) + timedelta(days=1), zone)
    return start <= moment < end


def rate(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


async def test_dashboard_stats_match_the_rows(tools: Tools) -> None:
    """get_dashboard_stats counts Acme's calls, SMS and new contacts of the New York days asked for, and open, overdue tasks and active plans now."""
    args = days_ago(tools, 6)
    before = datetime.now(UTC)
    result = data(await tools.call("viewer@acme.test", "get_dashboard_stats", args))
    after = datetime.now(UTC)
    calls = [row for row in await rows(tools, call) if within(row.started_at, args)]
    answered = [row.duration_seconds for row in calls if row.status == "answered"]
    messages = Counter(row.direction for row in await rows(tools, sms) if within(row.created_at, args))
    tasks = [row for row in await rows(tools, task) if row.status == "open"]
    overdue = {row.id for row in tasks if row.due_at is not None and row.due_at < before}
    overdue_later = {row.id for row in tasks if row.due_at is not None and row.due_at < after}
    assert calls
    assert result == {
        "period": {**args, "timezone": "America/New_York"},
        "calls": {
            "total": len(calls),
            "inbound": sum(row.direction == "inbound" for row in calls),
            "outbound": sum(row.direction == "outbound" for row in calls),
            "answered": len(answered),
            "missed": sum(row.status == "missed" for row in calls),
            "missed_inbound": sum(row.status == "missed" and row.direction == "inbound" for row in calls),
            "voicemail": sum(row.status == "voicemail" for row in calls),
            "average_duration_seconds": round(sum(answered) / len(answered)),
        },
        "messages": {"inbound": messages["inbound"], "outbound": messages["outbound"]},
        "new_contacts": sum(within(row.created_at, args) for row in await rows(tools, contact)),
        "current": {
            "open_tasks": len(tasks),
            "overdue_tasks": result["current"]["overdue_tasks"],
            "active_plans": sum(row.status == "active" for row in await rows(tools, plan)),
        },
    }
    assert len(overdue) <= result["current"]["overdue_tasks"] <= len(overdue_later)
    assert overdue


async def test_default_range_is_the_last_seven_local_days(tools: Tools) -> None:
    """Without from/to the dashboard covers the last 7 days up to today in New York."""
    before = datetime.now(NEW_YORK).date()
    period = data(await tools.call("viewer@acme.test", "get_dashboard_stats", {}))["period"]
    after = datetime.now(NEW_YORK).date()
    assert period["to"] in {before.isoformat(), after.isoformat()}
    assert date.fromisoformat(period["to"]) - date.fromisoformat(period["from"]) == timedelta(days=6)


def first_answers(asked: list[Any], answers: list[Any], at: str) -> tuple[int, int, float | None, int]:
    """(asked, answered, average minutes, within an hour): each asked row's first later answer."""
    times: dict[Any, list[datetime]] = {}
    for row in answers:
        times.setdefault(row.contact_id, []).append(getattr(row, at))
    for moments in times.values():
        moments.sort()
    delays = []
    for row in asked:
        moments = times.get(row.contact_id, [])
        index = bisect.bisect_right(moments, getattr(row, at))
        if index < len(moments):
            delays.append((moments[index] - getattr(row, at)).total_seconds())
    average = sum(delays) / len(delays) / 60 if delays else None
    return len(asked), len(delays), average, sum(delay <= 3600 for delay in delays)


async def test_engagement_stats_per_channel_match_the_rows(tools: Tools) -> None:
    """get_engagement_stats gives per-channel counts, the inbound answer rate, contacts reached and SMS reply and missed-call callback times."""
    args = days_ago(tools, 29)
    result = data(await tools.call("member@acme.test", "get_engagement_stats", args))
    all_calls, all_sms = await rows(tools, call), await rows(tools, sms)
    calls = [row for row in all_calls if within(row.started_at, args)]
    messages = [row for row in all_sms if within(row.created_at, args)]
    inbound = [row for row in calls if row.direction == "inbound"]
    outbound = [row for row in calls if row.direction == "outbound"]
    inbound_answered = sum(row.status == "answered" for row in inbound)
    outbound_answered = sum(row.status == "answered" for row in outbound)
    replies = first_answers(
        [row for row in messages if row.direction == "inbound" and row.contact_id is not None],
        [row for row in all_sms if row.direction == "outbound"],
        "created_at",
    )
    callbacks = first_answers(
        [row for row in inbound if row.status == "missed" and row.contact_id is not None],
        [row for row in all_calls if row.direction == "outbound"],
        "started_at",
    )
    engaged = {row.contact_id for row in calls + messages if row.contact_id is not None}
    assert replies[1] > 0
    assert callbacks[1] > 0
    times = result.pop("response_times")
    for key, names, expected in (
        ("sms_replies", ("messages", "replied"), replies),
        ("missed_call_callbacks", ("missed_calls", "called_back"), callbacks),
    ):
        asked, answered, average, within_hour = expected
        assert times[key] == {
            names[0]: asked,
            names[1]: answered,
            # Rounded to 0.1 minute from an average the database computed in floating point.
            "average_minutes": pytest.approx(average, abs=0.051),
            "within_1_hour": within_hour,
        }
    assert result == {
        "period": {**args, "timezone": "America/New_York"},
        "calls": {
            "inbound": len(inbound),
            "outbound": len(outbound),
            "inbound_answered": inbound_answered,
            "answer_rate": rate(inbound_answered, len(inbound)),
            "outbound_answered": outbound_answered,
            "outbound_connect_rate": rate(outbound_answered, len(outbound)),
            "talk_time_minutes": round(sum(row.duration_seconds for row in calls) / 60, 1),
        },
        "sms": {
            "inbound": sum(row.direction == "inbound" for row in messages),
            "outbound": sum(row.direction == "outbound" for row in messages),
            "failed": sum(row.status == "failed" for row in messages),
        },
        "contacts_engaged": len(engaged),
    }


async def test_engagement_stats_per_day_follow_local_days(tools: Tools) -> None:
    """group_by='day' adds one row per New York day whose counts are the rows of that local day."""
    args = days_ago(tools, 13)
    result = data(await tools.call("member@acme.test", "get_engagement_stats", {**args, "group_by": "day"}))
    calls = [row for row in await rows(tools, call) if within(row.started_at, args)]
    messages = [row for row in await rows(tools, sms) if within(row.created_at, args)]

    def local_day(moment: datetime) -> str:
        return moment.astimezone(NEW_YORK).date().isoformat()

    expected = []
    for offset in range(13, -1, -1):
        day = (today(tools) - timedelta(days=offset)).isoformat()
        on_day = [row for row in calls if local_day(row.started_at) == day]
        texts = [row for row in messages if local_day(row.created_at) == day]
        expected.append(
            {
                "date": day,
                "calls": len(on_day),
                "answered": sum(row.status == "answered" for row in on_day),
                "missed": sum(row.status == "missed" for row in on_day),
                "sms_in": sum(row.direction == "inbound" for row in texts),
                "sms_out": sum(row.direction == "outbound" for row in texts),
            }
        )
    assert result["days"] == expected
    assert sum(day["calls"] for day in expected) == result["calls"]["inbound"] + result["calls"]["outbound"]


async def test_day_boundary_is_local_midnight(tools: Tools) -> None:
    """A call and an SMS at 23:59:59 New York time count on that local day (UTC says the next), their successors a second later on the next."""
    day = today(tools) + timedelta(days=3)  # after the demo data: only the rows below fall on it
    late = midnight(day + timedelta(days=1)) - timedelta(seconds=1)
    acme = tools.seed.organizations["acme"]
    async with tools.engine.begin() as connection:
        for moment in (late, late + timedelta(seconds=1)):
            await connection.execute(
                sa.insert(call).values(
                    id=uuid.uuid4(),
                    organization_id=acme,
                    direction="inbound",
                    status="missed",
                    duration_seconds=0,
                    started_at=moment,
                )
            )
            await connection.execute(
                sa.insert(sms).values(
                    id=uuid.uuid4(),
                    organization_id=acme,
                    direction="inbound",
                    status="received",
                    body="Hello",
                    created_at=moment,
                )
            )
    assert late.astimezone(UTC).date() == day + timedelta(days=1)
    for when in (day, day + timedelta(days=1)):
        args = {"from": when.isoformat(), "to": when.isoformat()}
        counts = data(await tools.call("member@acme.test", "get_activity_counts", args))
        assert (counts["calls"], counts["messages_received"]) == (1, 1), when
    series = data(
        await tools.call(
            "member@acme.test",
            "get_engagement_stats",
            {"from": day.isoformat(), "to": (day + timedelta(days=1)).isoformat(), "group_by": "day"},
        )
    )["days"]
    assert [(d["date"], d["calls"], d["missed"], d["sms_in"]) for d in series] == [
        (day.isoformat(), 1, 1, 1),
        ((day + timedelta(days=1)).isoformat(), 1, 1, 1),
    ]


async def test_plan_stats_match_the_rows(tools: Tools) -> None:
    """get_plan_stats counts plans started in the range by status and template, the completion rate, completions in the range and their length."""
    args = days_ago(tools, 59)
    result = data(await tools.call("viewer@acme.test", "get_plan_stats", args))
    plans = await rows(tools, plan)
    started = [row for row in plans if within(row.started_at, args)]
    by_status = Counter(row.status for row in started)
    completed = [row for row in plans if row.status == "completed" and within(row.completed_at, args)]
    per_template = []
    for row in await rows(tools, template):
        mine = Counter(p.status for p in started if p.template_id == row.id)
        total = sum(mine.values())
        per_template.append(
            {
                "template_id": str(row.id),
                "name": row.name,
                "started": total,
                "active": mine["active"],
                "completed": mine["completed"],
                "cancelled": mine["cancelled"],
                "completion_rate": rate(mine["completed"], total),
            }
        )
    per_template.sort(key=lambda item: (-item["started"], item["name"]))
    days = [(row.completed_at - row.started_at).total_seconds() / 86400 for row in completed]
    assert completed
    assert result == {
        "period": {**args, "timezone": "America/New_York"},
        "started": len(started),
        "by_status": {status: by_status[status] for status in ("active", "completed", "cancelled")},
        "completion_rate": rate(by_status["completed"], len(started)),
        "by_template": per_template,
        "completed_in_period": len(completed),
        "average_days_to_complete": round(sum(days) / len(days), 1),
        "active_now": sum(row.status == "active" for row in plans),
    }


async def test_activity_counts_match_the_rows(tools: Tools) -> None:
    """get_activity_counts counts calls, SMS each way, notes, tasks created and completed, contacts and plans of the range."""
    args = days_ago(tools, 6)
    result = data(await tools.call("member@acme.test", "get_activity_counts", args))
    messages = Counter(row.direction for row in await rows(tools, sms) if within(row.created_at, args))
    tasks = await rows(tools, task)
    expected = {
        "period": {**args, "timezone": "America/New_York"},
        "calls": sum(within(row.started_at, args) for row in await rows(tools, call)),
        "messages_received": messages["inbound"],
        "messages_sent": messages["outbound"],
        "notes": sum(within(row.created_at, args) for row in await rows(tools, note)),
        "tasks_created": sum(within(row.created_at, args) for row in tasks),
        "tasks_completed": sum(within(row.completed_at, args) for row in tasks),
        "contacts_created": sum(within(row.created_at, args) for row in await rows(tools, contact)),
        "plans_started": sum(within(row.started_at, args) for row in await rows(tools, plan)),
    }
    assert result == expected
    assert expected["notes"]
    assert expected["tasks_created"]


async def test_analytics_count_only_the_callers_organization(tools: Tools) -> None:
    """Acme's and Globex's activity counts each cover their own rows only (Globex days are Berlin days), adding up to all rows."""
    berlin = ZoneInfo("Europe/Berlin")
    acme_args = days_ago(tools, 89)
    globex_args = {
        "from": (tools.seed.anchor.astimezone(berlin).date() - timedelta(days=89)).isoformat(),
        "to": tools.seed.anchor.astimezone(berlin).date().isoformat(),
    }
    acme = data(await tools.call("owner@acme.test", "get_activity_counts", acme_args))
    globex = data(await tools.call("owner@globex.test", "get_activity_counts", globex_args))
    assert globex["period"]["timezone"] == "Europe/Berlin"
    acme_calls = sum(within(row.started_at, acme_args) for row in await rows(tools, call))
    globex_calls = sum(
        within(row.started_at, globex_args, berlin) for row in await rows(tools, call, "globex")
    )
    assert (acme["calls"], globex["calls"]) == (acme_calls, globex_calls)
    async with tools.engine.connect() as connection:
        everything = await connection.scalar(sa.select(sa.func.count()).select_from(call))
    assert acme_calls + globex_calls == everything
    assert 0 < globex_calls < acme_calls


async def test_analytics_permission_gate(tools: Tools) -> None:
    """Even the viewer is offered the analytics tools; with dashboard:view revoked they are not offered and refused."""
    assert ANALYTICS.issubset(await tools.offered("viewer@acme.test"))
    async with tools.engine.begin() as connection:
        await connection.execute(
            sa.update(member)
            .where(member.c.email == "viewer@acme.test")
            .values(revoked_permissions=["dashboard:view"])
        )
    assert not ANALYTICS & await tools.offered("viewer@acme.test")
    for name in sorted(ANALYTICS):
        outcome = await tools.call("viewer@acme.test", name, {})
        assert outcome.envelope["error"]["code"] == "forbidden", name


async def test_analytics_refuse_bad_ranges(tools: Tools) -> None:
    """A reversed range, a range over 366 days, a per-day series over 92 days or a non-date is invalid_arguments."""
    cases = [
        ("get_dashboard_stats", {"from": "2025-05-10", "to": "2025-05-01"}),
        ("get_activity_counts", {"from": "2024-01-01", "to": "2025-01-01"}),
        ("get_engagement_stats", {"from": "2025-01-01", "to": "2025-04-30", "group_by": "day"}),
        ("get_plan_stats", {"from": "last week"}),
        ("get_plan_stats", {"since": "2025-01-01"}),
    ]
    for name, args in cases:
        outcome = await tools.call("member@acme.test", name, args)
        assert outcome.envelope["ok"] is False, (name, args)
        assert outcome.envelope["error"]["code"] == "invalid_arguments", (name, args)
    ok = await tools.call(
        "member@acme.test", "get_engagement_stats", {"from": "2025-01-01", "to": "2025-04-30"}
    )
    assert ok.status == "ok"
