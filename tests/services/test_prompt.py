"""The system prompt (SPEC §7), compared whole for two roles on two pages."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from tests.members import member as make_member
from vernis.context.page import CurrentPage
from vernis.identity import MemberInfo, RoleTable
from vernis.services.prompt import PromptParts, build_system_prompt
from vernis.tools import Tool, ToolContext
from vernis.tools.catalog import DEFAULT_PERSONA
from vernis.tools.runner import ToolRegistry
from vernis_crm import PERSONA as CRM_PERSONA


class Query(BaseModel):
    q: str


async def nothing(ctx: ToolContext[None], args: Query) -> dict[str, Any]:
    return {}


REGISTRY = ToolRegistry(
    [
        Tool(
            "search_contacts",
            "Contacts",
            "Find contacts by name, phone or e-mail.",
            Query,
            "contact:list",
            False,
            nothing,
        ),
        Tool(
            "create_agent",
            "Infrastructure",
            "Create a voice agent.",
            Query,
            "agent:create",
            True,
            nothing,
            preview=nothing,
        ),
    ]
)
ROLES = RoleTable([{"admin": ["contact:list", "agent:create"], "viewer": ["contact:list"]}])
# 03:30 UTC is still the evening before in New York: "today" is the organization's.
NOW = datetime(2026, 11, 22, 3, 30, tzinfo=UTC)


def member(role: str, name: str, email: str | None) -> MemberInfo:
    return make_member(
        external_id=name.lower().replace(" ", "-"),
        organization_name="Acme Dental",
        organization_timezone="America/New_York",
        email=email,
        name=name,
        role=role,
    )


def prompt(
    who: MemberInfo,
    page: CurrentPage | None,
    rules: str = "",
    persona: str = CRM_PERSONA.replace("{name}", "Vernis"),
) -> str:
    toolset = REGISTRY.for_member(ROLES.permissions(who.role))
    return build_system_prompt(
        PromptParts(persona=persona, member=who, ai_rules=rules, toolset=toolset, page=page, now=NOW)
    )


PERSONA = """\
You are Vernis, the assistant built into this CRM. You help the people of one organization work \
with their contacts, calls, messages, plans, tasks and notifications. Be brief and concrete; use \
Markdown for lists and tables. Never invent data: when you need facts, use a tool; when a tool \
cannot give them, say so.
"""
RULES = """
## Rules
- Use only the tools listed below, and only for the user you are talking to.
- A tool that changes data first returns a preview. Show the user exactly what would change and \
ask for confirmation. Only after the user agrees, repeat the identical call with `confirmed: true`. \
If the user declines, do not retry.
- When a tool returns an error, read its message and hint: fix the arguments and try again, or tell \
the user plainly what did not work.
- Do not repeat a call that already returned a result in this conversation; use that result.
- Dates and times are in the organization's time zone unless the user says otherwise.

## Organization
- Name: Acme Dental
- Time zone: America/New_York
- Today: Saturday, November 21, 2026 (local time 22:30)
"""
HEAD = PERSONA + RULES


def test_admin_on_a_contact_page() -> None:
    """An admin on a contact page: the org's rules, the member, the named contact, and every tool including writes."""
    page = CurrentPage("/contacts/c-1", "contact", "c-1", "Jane Cooper (Cooper Dental)")
    text = prompt(member("admin", "Marcus Chen", "admin@acme.test"), page, rules="Call patients clients.\n")
    assert (
        text
        == HEAD
        + """
## Organization rules
The organization's administrators ask you to follow these:
Call patients clients.

## User
- Name: Marcus Chen
- Role: admin
- Email: admin@acme.test

## Current page
- Route: /contacts/c-1
- The user is looking at the contact "Jane Cooper (Cooper Dental)" (id c-1).
- "This contact" means that one; do not ask which.

## Tools you may use
- search_contacts (Contacts): Find contacts by name, phone or e-mail.
- create_agent (Infrastructure, changes data): Create a voice agent."""
    )


def test_viewer_on_a_list_page() -> None:
    """A viewer on a page with no entity: no rules section when there are none, the route only, read tools only."""
    text = prompt(member("viewer", "Tom Alvarez", "viewer@acme.test"), CurrentPage("/calls"))
    assert (
        text
        == HEAD
        + """
## User
- Name: Tom Alvarez
- Role: viewer
- Email: viewer@acme.test

## Current page
- Route: /calls

## Tools you may use
- search_contacts (Contacts): Find contacts by name, phone or e-mail."""
    )


def test_stable_parts_come_first() -> None:
    """Two members on two pages share the whole persona, rules and organization prefix (prompt caches hit)."""
    first = prompt(member("admin", "A", "a@acme.test"), CurrentPage("/contacts/x", "contact", "x", "X"))
    second = prompt(member("viewer", "B", "b@acme.test"), None)
    assert first.startswith(HEAD)
    assert second.startswith(HEAD)


def test_persona_comes_from_the_configuration_and_the_page_summary_is_shown() -> None:
    """A product's persona (its name and instructions) opens the prompt; an entity's summary is on the page; no e-mail, no line."""
    persona = DEFAULT_PERSONA.replace("{name}", "Ada") + "\n\nYou help dental practices run their front desk."
    page = CurrentPage("/tickets/T-1", "ticket", "T-1", "Printer on fire", "open, urgent")
    text = prompt(member("viewer", "Tom Alvarez", None), page, persona=persona)
    assert text.startswith("You are Ada, the assistant built into this product.")
    assert "You help dental practices run their front desk.\n\n## Rules" in text
    assert (
        '- The user is looking at the ticket "Printer on fire" (id T-1).\n- About it: open, urgent\n' in text
    )
    assert "## User\n- Name: Tom Alvarez\n- Role: viewer\n\n## Current page" in text
