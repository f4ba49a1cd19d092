"""Calls tools against the seeded demo: get_recent_calls (newest first, filters, cursor) and
get_call_details, their permission gates and their organization scope."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from tests.crm.tools.conftest import Tools, data
from vernis.store.models import Member, table_of
from vernis_crm.models import Call, PhoneNumber

NEW_YORK = ZoneInfo("America/New_York")
call = table_of(Call)
member = table_of(Member)
line = table_of(PhoneNumber)


def midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=NEW_YORK).astimezone(UTC)


def today(tools: Tools) -> date:
    return tools.seed.anchor.astimezone(NEW_YORK).date()


async def call_ids(tools: Tools, *conditions: Any, limit: int = 1000) -> list[str]:
    query = (
        sa.select(call.c.id)
        .where(call.c.organization_id == tools.seed.organizations["acme"], *conditions)
        .order_by(call.c.started_at.desc(), call.c.id.desc())
        .limit(limit)
    )
    async with tools.engine.connect() as connection:
        return [str(id_) for id_ in (await connection.execute(query)).scalars()]


async def test_recent_calls_pages_newest_first(tools: Tools) -> None:
    """get_recent_calls lists Acme's calls newest first, `limit` at a time, and its cursor continues exactly where the page ended."""
    expected = await call_ids(tools, limit=9)
    first = data(await tools.call("viewer@acme.test", "get_recent_calls", {"limit": 5}))
    assert first["has_more"] is True
    second = data(
        await tools.call("viewer@acme.test", "get_recent_calls", {"limit": 4, "cursor": first["next_cursor"]})
    )
    assert [c["id"] for c in first["calls"] + second["calls"]] == expected
    item = first["calls"][0]
    assert set(item) == {
        "id",
        "at",
        "direction",
        "status",
        "duration_seconds",
        "contact",
        "number",
        "line",
        "agent",
        "summary",
    }
    async with tools.engine.connect() as connection:
        row = (await connection.execute(sa.select(call).where(call.c.id == uuid.UUID(item["id"])))).one()
    at = datetime.fromisoformat(item["at"])
    assert at == row.started_at.replace(second=0, microsecond=0)
    assert at.utcoffset() == row.started_at.astimezone(NEW_YORK).utcoffset()
    assert (item["direction"], item["status"], item["duration_seconds"]) == (
        row.direction,
        row.status,
        row.duration_seconds,
    )


async def test_recent_calls_filters_by_direction_status_and_local_days(tools: Tools) -> None:
    """Direction, status and a from/to range of New York days select exactly the calls a plain query selects."""
    first, last = today(tools) - timedelta(days=12), today(tools) - timedelta(days=3)
    expected = await call_ids(
        tools,
        call.c.direction == "inbound",
        call.c.status == "missed",
        call.c.started_at >= midnight(first),
        call.c.started_at < midnight(last + timedelta(days=1)),
    )
    assert 0 < len(expected) <= 50
    result = data(
        await tools.call(
            "member@acme.test",
            "get_recent_calls",
            {
                "direction": "inbound",
                "status": "missed",
                "from": first.isoformat(),
                "to": last.isoformat(),
                "limit": 50,
            },
        )
    )
    assert [c["id"] for c in result["calls"]] == expected
    assert result["has_more"] is False
    assert result["next_cursor"] is None


async def test_recent_calls_day_boundary_is_local_midnight(tools: Tools) -> None:
    """A call at 23:59:59 New York time belongs to that local day, though in UTC it is the next day."""
    day = today(tools) + timedelta(days=3)
    late = midnight(day + timedelta(days=1)) - timedelta(seconds=1)
    ids = {"late": uuid.uuid4(), "next": uuid.uuid4()}
    async with tools.engine.begin() as connection:
        await connection.execute(
            sa.insert(call),
            [
                {
                    "id": ids["late"],
                    "organization_id": tools.seed.organizations["acme"],
                    "direction": "inbound",
                    "status": "answered",
                    "duration_seconds": 60,
                    "started_at": late,
                },
                {
                    "id": ids["next"],
                    "organization_id": tools.seed.organizations["acme"],
                    "direction": "inbound",
                    "status": "answered",
                    "duration_seconds": 60,
                    "started_at": late + timedelta(seconds=1),
                },
            ],
        )
    assert late.date() == day + timedelta(days=1)  # in UTC it is already the next day
    for when, key in ((day, "late"), (day + timedelta(days=1), "next")):
        result = data(
            await tools.call(
                "member@acme.test", "get_recent_calls", {"from": when.isoformat(), "to": when.isoformat()}
            )
        )
        assert [c["id"] for c in result["calls"]] == [str(ids[key])]


async def test_recent_calls_of_one_contact(tools: Tools) -> None:
    """contact_id lists all of Jane Cooper's calls, her star call among them, with her name on each."""
    jane = tools.entity("acme:contact:Jane Cooper")
    expected = await call_ids(tools, call.c.contact_id == jane)
    result = data(
        await tools.call("member@acme.test", "get_recent_calls", {"contact_id": str(jane), "limit": 50})
    )
    assert [c["id"] for c in result["calls"]] == expected
    assert str(tools.entity("acme:call:Jane Cooper")) in expected
    assert {c["contact"]["name"] for c in result["calls"]} == {"Jane Cooper"}


async def test_call_details_of_the_star_call(tools: Tools) -> None:
    """get_call_details returns the whole call: time in New York, contact, our line, the agent and the full summary."""
    call_id = tools.entity("acme:call:Jane Cooper")
    async with tools.engine.connect() as connection:
        row = (await connection.execute(sa.select(call).where(call.c.id == call_id))).one()
        line_number = await connection.scalar(
            sa.select(line.c.number).where(line.c.id == tools.entity("acme:phone_number:Main line"))
        )
    result = data(await tools.call("viewer@acme.test", "get_call_details", {"call_id": str(call_id)}))
    assert result == {
        "id": str(call_id),
        "at": row.started_at.astimezone(NEW_YORK).isoformat(timespec="seconds"),
        "direction": "inbound",
        "status": "answered",
        "duration_seconds": 412,
        "contact": {
            "id": str(tools.entity("acme:contact:Jane Cooper")),
            "name": "Jane Cooper",
            "company": "Hudson Yards Capital",
        },
        "number": "+12125550147",
        "line": {
            "id": str(tools.entity("acme:phone_number:Main line")),
            "label": "Main line",
            "number": line_number,
        },
        "agent": {"id": str(tools.entity("acme:voice_agent:Front Desk Ava")), "name": "Front Desk Ava"},
        "summary": row.summary,
    }
    assert row.summary


async def test_calls_are_scoped_to_the_organization(tools: Tools) -> None:
    """A Globex call or contact id given to an Acme member is not found, and Acme's list holds no Globex call."""
    globex_call = tools.entity("globex:call:Jane Cooper")
    details = await tools.call("owner@acme.test", "get_call_details", {"call_id": str(globex_call)})
    assert details.envelope["ok"] is False
    assert details.envelope["error"]["code"] == "not_found"
    assert "renewal" not in str(details.envelope)  # nothing of Globex's call leaks
    by_contact = await tools.call(
        "owner@acme.test", "get_recent_calls", {"contact_id": str(tools.entity("globex:contact:Jane Cooper"))}
    )
    assert by_contact.envelope["error"]["code"] == "not_found"
    assert by_contact.envelope["error"]["hint"]
    listed = data(await tools.call("owner@acme.test", "get_recent_calls", {"limit": 50}))
    assert str(globex_call) not in {c["id"] for c in listed["calls"]}
    own = data(await tools.call("owner@globex.test", "get_call_details", {"call_id": str(globex_call)}))
    assert own["contact"]["name"] == "Jane Cooper"


async def test_calls_permission_gate(tools: Tools) -> None:
    """The viewer is offered both calls tools; with call:list and call:view revoked they are not offered and refused."""
    assert {"get_recent_calls", "get_call_details"} <= await tools.offered("viewer@acme.test")
    async with tools.engine.begin() as connection:
        await connection.execute(
            sa.update(member)
            .where(member.c.email == "viewer@acme.test")
            .values(revoked_permissions=["call:list", "call:view"])
        )
    assert not {"get_recent_calls", "get_call_details"} & await tools.offered("viewer@acme.test")
    for name, args in (
        ("get_recent_calls", {}),
        ("get_call_details", {"call_id": str(tools.entity("acme:call:Jane Cooper"))}),
    ):
        outcome = await tools.call("viewer@acme.test", name, args)
        assert outcome.envelope["error"]["code"] == "forbidden"


async def test_recent_calls_refuses_bad_arguments(tools: Tools) -> None:
    """A foreign cursor, a reversed range, a limit over 50 or an unknown argument is invalid_arguments with a hint."""
    for args in (
        {"cursor": "page-2"},
        {"from": "2025-05-10", "to": "2025-05-01"},
        {"limit": 51},
        {"when": "yesterday"},
    ):
        outcome = await tools.call("member@acme.test", "get_recent_calls", args)
        assert outcome.envelope["ok"] is False, args
        assert outcome.envelope["error"]["code"] == "invalid_arguments", args
        assert outcome.envelope["error"]["hint"], args
