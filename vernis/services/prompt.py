"""The system prompt, assembled per message, stable parts first (SPEC §7).

Order: persona (the configuration's name and instructions, or a toolkit's persona), rules for
tools and confirmations, the organization (name, time zone, today's date
there), the organization's own AI rules, the member, the current page, the tools this member may
use. What changes least comes first so that provider prompt caches keep hitting.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from vernis.context.page import CurrentPage
from vernis.identity.members import MemberInfo
from vernis.tools.runner import Toolset

__all__ = ["PromptParts", "build_system_prompt"]

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
class PromptParts:
    # The opening: who the assistant is (the configuration's, a toolkit's, or the default).
    persona: str
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
        parts.persona,
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
    user = f"## User\n- Name: {member.name}\n- Role: {member.role}"
    if member.email:
        user += f"\n- Email: {member.email}"
    sections.append(user)
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
        if page.entity_summary:
            lines.append(f"- About it: {page.entity_summary}")
        lines.append(f'- "This {label}" means that one; do not ask which.')
    return "\n".join(lines)
