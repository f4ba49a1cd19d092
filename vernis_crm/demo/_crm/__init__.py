"""The demo CRM of one organization as rows: `build` turns a `Profile` into what the seed inserts.

`build` is pure and deterministic. What exists (every id, who called whom and when relative to
today, every status, duration and text) depends on the profile alone: each part of the data set
draws from its own `random.Random`, seeded with the profile's slug and the part's name, so growing
one part never reshuffles another. The `anchor` only places the data in time, on the organization's
local calendar:

- calls, messages, notes, plans and notifications happen in the 90 days up to the anchor and never
  after it; an event that would fall on a Sunday, or later than the anchor, moves back a day;
- tasks fall due around the anchor's local date (some overdue, some today, some ahead).

Ids come from `id_of(kind, key)` with keys made of the slug and a natural key (a contact's name, a
call's number in the sequence), so every seeded database has the same ids.

The parts, in the order they are built (a later one draws on the earlier ones), each in its module:
`infrastructure` (agents, analyzers, phone lines), `contacts`, `conversations` (calls, then SMS),
`plans` (plans, then tasks), the knowledge items (in `infrastructure`), and `notifications`; what they
share is `common`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from vernis_crm.demo._content import Profile
from vernis_crm.demo._crm.common import WINDOW_DAYS, Builder, Clock, DemoMember
from vernis_crm.demo._crm.contacts import add_contacts
from vernis_crm.demo._crm.conversations import add_calls, add_messages
from vernis_crm.demo._crm.infrastructure import add_infrastructure, add_knowledge
from vernis_crm.demo._crm.notifications import add_notifications
from vernis_crm.demo._crm.plans import add_plans, add_tasks

__all__ = ["WINDOW_DAYS", "CrmDemo", "DemoMember", "build"]

# In this order: a part draws on what the earlier ones made (the lines, the people, the sources).
_PARTS: tuple[Callable[[Builder], None], ...] = (
    add_infrastructure,
    add_contacts,
    add_calls,
    add_messages,
    add_plans,
    add_tasks,
    add_knowledge,
    add_notifications,
)


@dataclass(slots=True)
class CrmDemo:
    """The rows of one organization's demo CRM, and the ids of its well-known rows."""

    rows: dict[sa.Table, list[dict[str, Any]]]  # in the order they must be written
    # "<slug>:<kind>:<name>" -> id; see `vernis_crm.demo.seed.SeedResult.entities`.
    entities: dict[str, uuid.UUID]


def build(
    profile: Profile,
    *,
    organization_id: uuid.UUID,
    organization_name: str,
    timezone: str,
    members: Sequence[DemoMember],
    anchor: datetime,
    id_of: Callable[[str, str], uuid.UUID],
) -> CrmDemo:
    """The demo CRM of the organization `organization_id` (see the module docstring)."""
    builder = Builder(profile, organization_id, organization_name, Clock(anchor, timezone), members, id_of)
    for part in _PARTS:
        part(builder)
    return CrmDemo(rows=builder.rows, entities=builder.entities)
