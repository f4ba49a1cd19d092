"""The system prompt (SPEC §7), compared whole for two roles, and the turn's context with the new message (SPEC §19)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from tests.members import member as make_member
from vernis.identity import MemberInfo, RoleTable
from vernis.model.prompt import (
    PromptParts,
    TurnContext,
    build_system_prompt,
    build_turn_context,
    with_turn_context,
)
from vernis.pages import CurrentPage
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
    rules: str = "",
    persona: str = CRM_PERSONA.replace("{name}", "Vernis"),
) -> str:
    toolset = REGISTRY.for_member(ROLES.permissions(who.role))
    return build_system_prompt(PromptParts(persona=persona, member=who, ai_rules=rules, toolset=toolset))


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
- The user's latest message opens with a <context> block that Vernis adds (today's date and the \
time, the page the user is on, notices): it is not written by the user, and it holds for that \
message.

## Organization
- Name: Acme Dental
- Time zone: America/New_York
"""
HEAD = PERSONA + RULES


def test_admin_system_prompt() -> None:
    """An admin: the org's rules, the member, and every tool including writes; no date and no page."""
    text = prompt(member("admin", "Marcus Chen", "admin@acme.test"), rules="Call patients clients.\n")
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

## Tools you may use
- search_contacts (Contacts): Find contacts by name, phone or e-mail.
- create_agent (Infrastructure, changes data): Create a voice agent."""
    )


def test_viewer_system_prompt() -> None:
    """A viewer: no rules section when there are none, read tools only."""
    text = prompt(member("viewer", "Tom Alvarez", "viewer@acme.test"))
    assert (
        text
        == HEAD
        + """
## User
- Name: Tom Alvarez
- Role: viewer
- Email: viewer@acme.test

## Tools you may use
- search_contacts (Contacts): Find contacts by name, phone or e-mail."""
    )


def test_stable_parts_come_first() -> None:
    """Two members share the whole persona, rules and organization prefix (prompt caches hit)."""
    first = prompt(member("admin", "A", "a@acme.test"))
    second = prompt(member("viewer", "B", "b@acme.test"))
    assert first.startswith(HEAD)
    assert second.startswith(HEAD)


def test_a_system_prompt_is_built_once_and_follows_what_it_is_made_of() -> None:
    """The same parts give the same string object (built once); other rules, another member or another toolset (the same member's, rules and persona) give their own text."""
    admin = member("admin", "Ada Admin", None)
    first = prompt(admin, "Be kind.")
    toolset = REGISTRY.for_member(ROLES.permissions("admin"))
    again = build_system_prompt(
        PromptParts(
            persona=CRM_PERSONA.replace("{name}", "Vernis"),
            member=admin,
            ai_rules="Be kind.",
            toolset=toolset,
        )
    )
    assert again == first
    same_toolset = PromptParts(persona="P", member=admin, ai_rules="", toolset=toolset)
    assert build_system_prompt(same_toolset) is build_system_prompt(same_toolset)
    assert "Be brief." in prompt(admin, "Be brief.")
    assert "Be kind." not in prompt(admin, "Be brief.")
    assert "Ada Admin" not in prompt(member("admin", "Bo Admin", None), "Be kind.")
    fewer = REGISTRY.for_member(ROLES.permissions("viewer"))
    viewer_tools = build_system_prompt(PromptParts(persona="P", member=admin, ai_rules="", toolset=fewer))
    assert "create_agent" in build_system_prompt(same_toolset)
    assert "create_agent" not in viewer_tools


def test_persona_comes_from_the_configuration() -> None:
    """A product's persona (its name and instructions) opens the prompt; no e-mail, no line."""
    persona = DEFAULT_PERSONA.replace("{name}", "Ada") + "\n\nYou help dental practices run their front desk."
    text = prompt(member("viewer", "Tom Alvarez", None), persona=persona)
    assert text.startswith("You are Ada, the assistant built into this product.")
    assert "You help dental practices run their front desk.\n\n## Rules" in text
    assert "## User\n- Name: Tom Alvarez\n- Role: viewer\n\n## Tools you may use" in text


def test_turn_context_on_a_contact_page() -> None:
    """The turn's context holds the organization's date and local time, the named contact and the notices, whole."""
    page = CurrentPage("/contacts/c-1", "contact", "c-1", "Jane Cooper (Cooper Dental)")
    who = member("admin", "Marcus Chen", "admin@acme.test")
    text = build_turn_context(TurnContext(who, NOW, page, ["The card number was hidden."]))
    assert (
        text
        == """<context>
## Now
- Today: Saturday, November 21, 2026 (local time 22:30)

## Current page
- Route (the page's address, as data): "/contacts/c-1"
- The user is looking at the contact "Jane Cooper (Cooper Dental)" (id c-1).
- "This contact" means that one; do not ask which.

## Notices
- The card number was hidden.
</context>"""
    )


def test_the_local_time_follows_the_minute_and_the_time_zone() -> None:
    """The context's local time is the turn's minute in the member's zone: a second later is the same text, a minute later or another zone is not."""
    who = member("admin", "Marcus Chen", None)
    tokyo = make_member(organization_timezone="Asia/Tokyo")
    now = build_turn_context(TurnContext(who, NOW))
    assert "(local time 22:30)" in now
    assert build_turn_context(TurnContext(who, NOW + timedelta(seconds=59))) == now
    assert "(local time 22:31)" in build_turn_context(TurnContext(who, NOW + timedelta(minutes=1)))
    assert "Sunday, November 22, 2026 (local time 12:30)" in build_turn_context(TurnContext(tokyo, NOW))


def test_turn_context_on_a_list_page_with_a_summary() -> None:
    """A page with no entity gives its route only; an entity's summary is shown; no notices, no section."""
    who = member("viewer", "Tom Alvarez", None)
    assert build_turn_context(TurnContext(who, NOW, CurrentPage("/calls"))) == (
        "<context>\n## Now\n- Today: Saturday, November 21, 2026 (local time 22:30)\n\n"
        '## Current page\n- Route (the page\'s address, as data): "/calls"\n</context>'
    )
    page = CurrentPage("/tickets/T-1", "ticket", "T-1", "Printer on fire", "open, urgent")
    text = build_turn_context(TurnContext(who, NOW, page))
    assert (
        '- The user is looking at the ticket "Printer on fire" (id T-1).\n- About it: open, urgent\n' in text
    )


def test_context_opens_the_last_user_message_only() -> None:
    """The context opens the new user message; earlier messages and the system message are left as they are."""
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "second"},
    ]
    result = with_turn_context(messages, "<context>\nC\n</context>")
    assert result[:3] == messages[:3]
    assert result[3] == {"role": "user", "content": "<context>\nC\n</context>\n\nsecond"}
    assert messages[3] == {"role": "user", "content": "second"}  # the caller's list is not changed


def test_context_without_a_user_message_last_goes_to_the_system_message() -> None:
    """An answer continuing after tool results (nobody's new message) gets the context at the end of the system message."""
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_call_id": "c", "content": "{}"},
    ]
    result = with_turn_context(messages, "C")
    assert result[0] == {"role": "system", "content": "S\n\nC"}
    assert result[1:] == messages[1:]


def test_context_with_content_parts_is_a_text_part_of_its_own() -> None:
    """A user message of content parts (text and images) gets the context as its first text part."""
    parts = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "x"}}]
    result = with_turn_context([{"role": "system", "content": "S"}, {"role": "user", "content": parts}], "C")
    assert result[1]["content"] == [{"type": "text", "text": "C"}, *parts]
