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
"""

from __future__ import annotations

import itertools
import math
import random
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as clock_time
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from vernis.db.models import table_of
from vernis_crm.demo._content import ContactKind, Profile
from vernis_crm.models import (
    Analyzer,
    Call,
    CallStatus,
    Contact,
    ContactEmail,
    ContactNote,
    ContactPhone,
    ContactTag,
    Direction,
    KnowledgeItem,
    Notification,
    PhoneNumber,
    PhoneNumberAnalyzer,
    Plan,
    PlanStatus,
    PlanTemplate,
    SmsMessage,
    SmsStatus,
    Tag,
    Task,
    TaskStatus,
    TextAgent,
    VoiceAgent,
    to_e164,
)
from vernis_crm.permissions import Role

__all__ = ["CrmDemo", "DemoMember", "build"]

# The tables in the order they must be written (foreign keys).
_TABLES: tuple[sa.Table, ...] = tuple(
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
_LAST_DAY = WINDOW_DAYS - 2  # events are drawn up to this many days back; moving them adds at most one
_AFTER_HOURS = ((6 * 60 + 30, 7 * 60 + 50), (17 * 60 + 40, 21 * 60 + 30))
_MENTIONS = (
    "@{me} can you take this one?",
    "@{me} please call back today.",
    "@{me} FYI, see my note.",
    "@{me} can you check the open balance?",
    "@{me} they asked for you specifically.",
)
_ROLE_WEIGHTS = {Role.MEMBER.value: 3, Role.ADMIN.value: 2, Role.OWNER.value: 1}


@dataclass(frozen=True, slots=True)
class DemoMember:
    id: uuid.UUID
    email: str
    name: str
    role: str


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
    builder = _Builder(profile, organization_id, organization_name, _Clock(anchor, timezone), members, id_of)
    builder.build()
    return CrmDemo(rows=builder.rows, entities=builder.entities)


class _Clock:
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
class _Person:
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
class _Source:
    """Something a notification can be about."""

    days_ago: int
    at: datetime
    title: str
    body: str
    link: str
    assignee: uuid.UUID | None = None  # of a task


class _Builder:
    def __init__(
        self,
        profile: Profile,
        organization_id: uuid.UUID,
        organization_name: str,
        clock: _Clock,
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
        self.rows: dict[sa.Table, list[dict[str, Any]]] = {table: [] for table in _TABLES}
        self.entities: dict[str, uuid.UUID] = {}
        self.people: list[_Person] = []
        self.by_name: dict[str, _Person] = {}
        self.lines: dict[str, uuid.UUID] = {}
        self.voice_agents: dict[str, uuid.UUID] = {}
        self.missed_calls: list[_Source] = []
        self.inbound_sms: list[_Source] = []
        self.open_tasks: list[_Source] = []
        self.completed_plans: list[_Source] = []
        self.active_plans: list[tuple[uuid.UUID, _Person, str]] = []  # (plan id, contact, template)
        self.templates: dict[str, tuple[uuid.UUID, tuple[tuple[int, str, str], ...]]] = {}
        self.unknown_numbers: list[str] = []  # callers who are no contact

    # -- helpers -------------------------------------------------------------------------------

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

    def fill(self, rng: random.Random, text: str, person: _Person | None, **values: str) -> str:
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

    # -- the parts, in order -------------------------------------------------------------------

    def build(self) -> None:
        self.infrastructure()
        self.contacts()
        self.calls()
        self.messages()
        self.plans()
        self.tasks()
        self.knowledge()
        self.notifications()

    def infrastructure(self) -> None:
        created = self.clock.event(_LAST_DAY + 200, 9 * 60)
        stamps = {"created_at": created, "updated_at": created}
        for name, voice, language, instructions in self.profile.voice_agents:
            id_ = self.voice_agents[name] = self.id("voice_agent", name)
            self.add(
                VoiceAgent,
                id=id_,
                name=name,
                voice=voice,
                language=language,
                instructions=instructions,
                active=True,
                **stamps,
            )
            self.known("voice_agent", name, id_)
        text_agents = {}
        for name, instructions in self.profile.text_agents:
            id_ = text_agents[name] = self.id("text_agent", name)
            self.add(TextAgent, id=id_, name=name, instructions=instructions, active=True, **stamps)
            self.known("text_agent", name, id_)
        analyzers = {}
        for name, description, criteria in self.profile.analyzers:
            id_ = analyzers[name] = self.id("analyzer", name)
            self.add(Analyzer, id=id_, name=name, description=description, criteria=criteria, **stamps)
            self.known("analyzer", name, id_)
        for line in self.profile.lines:
            id_ = self.lines[line.label] = self.id("phone_number", line.number)
            self.add(
                PhoneNumber,
                id=id_,
                number=line.number,
                label=line.label,
                voice_agent_id=self.voice_agents[line.voice_agent] if line.voice_agent else None,
                text_agent_id=text_agents[line.text_agent] if line.text_agent else None,
                created_at=created,
            )
            self.known("phone_number", line.label, id_)
            for analyzer in line.analyzers:
                self.add(PhoneNumberAnalyzer, phone_number_id=id_, analyzer_id=analyzers[analyzer])

    def contacts(self) -> None:
        rng = self.rng("contacts")
        profile = self.profile
        taken = {to_e164(contact.phone, profile.country_code) for contact in profile.named_contacts}
        taken |= {line.number for line in profile.lines}
        pool = [
            (f"{prefix}{suffix:0{digits}d}", groups)
            for prefix, digits, low, high, groups in profile.number_ranges
            for suffix in range(low, high + 1)
            if f"{prefix}{suffix:0{digits}d}" not in taken
        ]
        numbers = iter(rng.sample(pool, min(len(pool), profile.contacts * 2)))

        for contact in profile.named_contacts:
            person = self.person(
                rng,
                contact.first_name,
                contact.last_name,
                contact.company,
                None,
                list(contact.tags),
                age=rng.randint(120, 900),
                activity=2.5,
            )
            work = contact.email.endswith(".example")
            self.email(person, contact.email, "work" if work else "personal", primary=True)
            e164 = to_e164(contact.phone, profile.country_code)
            assert e164 is not None, contact.phone
            self.phone(person, contact.phone, e164, "work" if work else "mobile", primary=True)
            self.note(rng, person, contact.note, days_ago=rng.randint(5, 60))
            self.known("contact", person.name, person.id)

        weights = [kind.weight for kind in profile.kinds]
        while len(self.people) < profile.contacts:
            kind = rng.choices(profile.kinds, weights)[0]
            first, last = rng.choice(profile.first_names), rng.choice(profile.last_names)
            if f"{first} {last}" in self.by_name:
                continue
            recent = rng.random() < (0.6 if "lead" in kind.tags else 0.2)
            age = rng.randint(1, _LAST_DAY) if recent else rng.randint(120, 1500)
            tags = list(kind.tags) + [tag for tag, chance in kind.extra_tags if rng.random() < chance]
            if profile.new_tag and kind.plans and age <= 60 and "lead" not in tags:
                tags.append(profile.new_tag)
            company = None
            if kind.companies and rng.random() < kind.company_probability:
                company = rng.choice(kind.companies)
            elif profile.employers and rng.random() < kind.company_probability:
                company = rng.choice(profile.employers)
            activity = kind.activity * min(rng.paretovariate(2.0), 6.0)
            person = self.person(rng, first, last, company, kind, tags, age=age, activity=activity)
            self.emails(rng, person)
            if rng.random() < 0.95:
                for index in range(2 if rng.random() < 0.25 else 1):
                    e164, groups = next(numbers)
                    label = ("mobile" if rng.random() < 0.85 else "home") if index == 0 else "work"
                    self.phone(person, self.typed(rng, e164, groups), e164, label, primary=index == 0)
            if rng.random() < 0.45:
                for _ in range(rng.randint(1, 3)):
                    text = self.fill(rng, rng.choice(profile.notes), person)
                    self.note(rng, person, text, days_ago=rng.randint(0, min(age, 400)))
        self.unknown_numbers = [number for number, _ in numbers][:60] or [profile.lines[0].number]

        tags = sorted({tag for person in self.people for tag in person.tags})
        tag_ids = {tag: self.id("tag", tag) for tag in tags}
        created = self.clock.event(_LAST_DAY + 400, 9 * 60)
        for tag in tags:
            self.add(Tag, id=tag_ids[tag], name=tag, created_at=created)
            self.known("tag", tag, tag_ids[tag])
        for person in self.people:
            for tag in dict.fromkeys(person.tags):
                self.add(ContactTag, contact_id=person.id, tag_id=tag_ids[tag])

    def person(
        self,
        rng: random.Random,
        first: str,
        last: str,
        company: str | None,
        kind: ContactKind | None,
        tags: list[str],
        *,
        age: int,
        activity: float,
    ) -> _Person:
        person = _Person(
            self.id("contact", f"{first} {last}"), first, last, company, kind, tags, age, activity
        )
        created = self.clock.event(age, self.business_minute(rng))
        self.add(
            Contact,
            id=person.id,
            first_name=first,
            last_name=last,
            company=company,
            created_at=created,
            updated_at=created,
        )
        self.people.append(person)
        self.by_name[person.name] = person
        return person

    def emails(self, rng: random.Random, person: _Person) -> None:
        first, last = _ascii(person.first), _ascii(person.last)
        business = person.kind is not None and bool(person.kind.companies) and person.company is not None
        if business:
            assert person.company is not None
            self.email(person, f"{first[0]}.{last}@{_domain(person.company)}", "work", primary=True)
            return
        if rng.random() < 0.12:
            return
        local = rng.choice(
            (
                f"{first}.{last}",
                f"{first[0]}{last}",
                f"{first}{last}{rng.randint(1, 99)}",
                f"{last}.{first}",
                f"{first}_{last}",
                f"{first}{rng.randint(1960, 2008)}",
            )
        )
        self.email(person, f"{local}@{rng.choice(self.profile.email_domains)}", "personal", primary=True)
        if person.company and rng.random() < 0.3:
            self.email(person, f"{first}.{last}@{_domain(person.company)}", "work", primary=False)

    def email(self, person: _Person, address: str, label: str, *, primary: bool) -> None:
        address = address.lower()
        created = self.clock.event(person.age, 9 * 60)
        self.add(
            ContactEmail,
            id=self.id("contact_email", f"{person.name}:{address}"),
            contact_id=person.id,
            email=address,
            label=label,
            is_primary=primary,
            created_at=created,
        )

    def phone(self, person: _Person, typed: str, e164: str, label: str, *, primary: bool) -> None:
        if primary:
            person.phone = e164
        created = self.clock.event(person.age, 9 * 60)
        self.add(
            ContactPhone,
            id=self.id("contact_phone", f"{person.name}:{e164}"),
            contact_id=person.id,
            number=typed,
            number_e164=e164,
            label=label,
            is_primary=primary,
            created_at=created,
        )

    def typed(self, rng: random.Random, e164: str, groups: tuple[int, int]) -> str:
        national = e164[1 + len(self.profile.country_code) :]
        a, b = groups
        parts = {"n": national, "a": national[:a], "b": national[a : a + b], "c": national[a + b :]}
        typed = rng.choice(self.profile.number_formats).format_map(parts)
        assert to_e164(typed, self.profile.country_code) == e164, (typed, e164)
        return typed

    def note(self, rng: random.Random, person: _Person, text: str, *, days_ago: int) -> None:
        author = self.writer(rng) if rng.random() < 0.9 else None
        self.add(
            ContactNote,
            id=self.id("contact_note", f"{person.name}:{person.notes}"),
            contact_id=person.id,
            author_id=author.id if author else None,
            body=text,
            created_at=self.clock.event(days_ago, self.business_minute(rng)),
        )
        person.notes += 1

    def reachable(self) -> tuple[list[_Person], list[float]]:
        """The contacts one can call or text, and cumulative weights to pick them by activity."""
        people = [person for person in self.people if person.phone is not None]
        return people, list(itertools.accumulate(person.activity for person in people))

    def calls(self) -> None:
        rng = self.rng("calls")
        profile = self.profile
        people, weights = self.reachable()
        lines = profile.lines
        outbound_lines = [line for line in lines if line.outbound_share > 0]
        star = self.by_name[profile.star]
        main = lines[0]
        self.call(
            0,
            star,
            Direction.INBOUND,
            CallStatus.ANSWERED,
            main.label,
            self.voice_agents.get(main.voice_agent or ""),
            days_ago=1,
            minute=10 * 60 + 15,
            duration=412,
            summary=profile.star_call,
        )
        self.known("call", star.name, self.id("call", "0"))
        for index in range(1, profile.calls):
            person = None if rng.random() < 0.05 else rng.choices(people, cum_weights=weights)[0]
            direction = Direction.INBOUND if rng.random() < 0.6 else Direction.OUTBOUND
            if direction is Direction.INBOUND:
                line = rng.choices(lines, [line.inbound_share for line in lines])[0]
            else:
                line = rng.choices(outbound_lines, [line.outbound_share for line in outbound_lines])[0]
            if line.after_hours:
                minute = rng.randrange(*rng.choice(_AFTER_HOURS))
                status = rng.choices(
                    (CallStatus.ANSWERED, CallStatus.VOICEMAIL, CallStatus.MISSED), (70, 25, 5)
                )[0]
            elif direction is Direction.INBOUND:
                minute = self.business_minute(rng)
                status = rng.choices(list(CallStatus), (72, 14, 11, 3))[0]
            else:
                minute = self.business_minute(rng)
                status = rng.choices(list(CallStatus), (58, 12, 25, 5))[0]
            agent = self.voice_agents.get(line.voice_agent or "")
            automated = line.after_hours or rng.random() < (0.45 if direction is Direction.INBOUND else 0.15)
            if status is not CallStatus.ANSWERED or not automated:
                agent = None
            if status is CallStatus.ANSWERED:
                duration = max(15, min(2400, int(rng.lognormvariate(math.log(170), 0.65))))
            elif status is CallStatus.VOICEMAIL:
                duration = rng.randint(12, 75)
            else:
                duration = 0
            templates = profile.call_summaries.get((direction.value, status.value))
            summary = self.fill(rng, rng.choice(templates), person) if templates and person else None
            days_ago = rng.randint(0, min(_LAST_DAY, person.age if person else _LAST_DAY))
            number = person.phone if person else self.unknown_numbers[index % len(self.unknown_numbers)]
            self.call(
                index,
                person,
                direction,
                status,
                line.label,
                agent,
                days_ago=days_ago,
                minute=minute,
                duration=duration,
                summary=summary,
                number=number,
            )

    def call(
        self,
        index: int,
        person: _Person | None,
        direction: Direction,
        status: CallStatus,
        line: str,
        agent: uuid.UUID | None,
        *,
        days_ago: int,
        minute: int,
        duration: int,
        summary: str | None,
        number: str | None = None,
    ) -> None:
        id_ = self.id("call", str(index))
        started = self.clock.event(days_ago, minute, timedelta(seconds=duration))
        number = number or (person.phone if person else None)
        self.add(
            Call,
            id=id_,
            contact_id=person.id if person else None,
            contact_number=number,
            phone_number_id=self.lines[line],
            agent_id=agent,
            direction=direction.value,
            status=status.value,
            duration_seconds=duration,
            started_at=started,
            summary=summary,
        )
        if direction is Direction.INBOUND and status is CallStatus.MISSED:
            who = person.name if person else number or "an unknown number"
            self.missed_calls.append(
                _Source(
                    days_ago, started, f"Missed call from {who}", f"{who} called the {line}.", f"/calls/{id_}"
                )
            )

    def messages(self) -> None:
        rng = self.rng("messages")
        profile = self.profile
        people, weights = self.reachable()
        star = self.by_name[profile.star]
        settled = [person for person in people if person is not star and person.age > 30]
        waiting = [star, *rng.sample(settled, 12 if profile.contacts > 100 else 2)]
        sms = self.rows[table_of(SmsMessage)]
        for index, person in enumerate(waiting):
            text = (
                profile.star_message
                if person is star
                else self.fill(rng, rng.choice(profile.unanswered), person)
            )
            days_ago = 0 if person is star else rng.randint(0, 3)
            at = self.clock.event(days_ago, self.business_minute(rng) if index else 7 * 60 + 40)
            self.sms(person, Direction.INBOUND, text, at, days_ago, profile.lines[0].label, sender=None)
            if person is star:
                self.known("sms", star.name, sms[-1]["id"])
        # Whoever is waiting for an answer has no later message: their threads end a week before.
        waiting_ids = {person.id for person in waiting}
        outbox = list(profile.outbox)
        outbound = [line for line in profile.lines if line.outbound_share > 0]
        while len(sms) < profile.messages - len(outbox):
            person = rng.choices(people, cum_weights=weights)[0]
            late = 6 if person.id in waiting_ids else 0
            if min(_LAST_DAY, person.age) < late:
                continue
            thread = rng.choice(profile.threads)
            values = {key: rng.choice(options) for key, options in profile.words.items()}
            line = rng.choices(outbound, [line.outbound_share for line in outbound])[0]
            gaps = [0] + [rng.randint(2, 90) for _ in thread[1:]]
            offsets = [sum(gaps[: position + 1]) for position in range(len(gaps))]
            days_ago = rng.randint(late, min(_LAST_DAY, person.age))
            start = self.clock.event(days_ago, self.business_minute(rng), timedelta(minutes=offsets[-1]))
            sender = self.writer(rng) if rng.random() < 0.4 else None
            for (direction, texts), offset in zip(thread, offsets, strict=True):
                text = self.fill(rng, rng.choice(texts), person, **values)
                at = start + timedelta(minutes=offset)
                self.sms(person, Direction(direction), text, at, days_ago, line.label, sender, rng=rng)
        answered = [person for person in people if person.id not in waiting_ids]
        for index, text in enumerate(outbox):
            person = rng.choice(answered)
            at = self.clock.anchor - timedelta(minutes=13 * (index + 1))
            sender = self.member_with_role(Role.MEMBER)
            self.sms(
                person,
                Direction.OUTBOUND,
                self.fill(rng, text, person),
                at,
                0,
                profile.lines[0].label,
                sender,
                status=SmsStatus.QUEUED,
            )

    def sms(
        self,
        person: _Person,
        direction: Direction,
        text: str,
        at: datetime,
        days_ago: int,
        line: str,
        sender: DemoMember | None,
        *,
        rng: random.Random | None = None,
        status: SmsStatus | None = None,
    ) -> None:
        if status is None:
            if direction is Direction.INBOUND:
                status = SmsStatus.RECEIVED
            else:
                assert rng is not None
                status = rng.choices((SmsStatus.DELIVERED, SmsStatus.SENT, SmsStatus.FAILED), (90, 4, 6))[0]
        id_ = self.id("sms", str(len(self.rows[table_of(SmsMessage)])))
        self.add(
            SmsMessage,
            id=id_,
            contact_id=person.id,
            contact_number=person.phone,
            phone_number_id=self.lines[line],
            sender_id=sender.id if sender and direction is Direction.OUTBOUND else None,
            direction=direction.value,
            body=text,
            status=status.value,
            created_at=at,
        )
        if direction is Direction.INBOUND:
            self.inbound_sms.append(
                _Source(days_ago, at, f"New SMS from {person.name}", _excerpt(text), f"/contacts/{person.id}")
            )

    def plans(self) -> None:
        rng = self.rng("plans")
        profile = self.profile
        created = self.clock.event(_LAST_DAY + 300, 9 * 60)
        for name, description, steps in profile.plan_templates:
            id_ = self.id("plan_template", name)
            self.templates[name] = (id_, steps)
            self.add(
                PlanTemplate,
                id=id_,
                name=name,
                description=description,
                steps=[{"day": day, "channel": channel, "action": action} for day, channel, action in steps],
                active=True,
                created_at=created,
                updated_at=created,
            )
            self.known("plan_template", name, id_)
        star = self.by_name[profile.star]
        eligible = [
            person
            for person in self.people
            if person.kind is not None and person.kind.plans and person is not star
        ]
        people = [star, *rng.sample(eligible, profile.plans - 1)]
        names = [name for name, _, _ in profile.plan_templates]
        template_weights = [len(names) - position for position in range(len(names))]
        for index, person in enumerate(people):
            if index == 0:
                template, status, days_ago = profile.star_plan, PlanStatus.ACTIVE, 3
            else:
                template = rng.choices(names, template_weights)[0]
                status = rng.choices(list(PlanStatus), (55, 35, 10))[0]
                last_day = self.templates[template][1][-1][0]
                if status is PlanStatus.COMPLETED:
                    days_ago = rng.randint(last_day + 2, _LAST_DAY)
                elif status is PlanStatus.ACTIVE:
                    days_ago = rng.randint(0, min(30, last_day))
                else:
                    days_ago = rng.randint(5, _LAST_DAY)
            self.plan(rng, index, person, template, status, days_ago)
        self.known("plan", star.name, self.id("plan", "0"))

    def plan(
        self,
        rng: random.Random,
        index: int,
        person: _Person,
        template: str,
        status: PlanStatus,
        days_ago: int,
    ) -> None:
        template_id, steps = self.templates[template]
        started = self.clock.event(days_ago, self.business_minute(rng))
        done_steps = sum(1 for day, _, _ in steps if day <= days_ago)
        completed_at = None
        if status is PlanStatus.COMPLETED:
            current = len(steps)
            completed_at = min(started + timedelta(days=steps[-1][0] + 1), self.clock.anchor)
        else:
            current = min(done_steps, len(steps) - 1)
        if index == 0:
            assignee = self.member_with_role(Role.MEMBER)
        else:
            assignee = self.writer(rng) if rng.random() < 0.9 else None
        id_ = self.id("plan", str(index))
        self.add(
            Plan,
            id=id_,
            template_id=template_id,
            contact_id=person.id,
            assignee_id=assignee.id if assignee else None,
            status=status.value,
            current_step=current,
            started_at=started,
            completed_at=completed_at,
            created_at=started,
        )
        if completed_at is not None:
            self.completed_plans.append(
                _Source(
                    max(0, days_ago - steps[-1][0] - 1),
                    completed_at,
                    f"Plan completed: {template} for {person.name}",
                    f"All {len(steps)} steps are done.",
                    f"/plans/{id_}",
                )
            )
        elif status is PlanStatus.ACTIVE:
            self.active_plans.append((id_, person, template))

    def tasks(self) -> None:
        rng = self.rng("tasks")
        profile = self.profile
        star = self.by_name[profile.star]
        assignee = self.member_with_role(Role.MEMBER)
        self.task(rng, 0, profile.star_task, star, None, TaskStatus.OPEN, 0, 16 * 60, assignee, "")
        self.known("task", profile.star_task, self.id("task", "0"))
        with_phone, weights = self.reachable()
        for index in range(1, profile.tasks):
            status = rng.choices(list(TaskStatus), (55, 33, 12))[0]
            if status is TaskStatus.OPEN:
                # Some due today, some overdue, most ahead.
                due_in = rng.choice((0, 0, rng.randint(-7, -1), rng.randint(1, 14), rng.randint(1, 5)))
            elif status is TaskStatus.DONE:
                due_in = rng.randint(-30, 0)
            else:
                due_in = rng.randint(-30, 5)
            minute = rng.choice((9 * 60, 12 * 60, 17 * 60))
            plan_id = None
            if rng.random() < 0.15 and self.active_plans:
                plan_id, person, template = rng.choice(self.active_plans)
                steps = [action for _, channel, action in self.templates[template][1] if channel == "task"]
                title = f"{person.name}: {rng.choice(steps or [template])}"
            elif rng.random() < 0.8:
                person = rng.choices(with_phone, cum_weights=weights)[0]
                title = self.fill(rng, rng.choice(profile.task_titles), person)
            else:
                person, title = None, rng.choice(profile.chores)
            owner = self.writer(rng) if rng.random() < 0.92 else None
            description = self.fill(rng, "Came up on {weekday}'s call.", person) if rng.random() < 0.3 else ""
            self.task(rng, index, title, person, plan_id, status, due_in, minute, owner, description)

    def task(
        self,
        rng: random.Random,
        index: int,
        title: str,
        person: _Person | None,
        plan_id: uuid.UUID | None,
        status: TaskStatus,
        due_in: int,
        minute: int,
        assignee: DemoMember | None,
        description: str,
    ) -> None:
        due = self.clock.at(due_in, minute)
        created = self.clock.event(max(1, -due_in + rng.randint(1, 10)), self.business_minute(rng))
        closed = min(created + timedelta(hours=rng.randint(2, 96)), self.clock.anchor)
        id_ = self.id("task", str(index))
        self.add(
            Task,
            id=id_,
            title=title[:255],
            description=description,
            status=status.value,
            due_at=due,
            assignee_id=assignee.id if assignee else None,
            contact_id=person.id if person else None,
            plan_id=plan_id,
            created_at=created,
            updated_at=created if status is TaskStatus.OPEN else closed,
            completed_at=closed if status is TaskStatus.DONE else None,
        )
        if status is TaskStatus.OPEN and -3 <= due_in <= 0:
            local_due = due.astimezone(self.clock.zone)
            self.open_tasks.append(
                _Source(
                    max(0, -due_in),
                    min(due, self.clock.anchor) - timedelta(hours=3),
                    f"Task due: {title}"[:255],
                    f"Due {local_due:%a %d %b, %H:%M}.",
                    f"/tasks/{id_}",
                    assignee.id if assignee else None,
                )
            )

    def knowledge(self) -> None:
        created = self.clock.event(_LAST_DAY + 100, 9 * 60)
        for title, body, tags in self.profile.knowledge:
            id_ = self.id("knowledge_item", title)
            self.add(
                KnowledgeItem,
                id=id_,
                title=title,
                body=body,
                tags=list(tags),
                created_at=created,
                updated_at=created,
            )
            self.known("knowledge_item", title, id_)

    def notifications(self) -> None:
        rng = self.rng("notifications")
        count = self.profile.notifications_per_member
        shares = {
            "missed_call": 0.28,
            "new_sms": 0.28,
            "task_due": 0.2,
            "plan_completed": 0.12,
            "mention": 0.12,
        }
        noted = [person for person in self.people if person.notes][:40]
        for member in self.members:
            others = [other for other in self.writers if other.id != member.id]
            wanted = {kind: round(share * count) for kind, share in shares.items()}
            if not others:
                wanted["mention"] = 0
            wanted["new_sms"] += count - sum(wanted.values())
            mine = [task for task in self.open_tasks if task.assignee in (member.id, None)]
            pools = {
                "missed_call": _recent(self.missed_calls, 3 * wanted["missed_call"]),
                "task_due": _recent(mine or self.open_tasks, 3 * wanted["task_due"]),
                "plan_completed": _recent(self.completed_plans, 3 * wanted["plan_completed"]),
            }
            chosen: list[tuple[str, _Source]] = []
            for kind, pool in pools.items():
                picked = rng.sample(pool, min(len(pool), wanted[kind]))
                wanted["new_sms"] += wanted[kind] - len(picked)
                chosen += [(kind, source) for source in picked]
            for _ in range(wanted["mention"]):
                person, other = rng.choice(noted), rng.choice(others)
                days_ago = rng.randint(0, 13)
                body = rng.choice(_MENTIONS).format(me=member.name.split()[0])
                chosen.append(
                    (
                        "mention",
                        _Source(
                            days_ago,
                            self.clock.event(days_ago, self.business_minute(rng)),
                            f"{other.name} mentioned you on {person.name}",
                            body,
                            f"/contacts/{person.id}",
                        ),
                    )
                )
            sms_pool = _recent(self.inbound_sms, 3 * wanted["new_sms"])
            picked = rng.sample(sms_pool, min(len(sms_pool), wanted["new_sms"]))
            chosen += [("new_sms", source) for source in picked]
            for index, (kind, source) in enumerate(chosen):
                read = rng.random() < (0.85 if source.days_ago >= 3 else 0.3)
                read_at = min(source.at + timedelta(minutes=rng.randint(3, 600)), self.clock.anchor)
                self.add(
                    Notification,
                    id=self.id("notification", f"{member.email}:{index}"),
                    member_id=member.id,
                    kind=kind,
                    title=source.title,
                    body=source.body,
                    link=source.link,
                    read_at=read_at if read else None,
                    created_at=source.at,
                )


def _recent(sources: list[_Source], count: int) -> list[_Source]:
    """The `count` most recent sources, by the day they were drawn on (not by timestamp, which moves
    with the anchor), in the order they were made."""
    order = sorted(range(len(sources)), key=lambda index: (sources[index].days_ago, index))[:count]
    return [sources[index] for index in sorted(order)]


def _excerpt(text: str, limit: int = 140) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _ascii(name: str) -> str:
    for german, latin in (("ä", "ae"), ("ö", "oe"), ("ü", "ue"), ("ß", "ss")):
        name = name.replace(german, latin).replace(german.upper(), latin.capitalize())
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return "".join(character for character in plain if character.isalnum()).lower()


def _domain(company: str) -> str:
    words = [word for word in company.split() if word.lower() not in {"gmbh", "ag", "kg", "inc", "llc"}]
    return _ascii("".join(words)) + ".example"
