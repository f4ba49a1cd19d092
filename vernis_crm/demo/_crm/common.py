"""What the parts of the demo CRM share: the clock, the people and sources they draw on, and the builder.

The `Builder` holds the rows made so far and what a later part draws on (the people, the phone lines,
the missed calls and open tasks a notification can be about), with the helpers every part uses: ids,
each part's own `random.Random`, rows, well-known entities, texts with placeholders filled, and
who wrote what.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as clock_time
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from vernis.store.models import table_of
from vernis_crm.demo._content import ContactKind, Profile
from vernis_crm.models import (
    Analyzer,
    Call,
    Contact,
    ContactEmail,
    ContactNote,
    ContactPhone,
    ContactTag,
    KnowledgeItem,
    Notification,
    PhoneNumber,
    PhoneNumberAnalyzer,
    Plan,
    PlanTemplate,
    SmsMessage,
    Tag,
    Task,
    TextAgent,
    VoiceAgent,
)
from vernis_crm.permissions import Role

__all__ = [
    "LAST_DAY",
    "TABLES",
    "WINDOW_DAYS",
    "Builder",
    "Clock",
    "DemoMember",
    "Person",
    "Source",
    "excerpt",
    "recent",
]

# The tables in the order they must be written (foreign keys).
TABLES: tuple[sa.Table, ...] = tuple(
    table_of(model)
    for model in (
        VoiceAgent,
        TextAgent,
        Analyzer,
        PhoneNumber,
        PhoneNumberAnalyzer,
        Tag,
        Contact,
        ContactEmail,
        ContactPhone,
        ContactTag,
        ContactNote,
        Call,
        SmsMessage,
        PlanTemplate,
        Plan,
        Task,
        KnowledgeItem,
        Notification,
    )
)

WINDOW_DAYS = 90
LAST_DAY = WINDOW_DAYS - 2  # events are drawn up to this many days back; moving them adds at most one
_ROLE_WEIGHTS = {Role.MEMBER.value: 3, Role.ADMIN.value: 2, Role.OWNER.value: 1}


@dataclass(frozen=True, slots=True)
class DemoMember:
    id: uuid.UUID
    email: str
    name: str
    role: str


class Clock:
    def __init__(self, anchor: datetime, timezone: str) -> None:
        self.anchor = anchor
        self.zone = ZoneInfo(timezone)
        self.today = anchor.astimezone(self.zone).date()

    def at(self, days_from_today: int, minute: int) -> datetime:
        day = self.today + timedelta(days=days_from_today)
        local = datetime.combine(day, clock_time(minute // 60, minute % 60), tzinfo=self.zone)
        return local.astimezone(UTC)

    def event(self, days_ago: int, minute: int, span: timedelta = timedelta(0)) -> datetime:
        """Local `minute` of the day `days_ago` before today, moved back off Sundays and until it ends
        (after `span`) by the anchor."""
        while True:
            moment = self.at(-days_ago, minute)
            if (self.today - timedelta(days=days_ago)).weekday() != 6 and moment + span <= self.anchor:
                return moment
            days_ago += 1


@dataclass(slots=True)
class Person:
    id: uuid.UUID
    first: str
    last: str
    company: str | None
    kind: ContactKind | None
    tags: list[str]
    age: int  # days since the contact was created
    activity: float
    phone: str | None = None  # primary E.164
    notes: int = 0

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}".strip()


@dataclass(slots=True)
class Source:
    """Something a notification can be about."""

    days_ago: int
    at: datetime
    title: str
    body: str
    link: str
    assignee: uuid.UUID | None = None  # of a task


class Builder:
    """One organization's demo CRM while the parts build it (see the module docstring)."""

    def __init__(
        self,
        profile: Profile,
        organization_id: uuid.UUID,
        organization_name: str,
        clock: Clock,
        members: Sequence[DemoMember],
        id_of: Callable[[str, str], uuid.UUID],
    ) -> None:
        self.profile = profile
        self.slug = profile.slug
        self.organization_id = organization_id
        self.organization_name = organization_name
        self.clock = clock
        self.members = list(members)
        self.writers = [member for member in members if member.role in _ROLE_WEIGHTS]
        self._id_of = id_of
        self.rows: dict[sa.Table, list[dict[str, Any]]] = {table: [] for table in TABLES}
        self.entities: dict[str, uuid.UUID] = {}
        self.people: list[Person] = []
        self.by_name: dict[str, Person] = {}
        self.lines: dict[str, uuid.UUID] = {}
        self.voice_agents: dict[str, uuid.UUID] = {}
        self.missed_calls: list[Source] = []
        self.inbound_sms: list[Source] = []
        self.open_tasks: list[Source] = []
        self.completed_plans: list[Source] = []
        self.active_plans: list[tuple[uuid.UUID, Person, str]] = []  # (plan id, contact, template)
        self.templates: dict[str, tuple[uuid.UUID, tuple[tuple[int, str, str], ...]]] = {}
        self.unknown_numbers: list[str] = []  # callers who are no contact

    def id(self, kind: str, key: str) -> uuid.UUID:
        return self._id_of(kind, f"{self.slug}:{key}")

    def rng(self, part: str) -> random.Random:
        return random.Random(f"vernis-demo:{self.slug}:{part}")

    def add(self, model: type[Any], **row: Any) -> dict[str, Any]:
        row["organization_id"] = self.organization_id
        self.rows[table_of(model)].append(row)
        return row

    def known(self, kind: str, name: str, id_: uuid.UUID) -> None:
        self.entities[f"{self.slug}:{kind}:{name}"] = id_

    def fill(self, rng: random.Random, text: str, person: Person | None, **values: str) -> str:
        words = {key: rng.choice(options) for key, options in self.profile.words.items()}
        if person is not None:
            other = rng.choice(self.people) if self.people else person
            words |= {
                "first": person.first,
                "last": person.last,
                "name": person.name,
                "company": person.company or "",
                "other": other.name if other is not person else "a friend",
            }
        words |= {"org": self.organization_name} | values
        return text.format_map(words)

    def business_minute(self, rng: random.Random) -> int:
        start, end = self.profile.business_hours
        return rng.randrange(start, end)

    def writer(self, rng: random.Random) -> DemoMember | None:
        if not self.writers:
            return None
        weights = [_ROLE_WEIGHTS[member.role] for member in self.writers]
        return rng.choices(self.writers, weights)[0]

    def member_with_role(self, role: Role) -> DemoMember | None:
        fallback = self.writers[0] if self.writers else None
        return next((member for member in self.writers if member.role == role.value), fallback)

    def reachable(self) -> tuple[list[Person], list[float]]:
        """The contacts one can call or text, and cumulative weights to pick them by activity."""
        people = [person for person in self.people if person.phone is not None]
        return people, list(itertools.accumulate(person.activity for person in people))


def recent(sources: list[Source], count: int) -> list[Source]:
    """The `count` most recent sources, by the day they were drawn on (not by timestamp, which moves
    with the anchor), in the order they were made."""
    order = sorted(range(len(sources)), key=lambda index: (sources[index].days_ago, index))[:count]
    return [sources[index] for index in sorted(order)]


def excerpt(text: str, limit: int = 140) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
