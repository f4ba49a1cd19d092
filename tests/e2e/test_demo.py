"""The offline demo (`--scripted-model`): every quick action works on the demo data, end to end."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import sqlalchemy as sa

from tests.data import database
from tests.e2e.test_reviews import a_contact, sent
from tests.fixtures.server import Vernis, text_of
from vernis.store.models import table_of
from vernis_crm.demo.scripted import demo_scenarios, organization_today
from vernis_crm.models import Contact

# The prompts of the CRM toolkit's quick actions (vernis_crm/__init__.py), and the tool each calls.
QUICK_ACTIONS = [
    ("Search my contacts and show me the ten most recently added ones.", "search_contacts"),
    ("Show me my most recent calls: who called, when, and how each call ended.", "get_recent_calls"),
    (
        "I want to send an SMS to a contact. Ask me who it is for and what it should say.",
        "get_unanswered_contacts",
    ),
    ("Give me the dashboard stats for this week.", "get_dashboard_stats"),
    (
        "Which contacts are waiting for a reply or a follow-up? List them with what each one needs.",
        "get_unanswered_contacts",
    ),
    ("Review today's activity for me: calls, messages and tasks.", "get_activity_counts"),
    ("How is engagement going? Show me the engagement stats.", "get_engagement_stats"),
    ("Show me my active plans and where each one stands.", "get_plan_stats"),
]


async def test_each_read_quick_action_calls_its_tool_and_summarizes(vernis: Vernis) -> None:
    """Each read quick action runs its tool on the demo data and answers with a summary that says it is scripted."""
    vernis.scripted.scenarios = demo_scenarios()
    async with vernis.opened("owner@acme.test") as client:
        for prompt, tool in QUICK_ACTIONS:
            await client.send("new_conversation")
            await client.until("history_end")
            events = await client.answer(prompt)
            completed = [e for e in events if e["type"] == "tool_call_completed"]
            assert [(e["tool_name"], e["status"]) for e in completed] == [(tool, "ok")], prompt
            assert "Scripted demo answer" in text_of(events)


async def test_create_contact_quick_action_previews_then_yes_creates_it(vernis: Vernis) -> None:
    """ "Create a new contact" previews a fresh example contact each time; answering "yes" creates exactly it, once, and the demo can be tried again."""
    vernis.scripted.scenarios = demo_scenarios()
    created: list[dict[str, Any]] = []
    async with vernis.opened("member@acme.test") as client:
        for _ in range(2):
            await client.send("new_conversation")
            await client.until("history_end")
            events = await client.answer("I want to create a new contact. Ask me for the details you need.")
            (asked,) = [e for e in events if e["type"] == "confirmation_required"]
            assert "Shall I go ahead?" in text_of(events)
            events = await client.answer("Yes, go ahead")
            completed = [e for e in events if e["type"] == "tool_call_completed"]
            assert [(e["tool_name"], e["status"]) for e in completed] == [("create_contact", "ok")] * 2
            created.append(asked["preview"]["contact"] | {"id": completed[0]["result"]["data"]["id"]})
    # Two different example people (the same e-mail address twice would be refused the second time).
    assert created[0]["emails"][0]["email"] != created[1]["emails"][0]["email"]
    contacts = table_of(Contact)
    async with database(vernis) as engine, engine.connect() as connection:
        for person in created:
            row = (
                await connection.execute(
                    sa.select(contacts.c.first_name, contacts.c.last_name).where(
                        contacts.c.id == uuid.UUID(person["id"])
                    )
                )
            ).one()
            assert (row.first_name, row.last_name) == (person["first_name"], person["last_name"])


async def test_review_todays_activity_counts_today_only(vernis: Vernis) -> None:
    """ "Review today's activity" asks for today alone (the organization's today from the prompt), not the last seven days."""
    vernis.scripted.scenarios = demo_scenarios()
    async with vernis.opened("owner@acme.test") as client:
        events = await client.answer("Review today's activity for me: calls, messages and tasks.")
    (started,) = [e for e in events if e["type"] == "tool_call_started"]
    assert started["tool_name"] == "get_activity_counts"
    today = organization_today(next(r for r in vernis.scripted.requests if r.get("tools")))
    assert today is not None
    assert started["arguments"] == {"from": today.isoformat(), "to": today.isoformat()}
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["result"]["data"]["period"]
    assert "| What | Value |" in text_of(events)


async def test_summarize_this_contact_reads_the_contact_of_the_page(vernis: Vernis) -> None:
    """ "Summarize this contact" with a contact page's context calls get_contact_details with that contact, and the summary names them."""
    vernis.scripted.scenarios = demo_scenarios()
    contact_id = str(vernis.seed.entities["acme:contact:Jane Cooper"])
    page = {"route": f"/contacts/{contact_id}", "entity_type": "contact", "entity_id": contact_id}
    async with vernis.opened("member@acme.test") as client:
        events = await client.answer("Summarize this contact for me.", page_context=page)
    (started,) = [e for e in events if e["type"] == "tool_call_started"]
    assert (started["tool_name"], started["arguments"]) == ("get_contact_details", {"contact_id": contact_id})
    text = text_of(events)
    assert "**Jane Cooper**" in text
    assert "You wrote" not in text
    # Times read as dates in the organization's zone, never ISO strings.
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", text)


async def test_config_lists_the_quick_actions_for_a_page(vernis: Vernis) -> None:
    """GET /api/assistant/config?entity_type=contact gives the general actions and the contact's, not another type's."""
    headers = {"Authorization": f"Bearer {vernis.token('viewer@acme.test')}"}
    async with httpx.AsyncClient(base_url=vernis.http_url, headers=headers) as http:
        everywhere = (await http.get("/api/assistant/config")).json()["quick_actions"]
        contact = (await http.get("/api/assistant/config", params={"entity_type": "contact"})).json()[
            "quick_actions"
        ]
    labels = [action["label"] for action in contact]
    assert "Summarize this contact" in labels
    assert "Summarize this call" not in labels
    assert "Recent calls" in labels
    assert "Create a new contact" not in labels  # a viewer may not
    assert {"Summarize this contact", "Summarize this call"} <= {action["label"] for action in everywhere}
    assert all(not action["entity_types"] or action["entity_types"] == ["contact"] for action in contact)


async def test_a_members_sms_waits_for_an_admins_review_in_the_offline_demo(vernis: Vernis) -> None:
    """Offline demo: "Text this contact: ..." on a contact's page previews send_sms; the member's "yes" sends it to review; the admin's approval sends it, and the demo's next answer says who approved it, with the note."""
    vernis.scripted.scenarios = demo_scenarios()
    contact_id = await a_contact(vernis)
    page = {"route": f"/contacts/{contact_id}", "entity_type": "contact", "entity_id": contact_id}
    text = f"See you at the front desk at 3pm {uuid.uuid4().hex[:6]}"
    async with vernis.opened("member@acme.test") as member, vernis.opened("admin@acme.test") as admin:
        events = await member.answer(f"Text this contact: {text}", page_context=page)
        (asked,) = [e for e in events if e["type"] == "confirmation_required"]
        assert asked["preview"]["body"] == text
        events = await member.answer("Yes, go ahead")
        assert [e["status"] for e in events if e["type"] == "tool_call_completed"] == ["review_requested"] * 2
        (pushed,) = await admin.expect("review_required")
        await admin.send("review_tool", review_id=pushed["review"]["review_id"], approved=True, note="Good.")
        events = await member.until("assistant_end")
        assert "Marcus Chen approved the change, and it was made. Their note: “Good.”" in text_of(events)
    assert await sent(vernis, text) == 1
