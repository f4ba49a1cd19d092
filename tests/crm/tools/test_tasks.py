"""Tasks tools against the seeded demo: listing with filters, creating, changing and moving tasks
through open / done / dismissed."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from tests.crm.tools.conftest import Tools, data, error_code
from vernis.store.models import AuditEntry, table_of, utcnow
from vernis_crm.models import Task

OWNER = "owner@acme.test"
MEMBER = "member@acme.test"
VIEWER = "viewer@acme.test"
GLOBEX = "owner@globex.test"
NEW_YORK = ZoneInfo("America/New_York")
STAR = "acme:task:Call Jane Cooper about her crown fitting"

TASK_TOOLS = {"get_tasks", "create_task", "update_task", "complete_task", "dismiss_task", "reopen_task"}
_task = table_of(Task)
_audit = table_of(AuditEntry)

Rows = dict[uuid.UUID, dict[str, Any]]


def local(moment: datetime) -> str:
    return moment.astimezone(NEW_YORK).isoformat(timespec="minutes")


async def snapshot(tools: Tools) -> Rows:
    """Every task row of every organization, by id."""
    async with tools.engine.connect() as connection:
        return {row.id: dict(row._mapping) for row in await connection.execute(sa.select(_task))}


def changes(before: Rows, after: Rows) -> dict[uuid.UUID, dict[str, Any]]:
    """What differs: new rows whole, changed rows as {column: new value}."""
    diff: dict[uuid.UUID, dict[str, Any]] = {}
    for id_, row in after.items():
        old = before.get(id_)
        if old is None:
            diff[id_] = row
        elif old != row:
            diff[id_] = {key: value for key, value in row.items() if old[key] != value}
    assert before.keys() <= after.keys()
    return diff


async def confirmed(tools: Tools, email: str, name: str, arguments: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The whole flow: a preview that changes nothing, the approved write and its audit row.
    Returns (preview, result, the task rows that changed)."""
    before = await snapshot(tools)
    preview = await tools.call(email, name, arguments)
    assert preview.status == "needs_confirmation", preview.envelope
    assert await snapshot(tools) == before
    shown, envelope = await tools.write(email, name, arguments)
    assert shown.preview == preview.preview
    assert envelope["ok"], envelope
    async with tools.engine.connect() as connection:
        [entry] = await connection.execute(
            sa.select(_audit).where(_audit.c.approval_id == shown.confirmation_id)
        )
    assert (entry.tool_name, entry.outcome) == (name, "ok")
    return preview.preview, envelope["data"], changes(before, await snapshot(tools))


async def listed(tools: Tools, email: str, **arguments: Any) -> list[dict[str, Any]]:
    result = data(await tools.call(email, "get_tasks", {"limit": 50, **arguments}))
    assert not result["has_more"]
    assert result["total"] == len(result["tasks"])
    tasks: list[dict[str, Any]] = result["tasks"]
    return tasks


def due(task: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(task["due_at"])


async def test_roles_are_offered_the_task_tools_they_may_use(tools: Tools) -> None:
    """Owners and members get all six task tools; viewers only get_tasks, and their writes are forbidden."""
    for email in (OWNER, MEMBER):
        assert await tools.offered(email) >= TASK_TOOLS
    assert await tools.offered(VIEWER) & TASK_TOOLS == {"get_tasks"}
    star = str(tools.entity(STAR))
    before = await snapshot(tools)
    assert error_code(await tools.call(VIEWER, "create_task", {"title": "Nope"})) == "forbidden"
    for name in ("complete_task", "dismiss_task", "reopen_task"):
        assert error_code(await tools.call(VIEWER, name, {"task_id": star, "confirmed": True})) == "forbidden"
    assert (
        error_code(await tools.call(VIEWER, "update_task", {"task_id": star, "title": "Nope"})) == "forbidden"
    )
    assert await snapshot(tools) == before


async def test_get_tasks_lists_open_tasks_soonest_due_first(tools: Tools) -> None:
    """By default the open tasks, compact, ordered by due time, with overdue flags, a total and pages;
    Globex sees only its own."""
    before = utcnow()
    tasks = await listed(tools, VIEWER)
    after = utcnow()
    assert len(tasks) > 20
    assert {task["status"] for task in tasks} == {"open"}
    dues = [due(task) for task in tasks if task["due_at"] is not None]
    assert dues == sorted(dues)
    for task in tasks:
        assert set(task) <= {
            "id",
            "title",
            "status",
            "due_at",
            "overdue",
            "assignee",
            "contact",
            "description",
            "plan_id",
        }
        if due(task) < before:
            assert task["overdue"] is True
        elif due(task) >= after:
            assert task["overdue"] is False

    star = next(task for task in tasks if task["id"] == str(tools.entity(STAR)))
    anchor_day = tools.seed.anchor.astimezone(NEW_YORK).date()
    star_due = datetime.combine(anchor_day, time(16), NEW_YORK)
    assert {key: value for key, value in star.items() if key != "overdue"} == {
        "id": str(tools.entity(STAR)),
        "title": "Call Jane Cooper about her crown fitting",
        "status": "open",
        "due_at": local(star_due),
        "assignee": {"id": str(tools.seed.members[MEMBER]), "name": "Priya Raman"},
        "contact": {"id": str(tools.entity("acme:contact:Jane Cooper")), "name": "Jane Cooper"},
    }

    first = data(await tools.call(VIEWER, "get_tasks", {"limit": 10}))
    second = data(await tools.call(VIEWER, "get_tasks", {"limit": 10, "offset": 10}))
    assert (first["has_more"], first["next_offset"], first["total"]) == (True, 10, len(tasks))
    assert [task["id"] for task in first["tasks"] + second["tasks"]] == [task["id"] for task in tasks[:20]]
    assert error_code(await tools.call(VIEWER, "get_tasks", {"limit": 51})) == "invalid_arguments"

    globex = await listed(tools, GLOBEX, status="any")
    assert str(tools.entity("globex:task:Send Jane Cooper the renewal quote")) in {
        task["id"] for task in globex
    }
    assert not {task["id"] for task in globex} & {task["id"] for task in tasks}


async def test_get_tasks_filters_by_status_assignee_contact_and_due_date(tools: Tools) -> None:
    """Status, assignee (me, a name, an e-mail, unassigned), contact, a due-date day and overdue each
    narrow the list; Globex members and contacts are not found for Acme."""
    open_tasks = await listed(tools, MEMBER)
    done = await listed(tools, MEMBER, status="done")
    dismissed = await listed(tools, MEMBER, status="dismissed")
    assert {task["status"] for task in done} == {"done"}
    assert all(task["completed_at"] for task in done)
    assert [due(task) for task in done] == sorted((due(task) for task in done), reverse=True)
    assert {task["status"] for task in dismissed} == {"dismissed"}
    everything = data(await tools.call(MEMBER, "get_tasks", {"status": "any", "limit": 1}))
    assert everything["total"] == len(open_tasks) + len(done) + len(dismissed)

    priya = {"id": str(tools.seed.members[MEMBER]), "name": "Priya Raman"}
    mine = await listed(tools, MEMBER, assignee="me")
    assert mine == [task for task in open_tasks if task["assignee"] == priya]
    assert mine
    assert await listed(tools, OWNER, assignee="priya") == mine
    assert await listed(tools, OWNER, assignee="MEMBER@acme.test") == mine
    assert await listed(tools, OWNER, assignee=priya["id"]) == mine
    unassigned = await listed(tools, OWNER, assignee="unassigned")
    assert unassigned == [task for task in open_tasks if task["assignee"] is None]
    assert unassigned
    assert error_code(await tools.call(OWNER, "get_tasks", {"assignee": "a"})) == "ambiguous"
    foreign = await tools.call(OWNER, "get_tasks", {"assignee": "owner@globex.test"})
    assert error_code(foreign) == "not_found"
    assert "Priya Raman" in foreign.envelope["error"]["hint"]
    assert (
        error_code(await tools.call(OWNER, "get_tasks", {"assignee": str(tools.seed.members[GLOBEX])}))
        == "not_found"
    )

    jane = str(tools.entity("acme:contact:Jane Cooper"))
    about_jane = await listed(tools, MEMBER, contact_id=jane, status="any")
    assert str(tools.entity(STAR)) in {task["id"] for task in about_jane}
    assert {task["contact"]["id"] for task in about_jane} == {jane}
    globex_jane = str(tools.entity("globex:contact:Jane Cooper"))
    assert error_code(await tools.call(MEMBER, "get_tasks", {"contact_id": globex_jane})) == "not_found"

    day = tools.seed.anchor.astimezone(NEW_YORK).date()
    that_day = await listed(
        tools, MEMBER, due_after=day.isoformat(), due_before=(day + timedelta(days=1)).isoformat()
    )
    assert that_day == [task for task in open_tasks if due(task).astimezone(NEW_YORK).date() == day]
    assert str(tools.entity(STAR)) in {task["id"] for task in that_day}
    evening = await listed(tools, MEMBER, due_after=f"{day}T16:00", due_before=f"{day}T16:01")
    assert [task["id"] for task in evening] == [str(tools.entity(STAR))]

    before = utcnow()
    overdue = await listed(tools, MEMBER, overdue=True)
    assert overdue
    assert all(task["overdue"] and due(task) < utcnow() for task in overdue)
    assert {task["id"] for task in open_tasks if due(task) < before} <= {task["id"] for task in overdue}
    refused = await tools.call(MEMBER, "get_tasks", {"overdue": True, "status": "done"})
    assert error_code(refused) == "invalid_arguments"


async def test_create_task_reads_a_zoneless_due_time_in_the_organization_zone(tools: Tools) -> None:
    """A member's task is theirs by default, due at 10:30 New York time the day given, about the contact
    named; the write stores exactly the preview; foreign contacts and members are not found."""
    tomorrow = utcnow().astimezone(NEW_YORK).date() + timedelta(days=1)
    jane = str(tools.entity("acme:contact:Jane Cooper"))
    arguments = {"title": "Send Jane the X-rays", "due": f"{tomorrow}T10:30", "contact_id": jane}
    preview, result, rows = await confirmed(tools, MEMBER, "create_task", arguments)
    due_at = datetime.combine(tomorrow, time(10, 30), NEW_YORK)
    priya = {"id": str(tools.seed.members[MEMBER]), "name": "Priya Raman"}
    shown = {
        "title": "Send Jane the X-rays",
        "description": "",
        "due_at": local(due_at),
        "assignee": priya,
        "contact": {"id": jane, "name": "Jane Cooper"},
        "status": "open",
    }
    assert preview == {"action": "Create a task", "task": shown}
    [(id_, row)] = rows.items()
    assert result["task"] == {
        "id": str(id_),
        "title": "Send Jane the X-rays",
        "status": "open",
        "due_at": local(due_at),
        "overdue": False,
        "assignee": priya,
        "contact": {"id": jane, "name": "Jane Cooper"},
    }
    assert (row["organization_id"], row["status"], row["due_at"], row["completed_at"]) == (
        tools.seed.organizations["acme"],
        "open",
        due_at.astimezone(UTC),
        None,
    )
    assert (row["assignee_id"], row["contact_id"]) == (tools.seed.members[MEMBER], uuid.UUID(jane))

    by_date = (
        await tools.call(
            OWNER, "create_task", {"title": "Order gloves", "due": str(tomorrow), "assignee": "Marcus"}
        )
    ).preview
    assert by_date["task"]["due_at"] == local(datetime.combine(tomorrow, time(23, 59), NEW_YORK))
    assert by_date["task"]["assignee"] == {
        "id": str(tools.seed.members["admin@acme.test"]),
        "name": "Marcus Chen",
    }
    aware = (
        await tools.call(OWNER, "create_task", {"title": "Call lab", "due": f"{tomorrow}T15:00:00Z"})
    ).preview
    assert aware["task"]["due_at"] == local(datetime.combine(tomorrow, time(15), UTC))
    late = (await tools.call(OWNER, "create_task", {"title": "Late", "due": "2020-01-02"})).preview
    assert "past" in late["warning"]
    nobody = (await tools.call(OWNER, "create_task", {"title": "Anyone", "assignee": "unassigned"})).preview
    assert (nobody["task"]["assignee"], nobody["task"]["due_at"]) == (None, None)

    globex_jane = str(tools.entity("globex:contact:Jane Cooper"))
    assert (
        error_code(await tools.call(MEMBER, "create_task", {"title": "X", "contact_id": globex_jane}))
        == "not_found"
    )
    assert (
        error_code(await tools.call(MEMBER, "create_task", {"title": "X", "assignee": "Katrin Vogel"}))
        == "not_found"
    )
    assert (
        error_code(await tools.call(MEMBER, "create_task", {"title": "X", "due": "next week"}))
        == "invalid_arguments"
    )
    assert error_code(await tools.call(MEMBER, "create_task", {"title": ""})) == "invalid_arguments"


async def test_update_task_previews_each_change_from_to_and_applies_exactly_it(tools: Tools) -> None:
    """Title, due date, assignee and contact change from → to; the row changes in exactly those
    columns; no-ops, Globex tasks and Globex contacts are refused."""
    star = tools.entity(STAR)
    day = tools.seed.anchor.astimezone(NEW_YORK).date()
    new_day = day + timedelta(days=3)
    arguments = {
        "task_id": str(star),
        "title": "Call Jane Cooper about her crown",
        "due": str(new_day),
        "assignee": "Marcus Chen",
        "clear_contact": True,
    }
    preview, result, rows = await confirmed(tools, OWNER, "update_task", arguments)
    new_due = datetime.combine(new_day, time(23, 59), NEW_YORK)
    expected = {
        "title": {
            "from": "Call Jane Cooper about her crown fitting",
            "to": "Call Jane Cooper about her crown",
        },
        "due_at": {"from": local(datetime.combine(day, time(16), NEW_YORK)), "to": local(new_due)},
        "assignee": {
            "from": {"id": str(tools.seed.members[MEMBER]), "name": "Priya Raman"},
            "to": {"id": str(tools.seed.members["admin@acme.test"]), "name": "Marcus Chen"},
        },
        "contact": {
            "from": {"id": str(tools.entity("acme:contact:Jane Cooper")), "name": "Jane Cooper"},
            "to": None,
        },
    }
    assert preview == {
        "action": "Change a task",
        "task": {"id": str(star), "title": "Call Jane Cooper about her crown fitting", "status": "open"},
        "changes": expected,
    }
    assert result["changes"] == expected
    assert result["task"]["title"] == "Call Jane Cooper about her crown"
    assert rows.keys() == {star}
    assert rows[star].keys() == {"title", "due_at", "assignee_id", "contact_id", "updated_at"}
    assert rows[star]["due_at"] == new_due.astimezone(UTC)
    assert (rows[star]["assignee_id"], rows[star]["contact_id"]) == (
        tools.seed.members["admin@acme.test"],
        None,
    )

    same = await tools.call(
        OWNER, "update_task", {"task_id": str(star), "title": "Call Jane Cooper about her crown"}
    )
    assert error_code(same) == "no_change"
    globex_task = str(tools.entity("globex:task:Send Jane Cooper the renewal quote"))
    assert (
        error_code(await tools.call(OWNER, "update_task", {"task_id": globex_task, "title": "Mine now"}))
        == "not_found"
    )
    globex_jane = str(tools.entity("globex:contact:Jane Cooper"))
    foreign = await tools.call(OWNER, "update_task", {"task_id": str(star), "contact_id": globex_jane})
    assert error_code(foreign) == "not_found"
    both = await tools.call(OWNER, "update_task", {"task_id": str(star), "due": str(day), "clear_due": True})
    assert error_code(both) == "invalid_arguments"
    assert error_code(await tools.call(OWNER, "update_task", {"task_id": str(star)})) == "invalid_arguments"


async def test_complete_task_moves_an_open_task_to_done_once(tools: Tools) -> None:
    """Completing the open star task shows open → done and sets it done with a completion time;
    completing it again, or completing a dismissed task, is refused in the preview with the state."""
    star = tools.entity(STAR)
    started = utcnow()
    preview, result, rows = await confirmed(tools, MEMBER, "complete_task", {"task_id": str(star)})
    assert preview["action"] == "Complete a task"
    assert preview["task"]["title"] == "Call Jane Cooper about her crown fitting"
    assert preview["changes"] == {"status": {"from": "open", "to": "done"}}
    assert rows.keys() == {star}
    assert rows[star].keys() == {"status", "completed_at", "updated_at"}
    assert rows[star]["status"] == "done"
    assert rows[star]["completed_at"] >= started
    assert result["task"]["status"] == "done"

    again = await tools.call(MEMBER, "complete_task", {"task_id": str(star)})
    assert error_code(again) == "invalid_state"
    assert "it is done" in again.envelope["error"]["message"]
    assert again.envelope["error"]["hint"] == "It is already done; nothing to change."
    dismissed = (await listed(tools, MEMBER, status="dismissed"))[0]
    refused = await tools.call(MEMBER, "complete_task", {"task_id": dismissed["id"]})
    assert error_code(refused) == "invalid_state"
    assert "reopen_task" in refused.envelope["error"]["hint"]
    globex_task = str(tools.entity("globex:task:Send Jane Cooper the renewal quote"))
    assert error_code(await tools.call(MEMBER, "complete_task", {"task_id": globex_task})) == "not_found"


async def test_dismiss_and_reopen_follow_the_task_state_machine(tools: Tools) -> None:
    """An open task is dismissed, then reopened; a done task is reopened with its completion time
    cleared; reopening an open task and dismissing a done one are refused."""
    star = tools.entity(STAR)
    preview, _, rows = await confirmed(tools, MEMBER, "dismiss_task", {"task_id": str(star)})
    assert preview["changes"] == {"status": {"from": "open", "to": "dismissed"}}
    assert rows[star]["status"] == "dismissed"
    preview, result, rows = await confirmed(tools, MEMBER, "reopen_task", {"task_id": str(star)})
    assert preview["changes"] == {"status": {"from": "dismissed", "to": "open"}}
    assert rows[star].keys() == {"status", "updated_at"}
    assert result["task"]["status"] == "open"
    assert error_code(await tools.call(MEMBER, "reopen_task", {"task_id": str(star)})) == "invalid_state"

    done = (await listed(tools, MEMBER, status="done"))[0]
    refused = await tools.call(MEMBER, "dismiss_task", {"task_id": done["id"]})
    assert error_code(refused) == "invalid_state"
    preview, _, rows = await confirmed(tools, MEMBER, "reopen_task", {"task_id": done["id"]})
    assert preview["changes"] == {"status": {"from": "done", "to": "open"}}
    [row] = rows.values()
    assert (row["status"], row["completed_at"]) == ("open", None)
    globex_task = str(tools.entity("globex:task:Send Jane Cooper the renewal quote"))
    assert error_code(await tools.call(MEMBER, "dismiss_task", {"task_id": globex_task})) == "not_found"
