"""The system prompt, assembled per message, stable parts first (SPEC §7).

Order: persona, rules for tools and confirmations, the organization (name, time zone, today's date
there), the organization's own AI rules, the member, the current page, the tools this member may
use. What changes least comes first so that provider prompt caches keep hitting.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from vernis.services.persistence import MemberInfo
from vernis.services.registry import Toolset

__all__ = ["CurrentPage", "PromptParts", "build_system_prompt"]

PERSONA = """\
You are Vernis, the assistant built into this CRM. You help the people of one organization work \
with their contacts, calls, messages, plans, tasks and notifications. Be brief and concrete; use \
Markdown for lists and tables. Never invent data: when you need facts, use a tool; when a tool \
cannot give them, say so."""

RULES = """\
## Rules
- Use only the tools listed below, and only for the user you are talking to.
- A tool that changes data first returns a preview. Show the user exactly what would change and \
ask for confirmation. Only after the user agrees, repeat the identical call with `confirmed: true`. \
If the user declines, do not retry.
- When a tool returns an error, read its message and hint: fix the arguments and try again, or tell \
the user plainly what did not work.
- Do not repeat a call that already returned a result in this conversation; use that result.
- Dates and times are in the organization's time zone unless the user says otherwise."""


@dataclass(frozen=True, slots=True)
class CurrentPage:
    route: str
    entity_type: str | None = None
    entity_id: str | None = None
    # The entity's display name, looked up in the member's organization; None when unknown.
    entity_name: str | None = None


@dataclass(frozen=True, slots=True)
class PromptParts:
    member: MemberInfo
    ai_rules: str
    toolset: Toolset
    page: CurrentPage | None
    now: datetime


def build_system_prompt(parts: PromptParts) -> str:
    member = parts.member
    try:
        zone = ZoneInfo(member.organization_timezone)
        zone_name = member.organization_timezone
    except (ZoneInfoNotFoundError, ValueError):
        zone, zone_name = ZoneInfo("UTC"), "UTC"
    local = parts.now.astimezone(zone)
    sections = [
        PERSONA,
        RULES,
        "## Organization\n"
        f"- Name: {member.organization_name}\n"
        f"- Time zone: {zone_name}\n"
        f"- Today: {local:%A, %B} {local.day}, {local:%Y} (local time {local:%H:%M})",
    ]
    if parts.ai_rules.strip():
        sections.append(
            "## Organization rules\nThe organization's administrators ask you to follow these:\n"
            + parts.ai_rules.strip()
        )
    sections.append(f"## User\n- Name: {member.name}\n- Role: {member.role}\n- Email: {member.email}")
    if parts.page is not None:
        sections.append(_page_section(parts.page))
    if parts.toolset:
        lines = [
            f"- {tool.name} ({tool.category}{', changes data' if tool.writes else ''}): {tool.description}"
            for tool in parts.toolset.tools.values()
        ]
        sections.append("## Tools you may use\n" + "\n".join(lines))
    else:
        sections.append("## Tools you may use\nNone: answer from the conversation alone.")
    return "\n\n".join(sections)


def _page_section(page: CurrentPage) -> str:
    lines = ["## Current page", f"- Route: {page.route}"]
    if page.entity_type and page.entity_name:
        label = page.entity_type.replace("_", " ")
        lines.append(f'- The user is looking at the {label} "{page.entity_name}" (id {page.entity_id}).')
        lines.append(f'- "This {label}" means that one; do not ask which.')
    return "\n".join(lines)
