"""The reference CRM toolkit (SPEC §5, §14): 40 tools over contacts, calls, SMS, plans, tasks,
notifications and voice agents, with their tables (the Alembic branch `crm`), page context for ten
entity types, quick actions, a persona, and, for demo mode only, demo data, a small CRM host app with
the assistant on every page, and the demo login.

Vernis loads it by its entry-point name, `crm` (`vernis serve --demo` does); the core never imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.tools import Demo, QuickAction, Tool, Toolkit, ToolkitEnv
from vernis_crm.permissions import PERMISSIONS, ROLE_GRANTS
from vernis_crm.resolvers import PAGES, RESOLVERS
from vernis_crm.tools import (
    analytics,
    calls,
    contacts,
    contacts_manage,
    infrastructure,
    messages,
    notifications,
    phone_numbers,
    task_status,
    tasks,
    workflow,
)
from vernis_crm.tools.calls import CALL_SUMMARY_KIND, CALL_SUMMARY_SCHEMA

__all__ = ["CATEGORY_ORDER", "PERSONA", "QUICK_ACTIONS", "toolkit"]

CATEGORY_ORDER = (
    "Contacts",
    "Calls",
    "Messages",
    "Analytics",
    "Workflow",
    "Infrastructure",
    "Tasks",
    "Notifications",
)

PERSONA = """\
You are {name}, the assistant built into this CRM. You help the people of one organization work \
with their contacts, calls, messages, plans, tasks and notifications. Be brief and concrete; use \
Markdown for lists and tables. Never invent data: when you need facts, use a tool; when a tool \
cannot give them, say so."""

QUICK_ACTIONS = (
    QuickAction(
        "Search contacts",
        "Search my contacts and show me the ten most recently added ones.",
        permission="contact:list",
    ),
    QuickAction(
        "Recent calls",
        "Show me my most recent calls: who called, when, and how each call ended.",
        permission="call:list",
    ),
    QuickAction(
        "Send an SMS",
        "I want to send an SMS to a contact. Ask me who it is for and what it should say.",
        permission="message:create",
    ),
    QuickAction("Dashboard stats", "Give me the dashboard stats for this week.", permission="dashboard:view"),
    QuickAction(
        "Follow up with a contact",
        "Which contacts are waiting for a reply or a follow-up? List them with what each one needs.",
        permission="message:list",
    ),
    QuickAction(
        "Review today's activity",
        "Review today's activity for me: calls, messages and tasks.",
        permission="dashboard:view",
    ),
    QuickAction(
        "Create a new contact",
        "I want to create a new contact. Ask me for the details you need.",
        permission="contact:create",
    ),
    QuickAction(
        "Check engagement stats",
        "How is engagement going? Show me the engagement stats.",
        permission="dashboard:view",
    ),
    QuickAction(
        "View my plans",
        "Show me my active plans and where each one stands.",
        permission="plan_template:list",
    ),
    *(
        QuickAction(f"Summarize this {label}", f"Summarize this {label} for me.", entity_types=(entity_type,))
        for entity_type, label in (
            ("contact", "contact"),
            ("call", "call"),
            ("plan", "plan"),
            ("plan_template", "plan template"),
            ("agent", "voice agent"),
            ("task", "task"),
            ("phone", "phone number"),
            ("knowledge", "knowledge item"),
            ("analyzer", "analyzer"),
            ("text_agent", "text agent"),
        )
    ),
)


def _tools() -> list[Tool]:
    modules = [analytics, calls, contacts, contacts_manage, infrastructure, messages, notifications]
    modules += [phone_numbers, tasks, task_status, workflow]
    declared: list[Tool] = [tool for module in modules for tool in module.TOOLS]
    rank = {category: index for index, category in enumerate(CATEGORY_ORDER)}
    return sorted(declared, key=lambda tool: rank.get(tool.category, len(rank)))


async def _startup(env: ToolkitEnv) -> AsyncEngine:
    # The CRM's tables are in Vernis's own database (its Alembic branch): the tools share its engine.
    return env.engine


async def _seed(engine: AsyncEngine) -> str:
    from vernis_crm.demo.seed import seed_demo

    result = await seed_demo(engine)
    return result.summary()


def _routes(secret: str) -> list[Any]:
    from vernis_crm.web import demo_routes

    return demo_routes(secret)


def _scenarios() -> list[Any]:
    from vernis_crm.demo.scripted import demo_scenarios

    return demo_scenarios()


toolkit: Toolkit[AsyncEngine] = Toolkit(
    "crm",
    description="The reference CRM: contacts, calls, SMS, plans, tasks, notifications, voice agents.",
    tools=_tools(),
    permissions=PERMISSIONS,
    role_grants=ROLE_GRANTS,
    resolvers=RESOLVERS,
    pages=PAGES,
    quick_actions=QUICK_ACTIONS,
    persona=PERSONA,
    migrations=Path(__file__).resolve().parent / "migrations",
    ui_kinds={CALL_SUMMARY_KIND: CALL_SUMMARY_SCHEMA},
    startup=_startup,
    demo=Demo(
        seed=_seed,
        routes=_routes,
        scenarios=_scenarios,
        home="/contacts",
        # In demo mode an SMS a member approved waits for an owner's or an admin's review.
        reviews={"send_sms": "message:review"},
    ),
)
