"""Workflow tools against the seeded demo: listing plan templates, and the three writes (create_plan,
create_plan_template, update_plan_template) through the whole confirmation flow, their validation,
permission gates and organization scope."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from tests.crm.tools.conftest import Tools, data, error
from vernis.store.models import AuditEntry, table_of
from vernis_crm.models import Plan, PlanTemplate

NEW_YORK = ZoneInfo("America/New_York")
plan = table_of(Plan)
template = table_of(PlanTemplate)
audit = table_of(AuditEntry)
WRITES = {"create_plan", "create_plan_template", "update_plan_template"}
STEPS = [
    {"day": 7, "channel": "call", "action": "Call to ask how the whitening went"},
    {"day": 0, "channel": "sms", "action": "Text the aftercare tips"},
    {"day": 30, "channel": "task", "action": "Offer a touch-up appointment"},
]


async def table_rows(tools: Tools, table: sa.Table) -> list[dict[str, Any]]:
    """Every row of `table` (all organizations), sorted by id: a snapshot to compare."""
    async with tools.engine.connect() as connection:
        result = await connection.execute(sa.select(table).order_by(table.c.id))
        return [dict(row._mapping) for row in result]


async def audit_of(tools: Tools, approval_id: uuid.UUID | None) -> list[Any]:
    async with tools.engine.connect() as connection:
        result = await connection.execute(sa.select(audit).where(audit.c.approval_id == approval_id))
        return list(result)


def local_today() -> str:
    return datetime.now(NEW_YORK).date().isoformat()


async def test_plan_templates_are_listed_with_steps_and_usage(tools: Tools) -> None:
    """get_plan_templates lists Acme's active templates by name with their steps and plan counts, pages by offset and filters by name."""
    acme = tools.seed.organizations["acme"]
    plans = [row for row in await table_rows(tools, plan) if row["organization_id"] == acme]
    expected = [
        {
            "id": str(row["id"]),
            "name": row["name"],
            "description": row["description"],
            "active": True,
            "steps": row["steps"],
            "plans": {
                "active": sum(p["template_id"] == row["id"] and p["status"] == "active" for p in plans),
                "total": sum(p["template_id"] == row["id"] for p in plans),
            },
        }
        for row in sorted(await table_rows(tools, template), key=lambda row: row["name"])
        if row["organization_id"] == acme
    ]
    assert len(expected) == 4
    first = data(await tools.call("viewer@acme.test", "get_plan_templates", {"limit": 3}))
    assert (first["has_more"], first["next_offset"]) == (True, 3)
    rest = data(await tools.call("viewer@acme.test", "get_plan_templates", {"limit": 3, "offset": 3}))
    assert (rest["has_more"], rest["next_offset"]) == (False, None)
    assert first["templates"] + rest["templates"] == expected
    found = data(await tools.call("viewer@acme.test", "get_plan_templates", {"query": "RECALL"}))
    assert [t["name"] for t in found["templates"]] == ["Recall reminder"]
    assert not data(await tools.call("viewer@acme.test", "get_plan_templates", {"query": "Quote"}))[
        "templates"
    ]


async def test_deactivated_templates_are_listed_on_request(tools: Tools) -> None:
    """A deactivated template is left out unless include_inactive is true."""
    async with tools.engine.begin() as connection:
        await connection.execute(
            sa.update(template)
            .where(template.c.id == tools.entity("acme:plan_template:Insurance follow-up"))
            .values(active=False)
        )
    listed = data(await tools.call("viewer@acme.test", "get_plan_templates", {}))
    assert "Insurance follow-up" not in {t["name"] for t in listed["templates"]}
    every = data(await tools.call("viewer@acme.test", "get_plan_templates", {"include_inactive": True}))
    assert {t["name"]: t["active"] for t in every["templates"]}["Insurance follow-up"] is False


async def test_create_plan_previews_then_starts_exactly_that_plan(tools: Tools) -> None:
    """A member's create_plan previews the template, contact, assignee and dated steps changing nothing; approved, it adds exactly that plan and an audit row."""
    recall = tools.entity("acme:plan_template:Recall reminder")
    janet = tools.entity("acme:contact:Janet Cooper")
    assignee = tools.seed.members["member@acme.test"]
    args = {"template_id": str(recall), "contact_id": str(janet), "assignee_id": str(assignee)}
    before = await table_rows(tools, plan)
    shown = await tools.call("member@acme.test", "create_plan", args)
    assert shown.status == "needs_confirmation", shown.envelope
    assert await table_rows(tools, plan) == before
    today = local_today()
    start = datetime.fromisoformat(today).date()
    steps = [
        ("Text: six months since the last cleaning", "sms", 0),
        ("Call if there was no reply", "call", 5),
        ("Second reminder text", "sms", 14),
        ("Mark as lapsed if still not booked", "task", 30),
    ]
    assert shown.preview == {
        "action": "Start a plan",
        "plan": {
            "template": {"id": str(recall), "name": "Recall reminder"},
            "contact": {"id": str(janet), "name": "Janet Cooper"},
            "assignee": {"id": str(assignee), "name": "Priya Raman"},
            "status": "active",
            "starts_on": today,
            "steps": [
                {"day": day, "channel": channel, "action": action, "on": str(start + timedelta(days=day))}
                for action, channel, day in steps
            ],
        },
    }

    preview, envelope = await tools.write("member@acme.test", "create_plan", args)
    assert envelope["ok"] is True, envelope
    assert {key: value for key, value in envelope["data"].items() if key != "plan_id"} == preview.preview[
        "plan"
    ]
    after = await table_rows(tools, plan)
    added = [row for row in after if row not in before]
    assert len(after) == len(before) + 1
    assert len(added) == 1
    row = added[0]
    assert str(row["id"]) == envelope["data"]["plan_id"]
    assert {key: row[key] for key in ("organization_id", "template_id", "contact_id", "assignee_id")} == {
        "organization_id": tools.seed.organizations["acme"],
        "template_id": recall,
        "contact_id": janet,
        "assignee_id": assignee,
    }
    assert (row["status"], row["current_step"], row["completed_at"]) == ("active", 0, None)
    assert abs(row["started_at"] - datetime.now(UTC)) < timedelta(minutes=1)
    entries = await audit_of(tools, preview.confirmation_id)
    assert [(e.tool_name, e.outcome, e.member_id) for e in entries] == [
        ("create_plan", "ok", tools.seed.members["member@acme.test"])
    ]


async def test_create_plan_preview_validates_against_the_data(tools: Tools) -> None:
    """create_plan's preview refuses Globex's template, contact or member as not_found, a running duplicate as conflict and a deactivated template; nothing is written."""
    recall = str(tools.entity("acme:plan_template:Recall reminder"))
    janet = str(tools.entity("acme:contact:Janet Cooper"))
    cases = [
        (
            {"template_id": str(tools.entity("globex:plan_template:Quote follow-up")), "contact_id": janet},
            "not_found",
        ),
        ({"template_id": recall, "contact_id": str(tools.entity("globex:contact:Jane Cooper"))}, "not_found"),
        (
            {
                "template_id": recall,
                "contact_id": janet,
                "assignee_id": str(tools.seed.members["owner@globex.test"]),
            },
            "not_found",
        ),
        ({"template_id": recall, "contact_id": janet, "assignee_id": str(uuid.uuid4())}, "not_found"),
        (
            {
                "template_id": str(tools.entity("acme:plan_template:Post-treatment follow-up")),
                "contact_id": str(tools.entity("acme:contact:Jane Cooper")),
            },
            "conflict",  # her star plan is active
        ),
    ]
    before = await table_rows(tools, plan)
    for args, code in cases:
        failure = error(await tools.call("member@acme.test", "create_plan", args))
        assert failure["code"] == code, args
        assert failure["hint"], args
        assert "Globex" not in failure["message"]
        assert "Quote" not in failure["message"]
    async with tools.engine.begin() as connection:
        await connection.execute(
            sa.update(template).where(template.c.id == uuid.UUID(recall)).values(active=False)
        )
    inactive = error(
        await tools.call("member@acme.test", "create_plan", {"template_id": recall, "contact_id": janet})
    )
    assert inactive["code"] == "inactive"
    assert await table_rows(tools, plan) == before


async def test_create_plan_template_previews_then_creates_it(tools: Tools) -> None:
    """An admin's create_plan_template previews the template with its steps by day, changing nothing; approved, it adds exactly that template and an audit row."""
    args = {"name": "  Whitening follow-up ", "description": "After a whitening session.", "steps": STEPS}
    ordered = [STEPS[1], STEPS[0], STEPS[2]]
    before = await table_rows(tools, template)
    shown = await tools.call("admin@acme.test", "create_plan_template", args)
    assert shown.status == "needs_confirmation", shown.envelope
    assert await table_rows(tools, template) == before
    assert shown.preview == {
        "action": "Create a plan template",
        "template": {
            "name": "Whitening follow-up",
            "description": "After a whitening session.",
            "active": True,
            "steps": ordered,
        },
    }
    preview, envelope = await tools.write("admin@acme.test", "create_plan_template", args)
    assert envelope["ok"] is True, envelope
    after = await table_rows(tools, template)
    added = [row for row in after if row not in before]
    assert len(after) == len(before) + 1
    assert len(added) == 1
    row = added[0]
    assert envelope["data"] == {"template_id": str(row["id"]), "name": "Whitening follow-up", "steps": 3}
    assert {key: row[key] for key in ("organization_id", "name", "description", "steps", "active")} == {
        "organization_id": tools.seed.organizations["acme"],
        **preview.preview["template"],
    }
    assert [(e.tool_name, e.outcome) for e in await audit_of(tools, preview.confirmation_id)] == [
        ("create_plan_template", "ok")
    ]
    again = error(
        await tools.call("admin@acme.test", "create_plan_template", {**args, "name": "WHITENING follow-up"})
    )
    assert again["code"] == "conflict"
    globex = await tools.call("owner@globex.test", "create_plan_template", args)
    assert globex.status == "needs_confirmation"  # names are unique per organization only


async def test_update_plan_template_previews_then_applies_the_changes(tools: Tools) -> None:
    """update_plan_template previews only the fields that change as {from, to}, changing nothing; approved, it applies exactly those and leaves an audit row."""
    recall = tools.entity("acme:plan_template:Recall reminder")
    before = await table_rows(tools, template)
    old = next(row for row in before if row["id"] == recall)
    args = {
        "template_id": str(recall),
        "name": "Six-month recall",
        "description": old["description"],  # unchanged: not in the preview
        "steps": STEPS,
    }
    shown = await tools.call("admin@acme.test", "update_plan_template", args)
    assert shown.status == "needs_confirmation", shown.envelope
    assert await table_rows(tools, template) == before
    active_plans = sum(
        row["template_id"] == recall and row["status"] == "active" for row in await table_rows(tools, plan)
    )
    assert active_plans
    assert shown.preview == {
        "action": "Update a plan template",
        "template": {"id": str(recall), "name": "Recall reminder"},
        "changes": {
            "name": {"from": "Recall reminder", "to": "Six-month recall"},
            "steps": {"from": old["steps"], "to": [STEPS[1], STEPS[0], STEPS[2]]},
        },
        "note": f"{active_plans} active plan(s) follow this template and continue with the new steps.",
    }
    preview, envelope = await tools.write("admin@acme.test", "update_plan_template", args)
    assert envelope["ok"] is True, envelope
    assert envelope["data"] == {"template_id": str(recall), "changed": preview.preview["changes"]}
    after = await table_rows(tools, template)
    new = next(row for row in after if row["id"] == recall)
    assert {key: new[key] for key in ("name", "steps")} == {
        key: change["to"] for key, change in preview.preview["changes"].items()
    }
    untouched = ("organization_id", "description", "active", "created_at")
    assert {key: new[key] for key in untouched} == {key: old[key] for key in untouched}
    assert new["updated_at"] > old["updated_at"]
    assert [row for row in after if row["id"] != recall] == [row for row in before if row["id"] != recall]
    assert [(e.tool_name, e.outcome) for e in await audit_of(tools, preview.confirmation_id)] == [
        ("update_plan_template", "ok")
    ]


async def test_update_plan_template_refusals(tools: Tools) -> None:
    """Updating Globex's template is not_found, a change to the current values is no_change, another template's name is conflict."""
    recall = str(tools.entity("acme:plan_template:Recall reminder"))
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"template_id": str(tools.entity("globex:plan_template:Quote follow-up")), "active": False},
            "not_found",
        ),
        ({"template_id": recall, "name": "Recall reminder", "active": True}, "no_change"),
        ({"template_id": recall}, "no_change"),
        ({"template_id": recall, "name": "insurance FOLLOW-UP"}, "conflict"),
    ]
    before = await table_rows(tools, template)
    for args, code in cases:
        failure = error(await tools.call("owner@acme.test", "update_plan_template", args))
        assert failure["code"] == code, args
        assert failure["hint"], args
    assert await table_rows(tools, template) == before


async def test_workflow_permission_gates(tools: Tools) -> None:
    """The viewer is offered no workflow write and is refused one; the member may create plans but not create or update templates."""
    offered = await tools.offered("viewer@acme.test")
    assert "get_plan_templates" in offered
    assert not WRITES & offered
    member_offered = await tools.offered("member@acme.test")
    assert "create_plan" in member_offered
    assert not {"create_plan_template", "update_plan_template"} & member_offered
    assert WRITES.issubset(await tools.offered("admin@acme.test"))
    recall = str(tools.entity("acme:plan_template:Recall reminder"))
    refused: list[tuple[str, str, dict[str, Any]]] = [
        (
            "viewer@acme.test",
            "create_plan",
            {"template_id": recall, "contact_id": str(tools.entity("acme:contact:Janet Cooper"))},
        ),
        ("viewer@acme.test", "create_plan_template", {"name": "X", "steps": STEPS}),
        ("member@acme.test", "create_plan_template", {"name": "X", "steps": STEPS}),
        ("member@acme.test", "update_plan_template", {"template_id": recall, "active": False}),
    ]
    before = (await table_rows(tools, plan), await table_rows(tools, template))
    for email, name, args in refused:
        outcome = await tools.call(email, name, args)
        assert outcome.envelope["error"]["code"] == "forbidden", (email, name)
        assert outcome.confirmation_id is None
    assert (await table_rows(tools, plan), await table_rows(tools, template)) == before


async def test_workflow_arguments_are_validated(tools: Tools) -> None:
    """No steps, an unknown channel, a negative day, a blank name or an unknown argument is invalid_arguments."""
    cases: list[tuple[str, dict[str, Any]]] = [
        ("create_plan_template", {"name": "Empty", "steps": []}),
        ("create_plan_template", {"name": "Fax", "steps": [{"day": 0, "channel": "fax", "action": "Send"}]}),
        (
            "create_plan_template",
            {"name": "Past", "steps": [{"day": -1, "channel": "sms", "action": "Send"}]},
        ),
        ("create_plan_template", {"name": "   ", "steps": STEPS}),
        ("update_plan_template", {"template_id": "recall", "active": False}),
        ("create_plan", {"template": "Recall reminder", "contact_id": str(uuid.uuid4())}),
    ]
    for name, args in cases:
        failure = error(await tools.call("owner@acme.test", name, args))
        assert failure["code"] == "invalid_arguments", (name, args)
