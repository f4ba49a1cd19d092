"""Contacts of the demo CRM: the profile's named contacts and generated ones, with their e-mail
addresses, phone numbers (typed the many ways people type them), notes and tags.

Generated contacts draw their phone numbers from the profile's number ranges; the numbers left over
call as strangers (`Builder.unknown_numbers`).
"""

from __future__ import annotations

import random
import unicodedata

from vernis_crm.demo._content import ContactKind
from vernis_crm.demo._crm.common import LAST_DAY, Builder, Person
from vernis_crm.models import Contact, ContactEmail, ContactNote, ContactPhone, ContactTag, Tag, to_e164

__all__ = ["add_contacts"]


def add_contacts(builder: Builder) -> None:
    rng = builder.rng("contacts")
    profile = builder.profile
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
        person = _person(
            builder,
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
        _email(builder, person, contact.email, "work" if work else "personal", primary=True)
        e164 = to_e164(contact.phone, profile.country_code)
        assert e164 is not None, contact.phone
        _phone(builder, person, contact.phone, e164, "work" if work else "mobile", primary=True)
        _note(builder, rng, person, contact.note, days_ago=rng.randint(5, 60))
        builder.known("contact", person.name, person.id)

    weights = [kind.weight for kind in profile.kinds]
    while len(builder.people) < profile.contacts:
        kind = rng.choices(profile.kinds, weights)[0]
        first, last = rng.choice(profile.first_names), rng.choice(profile.last_names)
        if f"{first} {last}" in builder.by_name:
            continue
        recent = rng.random() < (0.6 if "lead" in kind.tags else 0.2)
        age = rng.randint(1, LAST_DAY) if recent else rng.randint(120, 1500)
        tags = list(kind.tags) + [tag for tag, chance in kind.extra_tags if rng.random() < chance]
        if profile.new_tag and kind.plans and age <= 60 and "lead" not in tags:
            tags.append(profile.new_tag)
        company = None
        if kind.companies and rng.random() < kind.company_probability:
            company = rng.choice(kind.companies)
        elif profile.employers and rng.random() < kind.company_probability:
            company = rng.choice(profile.employers)
        activity = kind.activity * min(rng.paretovariate(2.0), 6.0)
        person = _person(builder, rng, first, last, company, kind, tags, age=age, activity=activity)
        _emails(builder, rng, person)
        if rng.random() < 0.95:
            for index in range(2 if rng.random() < 0.25 else 1):
                e164, groups = next(numbers)
                label = ("mobile" if rng.random() < 0.85 else "home") if index == 0 else "work"
                _phone(builder, person, _typed(builder, rng, e164, groups), e164, label, primary=index == 0)
        if rng.random() < 0.45:
            for _ in range(rng.randint(1, 3)):
                text = builder.fill(rng, rng.choice(profile.notes), person)
                _note(builder, rng, person, text, days_ago=rng.randint(0, min(age, 400)))
    builder.unknown_numbers = [number for number, _ in numbers][:60] or [profile.lines[0].number]

    tags = sorted({tag for person in builder.people for tag in person.tags})
    tag_ids = {tag: builder.id("tag", tag) for tag in tags}
    created = builder.clock.event(LAST_DAY + 400, 9 * 60)
    for tag in tags:
        builder.add(Tag, id=tag_ids[tag], name=tag, created_at=created)
        builder.known("tag", tag, tag_ids[tag])
    for person in builder.people:
        for tag in dict.fromkeys(person.tags):
            builder.add(ContactTag, contact_id=person.id, tag_id=tag_ids[tag])


def _person(
    builder: Builder,
    rng: random.Random,
    first: str,
    last: str,
    company: str | None,
    kind: ContactKind | None,
    tags: list[str],
    *,
    age: int,
    activity: float,
) -> Person:
    person = Person(builder.id("contact", f"{first} {last}"), first, last, company, kind, tags, age, activity)
    created = builder.clock.event(age, builder.business_minute(rng))
    builder.add(
        Contact,
        id=person.id,
        first_name=first,
        last_name=last,
        company=company,
        created_at=created,
        updated_at=created,
    )
    builder.people.append(person)
    builder.by_name[person.name] = person
    return person


def _emails(builder: Builder, rng: random.Random, person: Person) -> None:
    first, last = _ascii(person.first), _ascii(person.last)
    business = person.kind is not None and bool(person.kind.companies) and person.company is not None
    if business:
        assert person.company is not None
        _email(builder, person, f"{first[0]}.{last}@{_domain(person.company)}", "work", primary=True)
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
    _email(builder, person, f"{local}@{rng.choice(builder.profile.email_domains)}", "personal", primary=True)
    if person.company and rng.random() < 0.3:
        _email(builder, person, f"{first}.{last}@{_domain(person.company)}", "work", primary=False)


def _email(builder: Builder, person: Person, address: str, label: str, *, primary: bool) -> None:
    address = address.lower()
    created = builder.clock.event(person.age, 9 * 60)
    builder.add(
        ContactEmail,
        id=builder.id("contact_email", f"{person.name}:{address}"),
        contact_id=person.id,
        email=address,
        label=label,
        is_primary=primary,
        created_at=created,
    )


def _phone(builder: Builder, person: Person, typed: str, e164: str, label: str, *, primary: bool) -> None:
    if primary:
        person.phone = e164
    created = builder.clock.event(person.age, 9 * 60)
    builder.add(
        ContactPhone,
        id=builder.id("contact_phone", f"{person.name}:{e164}"),
        contact_id=person.id,
        number=typed,
        number_e164=e164,
        label=label,
        is_primary=primary,
        created_at=created,
    )


def _typed(builder: Builder, rng: random.Random, e164: str, groups: tuple[int, int]) -> str:
    national = e164[1 + len(builder.profile.country_code) :]
    a, b = groups
    parts = {"n": national, "a": national[:a], "b": national[a : a + b], "c": national[a + b :]}
    typed = rng.choice(builder.profile.number_formats).format_map(parts)
    assert to_e164(typed, builder.profile.country_code) == e164, (typed, e164)
    return typed


def _note(builder: Builder, rng: random.Random, person: Person, text: str, *, days_ago: int) -> None:
    author = builder.writer(rng) if rng.random() < 0.9 else None
    builder.add(
        ContactNote,
        id=builder.id("contact_note", f"{person.name}:{person.notes}"),
        contact_id=person.id,
        author_id=author.id if author else None,
        body=text,
        created_at=builder.clock.event(days_ago, builder.business_minute(rng)),
    )
    person.notes += 1


def _ascii(name: str) -> str:
    for german, latin in (("ä", "ae"), ("ö", "oe"), ("ü", "ue"), ("ß", "ss")):
        name = name.replace(german, latin).replace(german.upper(), latin.capitalize())
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return "".join(character for character in plain if character.isalnum()).lower()


def _domain(company: str) -> str:
    words = [word for word in company.split() if word.lower() not in {"gmbh", "ag", "kg", "inc", "llc"}]
    return _ascii("".join(words)) + ".example"
