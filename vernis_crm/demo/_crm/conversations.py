"""Calls and SMS of the demo CRM: who called or texted whom, on which line, how it ended, and what
was said; the missed calls and inbound messages later become notifications.

Busy contacts call and text more (picked by their activity). Some contacts wait for an answer: their
inbound message is the last of their thread. A few replies sit queued in the outbox.
"""

from __future__ import annotations

import math
import random
import uuid
from datetime import datetime, timedelta

from vernis.store.models import table_of
from vernis_crm.demo._crm.common import LAST_DAY, Builder, DemoMember, Person, Source, excerpt
from vernis_crm.models import Call, CallStatus, Direction, SmsMessage, SmsStatus
from vernis_crm.permissions import Role

__all__ = ["add_calls", "add_messages"]

_AFTER_HOURS = ((6 * 60 + 30, 7 * 60 + 50), (17 * 60 + 40, 21 * 60 + 30))


def add_calls(builder: Builder) -> None:
    rng = builder.rng("calls")
    profile = builder.profile
    people, weights = builder.reachable()
    lines = profile.lines
    outbound_lines = [line for line in lines if line.outbound_share > 0]
    star = builder.by_name[profile.star]
    main = lines[0]
    _call(
        builder,
        0,
        star,
        Direction.INBOUND,
        CallStatus.ANSWERED,
        main.label,
        builder.voice_agents.get(main.voice_agent or ""),
        days_ago=1,
        minute=10 * 60 + 15,
        duration=412,
        summary=profile.star_call,
    )
    builder.known("call", star.name, builder.id("call", "0"))
    for index in range(1, profile.calls):
        person = None if rng.random() < 0.05 else rng.choices(people, cum_weights=weights)[0]
        direction = Direction.INBOUND if rng.random() < 0.6 else Direction.OUTBOUND
        if direction is Direction.INBOUND:
            line = rng.choices(lines, [line.inbound_share for line in lines])[0]
        else:
            line = rng.choices(outbound_lines, [line.outbound_share for line in outbound_lines])[0]
        if line.after_hours:
            minute = rng.randrange(*rng.choice(_AFTER_HOURS))
            outcomes = (CallStatus.ANSWERED, CallStatus.VOICEMAIL, CallStatus.MISSED)
            status = rng.choices(outcomes, (70, 25, 5))[0]
        elif direction is Direction.INBOUND:
            minute = builder.business_minute(rng)
            status = rng.choices(list(CallStatus), (72, 14, 11, 3))[0]
        else:
            minute = builder.business_minute(rng)
            status = rng.choices(list(CallStatus), (58, 12, 25, 5))[0]
        agent = builder.voice_agents.get(line.voice_agent or "")
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
        summary = builder.fill(rng, rng.choice(templates), person) if templates and person else None
        days_ago = rng.randint(0, min(LAST_DAY, person.age if person else LAST_DAY))
        number = person.phone if person else builder.unknown_numbers[index % len(builder.unknown_numbers)]
        _call(
            builder,
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


def _call(
    builder: Builder,
    index: int,
    person: Person | None,
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
    id_ = builder.id("call", str(index))
    started = builder.clock.event(days_ago, minute, timedelta(seconds=duration))
    number = number or (person.phone if person else None)
    builder.add(
        Call,
        id=id_,
        contact_id=person.id if person else None,
        contact_number=number,
        phone_number_id=builder.lines[line],
        agent_id=agent,
        direction=direction.value,
        status=status.value,
        duration_seconds=duration,
        started_at=started,
        summary=summary,
    )
    if direction is Direction.INBOUND and status is CallStatus.MISSED:
        who = person.name if person else number or "an unknown number"
        builder.missed_calls.append(
            Source(days_ago, started, f"Missed call from {who}", f"{who} called the {line}.", f"/calls/{id_}")
        )


def add_messages(builder: Builder) -> None:
    rng = builder.rng("messages")
    profile = builder.profile
    people, weights = builder.reachable()
    star = builder.by_name[profile.star]
    settled = [person for person in people if person is not star and person.age > 30]
    waiting = [star, *rng.sample(settled, 12 if profile.contacts > 100 else 2)]
    sms = builder.rows[table_of(SmsMessage)]
    for index, person in enumerate(waiting):
        text = (
            profile.star_message
            if person is star
            else builder.fill(rng, rng.choice(profile.unanswered), person)
        )
        days_ago = 0 if person is star else rng.randint(0, 3)
        at = builder.clock.event(days_ago, builder.business_minute(rng) if index else 7 * 60 + 40)
        _sms(builder, person, Direction.INBOUND, text, at, days_ago, profile.lines[0].label, sender=None)
        if person is star:
            builder.known("sms", star.name, sms[-1]["id"])
    # Whoever is waiting for an answer has no later message: their threads end a week before.
    waiting_ids = {person.id for person in waiting}
    outbox = list(profile.outbox)
    outbound = [line for line in profile.lines if line.outbound_share > 0]
    while len(sms) < profile.messages - len(outbox):
        person = rng.choices(people, cum_weights=weights)[0]
        late = 6 if person.id in waiting_ids else 0
        if min(LAST_DAY, person.age) < late:
            continue
        thread = rng.choice(profile.threads)
        values = {key: rng.choice(options) for key, options in profile.words.items()}
        line = rng.choices(outbound, [line.outbound_share for line in outbound])[0]
        gaps = [0] + [rng.randint(2, 90) for _ in thread[1:]]
        offsets = [sum(gaps[: position + 1]) for position in range(len(gaps))]
        days_ago = rng.randint(late, min(LAST_DAY, person.age))
        start = builder.clock.event(days_ago, builder.business_minute(rng), timedelta(minutes=offsets[-1]))
        sender = builder.writer(rng) if rng.random() < 0.4 else None
        for (direction, texts), offset in zip(thread, offsets, strict=True):
            text = builder.fill(rng, rng.choice(texts), person, **values)
            at = start + timedelta(minutes=offset)
            _sms(builder, person, Direction(direction), text, at, days_ago, line.label, sender, rng=rng)
    answered = [person for person in people if person.id not in waiting_ids]
    for index, text in enumerate(outbox):
        person = rng.choice(answered)
        at = builder.clock.anchor - timedelta(minutes=13 * (index + 1))
        sender = builder.member_with_role(Role.MEMBER)
        _sms(
            builder,
            person,
            Direction.OUTBOUND,
            builder.fill(rng, text, person),
            at,
            0,
            profile.lines[0].label,
            sender,
            status=SmsStatus.QUEUED,
        )


def _sms(
    builder: Builder,
    person: Person,
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
    id_ = builder.id("sms", str(len(builder.rows[table_of(SmsMessage)])))
    builder.add(
        SmsMessage,
        id=id_,
        contact_id=person.id,
        contact_number=person.phone,
        phone_number_id=builder.lines[line],
        sender_id=sender.id if sender and direction is Direction.OUTBOUND else None,
        direction=direction.value,
        body=text,
        status=status.value,
        created_at=at,
    )
    if direction is Direction.INBOUND:
        builder.inbound_sms.append(
            Source(days_ago, at, f"New SMS from {person.name}", excerpt(text), f"/contacts/{person.id}")
        )
