"""The offline demo (`--scripted-model`): every quick action works on the demo data, end to end."""

from __future__ import annotations

import httpx
import sqlalchemy as sa

from tests.data import database
from tests.fixtures.server import Vernis, text_of
from vernis.db.models import table_of
from vernis_crm.demo.scripted import demo_scenarios
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
    """ "Create a new contact" previews an example contact; answering "yes" creates exactly it, once."""
    vernis.scripted.scenarios = demo_scenarios()
    async with vernis.opened("member@acme.test") as client:
        events = await client.answer("I want to create a new contact. Ask me for the details you need.")
        assert "confirmation_required" in [e["type"] for e in events]
        assert "Shall I go ahead?" in text_of(events)
        events = await client.answer("Yes, go ahead")
        completed = [e for e in events if e["type"] == "tool_call_completed"]
        assert [(e["tool_name"], e["status"]) for e in completed] == [("create_contact", "ok")] * 2
    contacts = table_of(Contact)
    async with database(vernis) as engine, engine.connect() as connection:
        count = await connection.scalar(
            sa.select(sa.func.count())
            .select_from(contacts)
            .where(contacts.c.first_name == "Alex", contacts.c.last_name == "Morgan")
        )
    assert count == 1


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
