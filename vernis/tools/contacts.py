"""Contacts tools (SPEC §5): find, read, create and change the organization's contacts.

Every query is scoped to the caller's organization: an id from another organization is "not found".

`search_contacts` reads a query the way people type it. A query of digits and phone punctuation is
a phone number, whole or partial, in any format: its digits are compared with the stored E.164
forms (`(212) 555-0147`, `+1 212 555 0147` and `555-0147` all find `+12125550147`; a national
trunk `0` is dropped, so `030 2312` finds `+49302312...`). Anything else is split into words, and
each word must appear (case-insensitive, anywhere) in the first name, last name, company or one of
the e-mail addresses: `jane`, `jane coo`, `cooper jane` and `gmail.com` all work.

Each write plans its change first (`_plan_*`): it validates against the data and returns the preview,
which holds everything the change needs. The run plans again in the transaction that applies it and
applies exactly that plan, so what was approved is what is written (or a clear error, if the data
changed in between). A phone number typed without a country code is read in the country of the
organization's own (oldest) phone line.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.db.crm import (
    Call,
    Contact,
    ContactEmail,
    ContactNote,
    ContactPhone,
    ContactTag,
    PhoneNumber,
    Plan,
    PlanStatus,
    SmsMessage,
    Tag,
    Task,
    TaskStatus,
    to_e164,
)
from vernis.db.engine import dialect_insert
from vernis.db.models import Member, table_of, utcnow
from vernis.services.registry import Tool, ToolContext, ToolFailure

__all__ = ["TOOLS", "calling_code", "contact_ref", "find_contact", "local_time", "read_phone"]

CATEGORY = "Contacts"
MAX_EMAILS = 10
MAX_PHONES = 10
LATEST_NOTES = 5
NOTE_EXCERPT = 500
RECENT_DAYS = 30

_contact = table_of(Contact)
_note = table_of(ContactNote)
_email = table_of(ContactEmail)
_phone = table_of(ContactPhone)
_tag = table_of(Tag)
_contact_tag = table_of(ContactTag)
_line = table_of(PhoneNumber)
_member = table_of(Member)
_call = table_of(Call)
_sms = table_of(SmsMessage)
_task = table_of(Task)
_plan = table_of(Plan)

_NOT_FOUND_HINT = "Use search_contacts to find the contact's id."

# -- phone numbers -------------------------------------------------------------------------------

# E.164 country codes are prefix-free: 1 and 7 are one digit, these two, every other one three.
_TWO_DIGIT_CODES = frozenset(
    {20, 27, 30, 31, 32, 33, 34, 36, 39, 40, 41, 43, 44, 45, 46, 47, 48, 49, 51, 52, 53, 54, 55, 56, 57, 58}
    | {60, 61, 62, 63, 64, 65, 66, 81, 82, 84, 86, 90, 91, 92, 93, 94, 95, 98}
)


def calling_code(e164: str) -> str:
    """The country calling code of an E.164 number (`+12125550100` → `1`, `+4930...` → `49`)."""
    digits = e164.removeprefix("+")
    if digits[:1] in ("1", "7"):
        return digits[:1]
    return digits[:2] if int(digits[:2]) in _TWO_DIGIT_CODES else digits[:3]


async def _home_code(connection: AsyncConnection, organization_id: uuid.UUID) -> str | None:
    number = await connection.scalar(
        sa.select(_line.c.number)
        .where(_line.c.organization_id == organization_id)
        .order_by(_line.c.created_at, _line.c.number)
        .limit(1)
    )
    return calling_code(number) if number else None


def read_phone(number: str, home_code: str | None) -> str | None:
    """The E.164 form of a typed number, national numbers read in `home_code` (None: only
    international numbers, `+...` or `00...`, are understood)."""
    if home_code is None and not number.strip().startswith(("+", "00")):
        return None
    return to_e164(number, home_code or "1")


def _bad_phone(number: str, home_code: str | None) -> ToolFailure:
    example = "+1 212 555 0147" if home_code in (None, "1") else f"+{home_code} ..."
    return ToolFailure(
        "invalid_phone",
        f"{number!r} is not a phone number that can be called or texted.",
        hint=f"Give the whole number, with its country code if it is abroad (e.g. {example}).",
    )


# -- argument models ----------------------------------------------------------------------------

_EMAIL_FORM = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_TAG_FORM = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")


def _email_address(value: str) -> str:
    value = value.strip().lower()
    if not _EMAIL_FORM.match(value):
        raise ValueError(f"{value!r} is not an e-mail address")
    return value


def _tag_name(value: str) -> str:
    value = re.sub(r"[\s_]+", "-", value.strip().lower())
    if not _TAG_FORM.match(value):
        raise ValueError(f"{value!r} is not a tag: use lowercase letters, digits and dashes")
    return value


EmailAddress = Annotated[str, Field(max_length=320), AfterValidator(_email_address)]
TagName = Annotated[str, Field(max_length=64), AfterValidator(_tag_name)]
PhoneText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=32)]
Text = Annotated[str, StringConstraints(strip_whitespace=True)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchContactsArgs(_Args):
    query: Text | None = Field(
        None,
        max_length=200,
        description=(
            "Part of a name (first, last or both), company, e-mail address, or phone number in any "
            "format. Leave out to list all contacts (alphabetically)."
        ),
    )
    tag: TagName | None = Field(None, description="Only contacts with this tag (e.g. vip).")
    limit: int = Field(10, ge=1, le=50, description="How many contacts to return (at most 50).")
    offset: int = Field(0, ge=0, le=10_000, description="How many to skip (paging: next_offset).")


class ContactIdArgs(_Args):
    contact_id: uuid.UUID = Field(description="The contact's id, as search_contacts returned it.")


class EmailInput(_Args):
    email: EmailAddress = Field(description="The e-mail address.")
    label: Literal["personal", "work", "other"] = Field("personal", description="Kind of address.")


class PhoneInput(_Args):
    number: PhoneText = Field(description="The phone number, in any format.")
    label: Literal["mobile", "home", "work", "other"] = Field("mobile", description="Kind of number.")


class CreateContactArgs(_Args):
    first_name: Annotated[Text, StringConstraints(min_length=1, max_length=100)] = Field(
        description="First name (or the only name)."
    )
    last_name: Annotated[Text, StringConstraints(max_length=100)] = Field("", description="Last name.")
    company: Annotated[Text, StringConstraints(min_length=1, max_length=255)] | None = Field(
        None, description="Company or organization they belong to."
    )
    emails: list[EmailInput] = Field(
        default_factory=list, max_length=5, description="E-mail addresses; the first is the primary one."
    )
    phones: list[PhoneInput] = Field(
        default_factory=list, max_length=5, description="Phone numbers; the first is the primary one."
    )
    tags: list[TagName] = Field(default_factory=list, max_length=10, description="Tags, e.g. patient, lead.")
    note: Annotated[Text, StringConstraints(min_length=1, max_length=5000)] | None = Field(
        None, description="A first note about the contact."
    )


class UpdateContactArgs(ContactIdArgs):
    first_name: Annotated[Text, StringConstraints(min_length=1, max_length=100)] | None = Field(
        None, description="New first name. Leave out to keep it."
    )
    last_name: Annotated[Text, StringConstraints(max_length=100)] | None = Field(
        None, description="New last name; an empty string removes it. Leave out to keep it."
    )
    company: Annotated[Text, StringConstraints(max_length=255)] | None = Field(
        None, description="New company; an empty string removes it. Leave out to keep it."
    )


class AddContactNoteArgs(ContactIdArgs):
    body: Annotated[Text, StringConstraints(min_length=1, max_length=5000)] = Field(
        description="The note's text."
    )


class _Changes(ContactIdArgs):
    @model_validator(mode="after")
    def _something_to_do(self) -> _Changes:
        if not any(value for name, value in self if name != "contact_id"):
            raise ValueError("say what to change")
        return self


class ManageContactTagsArgs(_Changes):
    add: list[TagName] = Field(default_factory=list, max_length=10, description="Tags to give the contact.")
    remove: list[TagName] = Field(
        default_factory=list, max_length=10, description="Tags to take off the contact."
    )

    @model_validator(mode="after")
    def _no_overlap(self) -> ManageContactTagsArgs:
        if both := sorted(set(self.add) & set(self.remove)):
            raise ValueError(f"tags both added and removed: {', '.join(both)}")
        return self


class ManageContactEmailsArgs(_Changes):
    add: list[EmailInput] = Field(default_factory=list, max_length=5, description="Addresses to add.")
    remove: list[EmailAddress] = Field(
        default_factory=list, max_length=10, description="Addresses to remove."
    )
    primary: EmailAddress | None = Field(
        None, description="Make this address (existing or added) the primary one."
    )


class ManageContactPhonesArgs(_Changes):
    add: list[PhoneInput] = Field(default_factory=list, max_length=5, description="Numbers to add.")
    remove: list[PhoneText] = Field(
        default_factory=list, max_length=10, description="Numbers to remove, in any format."
    )
    primary: PhoneText | None = Field(
        None, description="Make this number (existing or added) the primary one, in any format."
    )


# -- reading ------------------------------------------------------------------------------------


def _name(row: Any) -> str:
    return f"{row.first_name} {row.last_name}".strip()


def contact_ref(row: Any) -> dict[str, Any]:
    """How a contact is named in results and previews."""
    return {"id": str(row.id), "name": _name(row)}


def local_time(ctx: ToolContext, value: datetime | None) -> str | None:
    """`value` in the organization's time zone (ISO 8601 with the offset), as results show times."""
    if value is None:
        return None
    try:
        zone = ZoneInfo(ctx.member.organization_timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    return value.astimezone(zone).isoformat(timespec="minutes")


async def find_contact(
    connection: AsyncConnection, ctx: ToolContext, contact_id: uuid.UUID, *, for_update: bool = False
) -> Any:
    """The contact `contact_id` of the caller's organization, or `not_found`."""
    query = sa.select(_contact).where(
        _contact.c.organization_id == ctx.organization_id, _contact.c.id == contact_id
    )
    if for_update:
        query = query.with_for_update()
    row = (await connection.execute(query)).first()
    if row is None:
        raise ToolFailure("not_found", f"There is no contact with the id {contact_id}.", hint=_NOT_FOUND_HINT)
    return row


def _lower(column: Any) -> Any:
    return sa.func.lower(sa.func.coalesce(column, ""))


_PHONE_QUERY = re.compile(r"^[\d\s().+\-/]+$")


def _matches(ctx: ToolContext, query: str) -> tuple[sa.ColumnElement[bool], list[sa.ColumnElement[int]]]:
    """The condition a contact must meet for `query`, and how to rank the matches (before by name)."""
    text = query.lower()
    digits = re.sub(r"\D", "", text)
    if _PHONE_QUERY.match(text) and len(digits) >= 3:
        international = text.startswith(("+", "00"))
        e164 = to_e164(text) if international else None
        needle = e164[1:] if e164 else (digits if international else digits.lstrip("0") or digits)
        return sa.exists().where(
            _phone.c.organization_id == ctx.organization_id,
            _phone.c.contact_id == _contact.c.id,
            _phone.c.number_e164.contains(needle, autoescape=True),
        ), []
    words = [word for word in re.split(r"[\s,;]+", text) if word][:8]
    conditions = [
        sa.or_(
            _lower(_contact.c.first_name).contains(word, autoescape=True),
            _lower(_contact.c.last_name).contains(word, autoescape=True),
            _lower(_contact.c.company).contains(word, autoescape=True),
            sa.exists().where(
                _email.c.organization_id == ctx.organization_id,
                _email.c.contact_id == _contact.c.id,
                _email.c.email.contains(word, autoescape=True),
            ),
        )
        for word in words
    ]
    if not words:
        return sa.true(), []
    # Names starting with the first word come first: "jan" lists the Janes before Bryan Janssen.
    first = words[0]
    rank = sa.case(
        (
            sa.or_(
                _lower(_contact.c.first_name).startswith(first, autoescape=True),
                _lower(_contact.c.last_name).startswith(first, autoescape=True),
            ),
            0,
        ),
        else_=1,
    )
    return sa.and_(*conditions), [rank]


async def _tags_of(
    connection: AsyncConnection, ctx: ToolContext, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[str]]:
    rows = await connection.execute(
        sa.select(_contact_tag.c.contact_id, _tag.c.name)
        .join(_tag, _tag.c.id == _contact_tag.c.tag_id)
        .where(_contact_tag.c.organization_id == ctx.organization_id, _contact_tag.c.contact_id.in_(ids))
        .order_by(_tag.c.name)
    )
    tags: dict[uuid.UUID, list[str]] = {id_: [] for id_ in ids}
    for contact_id, name in rows:
        tags[contact_id].append(name)
    return tags


async def _first_of(
    connection: AsyncConnection, ctx: ToolContext, table: sa.Table, column: str, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, str]:
    """Each contact's primary (else oldest) e-mail address or phone number."""
    rows = await connection.execute(
        sa.select(table.c.contact_id, table.c[column])
        .where(table.c.organization_id == ctx.organization_id, table.c.contact_id.in_(ids))
        .order_by(table.c.is_primary.desc(), table.c.created_at, table.c[column])
    )
    first: dict[uuid.UUID, str] = {}
    for contact_id, value in rows:
        first.setdefault(contact_id, value)
    return first


async def search_contacts(ctx: ToolContext, args: SearchContactsArgs) -> dict[str, Any]:
    where: list[sa.ColumnElement[bool]] = [_contact.c.organization_id == ctx.organization_id]
    rank: list[sa.ColumnElement[int]] = []
    if args.query:
        condition, rank = _matches(ctx, args.query)
        where.append(condition)
    if args.tag:
        where.append(
            sa.exists().where(
                _contact_tag.c.contact_id == _contact.c.id,
                _tag.c.id == _contact_tag.c.tag_id,
                _tag.c.organization_id == ctx.organization_id,
                _tag.c.name == args.tag,
            )
        )
    async with ctx.engine.connect() as connection:
        total = int(
            await connection.scalar(sa.select(sa.func.count()).select_from(_contact).where(*where)) or 0
        )
        rows = (
            await connection.execute(
                sa.select(_contact.c.id, _contact.c.first_name, _contact.c.last_name, _contact.c.company)
                .where(*where)
                .order_by(*rank, _contact.c.last_name, _contact.c.first_name, _contact.c.id)
                .offset(args.offset)
                .limit(args.limit)
            )
        ).all()
        ids = [row.id for row in rows]
        emails = await _first_of(connection, ctx, _email, "email", ids)
        phones = await _first_of(connection, ctx, _phone, "number_e164", ids)
        tags = await _tags_of(connection, ctx, ids)
    result: dict[str, Any] = {
        "contacts": [
            contact_ref(row)
            | {
                "company": row.company,
                "email": emails.get(row.id),
                "phone": phones.get(row.id),
                "tags": tags[row.id],
            }
            for row in rows
        ],
        "total": total,
    }
    if args.offset + len(rows) < total:
        result["next_offset"] = args.offset + len(rows)
    return result


def _about(ctx: ToolContext, table: sa.Table, contact_id: uuid.UUID, what: Any, *where: Any) -> Any:
    """`what` (an aggregate) over the contact's rows of `table`, as a scalar subquery."""
    return (
        sa.select(what)
        .where(table.c.organization_id == ctx.organization_id, table.c.contact_id == contact_id, *where)
        .scalar_subquery()
    )


async def _activity(connection: AsyncConnection, ctx: ToolContext, contact_id: uuid.UUID) -> dict[str, Any]:
    since = utcnow() - timedelta(days=RECENT_DAYS)
    count = sa.func.count()
    columns = {
        "calls": _about(ctx, _call, contact_id, count),
        f"calls_last_{RECENT_DAYS}_days": _about(ctx, _call, contact_id, count, _call.c.started_at >= since),
        "last_call_at": _about(ctx, _call, contact_id, sa.func.max(_call.c.started_at)),
        "messages": _about(ctx, _sms, contact_id, count),
        f"messages_last_{RECENT_DAYS}_days": _about(ctx, _sms, contact_id, count, _sms.c.created_at >= since),
        "last_message_at": _about(ctx, _sms, contact_id, sa.func.max(_sms.c.created_at)),
        "open_tasks": _about(ctx, _task, contact_id, count, _task.c.status == TaskStatus.OPEN.value),
        "active_plans": _about(ctx, _plan, contact_id, count, _plan.c.status == PlanStatus.ACTIVE.value),
    }
    row = (await connection.execute(sa.select(*(column.label(key) for key, column in columns.items())))).one()
    return {
        key: local_time(ctx, value) if key.endswith("_at") else value for key, value in row._mapping.items()
    }


async def _emails(
    connection: AsyncConnection, ctx: ToolContext, contact_id: uuid.UUID
) -> list[dict[str, Any]]:
    rows = await connection.execute(
        sa.select(_email)
        .where(_email.c.organization_id == ctx.organization_id, _email.c.contact_id == contact_id)
        .order_by(_email.c.is_primary.desc(), _email.c.created_at, _email.c.email)
    )
    return [{"email": row.email, "label": row.label, "primary": row.is_primary} for row in rows]


async def _phones(
    connection: AsyncConnection, ctx: ToolContext, contact_id: uuid.UUID
) -> list[dict[str, Any]]:
    rows = await connection.execute(
        sa.select(_phone)
        .where(_phone.c.organization_id == ctx.organization_id, _phone.c.contact_id == contact_id)
        .order_by(_phone.c.is_primary.desc(), _phone.c.created_at, _phone.c.number_e164)
    )
    return [
        {"number": row.number, "e164": row.number_e164, "label": row.label, "primary": row.is_primary}
        for row in rows
    ]


def _excerpt(text: str, limit: int = NOTE_EXCERPT) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


async def get_contact_details(ctx: ToolContext, args: ContactIdArgs) -> dict[str, Any]:
    async with ctx.engine.connect() as connection:
        contact = await find_contact(connection, ctx, args.contact_id)
        notes_total = await connection.scalar(sa.select(_about(ctx, _note, contact.id, sa.func.count())))
        notes = (
            await connection.execute(
                sa.select(_note.c.id, _note.c.body, _note.c.created_at, _member.c.name.label("author"))
                .outerjoin(_member, _member.c.id == _note.c.author_id)
                .where(_note.c.organization_id == ctx.organization_id, _note.c.contact_id == contact.id)
                .order_by(_note.c.created_at.desc(), _note.c.id)
                .limit(LATEST_NOTES)
            )
        ).all()
        return contact_ref(contact) | {
            "first_name": contact.first_name,
            "last_name": contact.last_name,
            "company": contact.company,
            "created_at": local_time(ctx, contact.created_at),
            "emails": await _emails(connection, ctx, contact.id),
            "phones": await _phones(connection, ctx, contact.id),
            "tags": (await _tags_of(connection, ctx, [contact.id]))[contact.id],
            "notes": {
                "total": int(notes_total or 0),
                "latest": [
                    {
                        "id": str(note.id),
                        "body": _excerpt(note.body),
                        "author": note.author,
                        "created_at": local_time(ctx, note.created_at),
                    }
                    for note in notes
                ],
            },
            "activity": await _activity(connection, ctx, contact.id),
        }


# -- shared checks of the writes ----------------------------------------------------------------


async def _owners_of_emails(
    connection: AsyncConnection, ctx: ToolContext, emails: Iterable[str], other_than: uuid.UUID | None
) -> None:
    """Refuse addresses another contact of the organization already has."""
    emails = list(emails)
    if not emails:
        return
    query = (
        sa.select(_email.c.email, _contact.c.id, _contact.c.first_name, _contact.c.last_name)
        .join(_contact, _contact.c.id == _email.c.contact_id)
        .where(_email.c.organization_id == ctx.organization_id, _email.c.email.in_(emails))
        .order_by(_email.c.email)
    )
    if other_than is not None:
        query = query.where(_email.c.contact_id != other_than)
    taken = (await connection.execute(query)).first()
    if taken is not None:
        raise ToolFailure(
            "duplicate_email",
            f"{taken.email} already belongs to {_name(taken)} (contact {taken.id}).",
            hint="Use that contact instead (get_contact_details), or give a different address.",
        )


async def _phone_warnings(
    connection: AsyncConnection, ctx: ToolContext, numbers: Iterable[str], other_than: uuid.UUID | None
) -> list[str]:
    """Numbers another contact also has (families share a line): worth a word, not a refusal."""
    numbers = list(numbers)
    if not numbers:
        return []
    query = (
        sa.select(_phone.c.number_e164, _contact.c.first_name, _contact.c.last_name)
        .join(_contact, _contact.c.id == _phone.c.contact_id)
        .where(_phone.c.organization_id == ctx.organization_id, _phone.c.number_e164.in_(numbers))
        .order_by(_phone.c.number_e164, _contact.c.last_name, _contact.c.first_name)
    )
    if other_than is not None:
        query = query.where(_phone.c.contact_id != other_than)
    return [
        f"{row.number_e164} is also the number of {_name(row)}." for row in await connection.execute(query)
    ]


async def _read_phones(
    connection: AsyncConnection, ctx: ToolContext, numbers: Iterable[str]
) -> dict[str, str]:
    """Typed number → E.164, or `invalid_phone` for the first that is no number."""
    home = await _home_code(connection, ctx.organization_id)
    read: dict[str, str] = {}
    for number in numbers:
        e164 = read_phone(number, home)
        if e164 is None:
            raise _bad_phone(number, home)
        read[number] = e164
    return read


def _once(values: Iterable[str], what: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ToolFailure("invalid_arguments", f"{value} is given twice as {what}.")
        seen.add(value)


async def _ensure_tags(connection: AsyncConnection, ctx: ToolContext, names: Sequence[str]) -> dict[str, Any]:
    """The ids of the organization's tags `names`, creating the missing ones."""
    if not names:
        return {}
    await connection.execute(
        dialect_insert(connection.dialect, _tag).on_conflict_do_nothing(),
        [{"id": uuid.uuid4(), "organization_id": ctx.organization_id, "name": name} for name in names],
    )
    rows = await connection.execute(
        sa.select(_tag.c.name, _tag.c.id).where(
            _tag.c.organization_id == ctx.organization_id, _tag.c.name.in_(names)
        )
    )
    return {name: id_ for name, id_ in rows}


async def _existing_tags(connection: AsyncConnection, ctx: ToolContext, names: Iterable[str]) -> set[str]:
    names = list(names)
    if not names:
        return set()
    rows = await connection.scalars(
        sa.select(_tag.c.name).where(_tag.c.organization_id == ctx.organization_id, _tag.c.name.in_(names))
    )
    return set(rows)


async def _touch(connection: AsyncConnection, ctx: ToolContext, contact_id: uuid.UUID) -> None:
    await connection.execute(
        sa.update(_contact)
        .where(_contact.c.organization_id == ctx.organization_id, _contact.c.id == contact_id)
        .values(updated_at=utcnow())
    )


Planner = Callable[[AsyncConnection, ToolContext, Any], Awaitable[dict[str, Any]]]


def _previewing(plan: Planner) -> Callable[[ToolContext, Any], Awaitable[dict[str, Any]]]:
    """A write's preview: its plan, made in a transaction that is rolled back (it changes nothing)."""

    async def preview(ctx: ToolContext, args: Any) -> dict[str, Any]:
        async with ctx.engine.connect() as connection:
            return await plan(connection, ctx, args)

    return preview


# -- create_contact -----------------------------------------------------------------------------


async def _plan_create(
    connection: AsyncConnection, ctx: ToolContext, args: CreateContactArgs
) -> dict[str, Any]:
    emails = [entry.email for entry in args.emails]
    _once(emails, "an e-mail address")
    await _owners_of_emails(connection, ctx, emails, None)
    read = await _read_phones(connection, ctx, [entry.number for entry in args.phones])
    _once([read[entry.number] for entry in args.phones], "a phone number")
    tags = list(dict.fromkeys(args.tags))
    warnings = [
        f"A contact named {_name(row)} already exists (contact {row.id})."
        for row in await connection.execute(
            sa.select(_contact.c.id, _contact.c.first_name, _contact.c.last_name).where(
                _contact.c.organization_id == ctx.organization_id,
                sa.func.lower(_contact.c.first_name) == args.first_name.lower(),
                sa.func.lower(_contact.c.last_name) == args.last_name.lower(),
            )
        )
    ]
    warnings += await _phone_warnings(connection, ctx, read.values(), None)
    preview: dict[str, Any] = {
        "action": "Create a contact",
        "contact": {
            "first_name": args.first_name,
            "last_name": args.last_name,
            "company": args.company,
            "emails": [
                {"email": entry.email, "label": entry.label, "primary": index == 0}
                for index, entry in enumerate(args.emails)
            ],
            "phones": [
                {
                    "number": entry.number,
                    "e164": read[entry.number],
                    "label": entry.label,
                    "primary": index == 0,
                }
                for index, entry in enumerate(args.phones)
            ],
            "tags": tags,
            "note": args.note,
        },
    }
    if new := sorted(set(tags) - await _existing_tags(connection, ctx, tags)):
        preview["new_tags"] = new
    if warnings:
        preview["warnings"] = warnings
    return preview


async def create_contact(ctx: ToolContext, args: CreateContactArgs) -> dict[str, Any]:
    async with ctx.engine.begin() as connection:
        plan = (await _plan_create(connection, ctx, args))["contact"]
        now = utcnow()
        contact_id = uuid.uuid4()
        await connection.execute(
            sa.insert(_contact).values(
                id=contact_id,
                organization_id=ctx.organization_id,
                first_name=plan["first_name"],
                last_name=plan["last_name"],
                company=plan["company"],
                created_at=now,
                updated_at=now,
            )
        )
        owned = {"organization_id": ctx.organization_id, "contact_id": contact_id, "created_at": now}
        if plan["emails"]:
            await connection.execute(
                sa.insert(_email),
                [
                    owned
                    | {
                        "id": uuid.uuid4(),
                        "email": e["email"],
                        "label": e["label"],
                        "is_primary": e["primary"],
                    }
                    for e in plan["emails"]
                ],
            )
        if plan["phones"]:
            await connection.execute(
                sa.insert(_phone),
                [
                    owned
                    | {
                        "id": uuid.uuid4(),
                        "number": p["number"],
                        "number_e164": p["e164"],
                        "label": p["label"],
                        "is_primary": p["primary"],
                    }
                    for p in plan["phones"]
                ],
            )
        tag_ids = await _ensure_tags(connection, ctx, plan["tags"])
        if tag_ids:
            await connection.execute(
                sa.insert(_contact_tag),
                [
                    {
                        "organization_id": ctx.organization_id,
                        "contact_id": contact_id,
                        "tag_id": tag_ids[name],
                    }
                    for name in plan["tags"]
                ],
            )
        if plan["note"]:
            await connection.execute(
                sa.insert(_note).values(
                    owned | {"id": uuid.uuid4(), "author_id": ctx.member.id, "body": plan["note"]}
                )
            )
    return {
        "id": str(contact_id),
        "name": f"{plan['first_name']} {plan['last_name']}".strip(),
        "created": True,
    }


# -- update_contact -----------------------------------------------------------------------------


async def _plan_update(
    connection: AsyncConnection, ctx: ToolContext, args: UpdateContactArgs
) -> dict[str, Any]:
    contact = await find_contact(connection, ctx, args.contact_id, for_update=True)
    wanted = {"first_name": args.first_name, "last_name": args.last_name, "company": args.company}
    changes: dict[str, dict[str, Any]] = {}
    for field, value in wanted.items():
        if value is None:
            continue
        # An empty company is no company; an empty last name is just empty (the column's default).
        new = (value or None) if field == "company" else value
        if new != getattr(contact, field):
            changes[field] = {"from": getattr(contact, field), "to": new}
    if not changes:
        raise ToolFailure(
            "no_change",
            f"{_name(contact)} already has these values; nothing to change.",
            hint="Give only the fields that should change.",
        )
    return {"action": "Update a contact", "contact": contact_ref(contact), "changes": changes}


async def update_contact(ctx: ToolContext, args: UpdateContactArgs) -> dict[str, Any]:
    async with ctx.engine.begin() as connection:
        plan = await _plan_update(connection, ctx, args)
        values = {field: change["to"] for field, change in plan["changes"].items()}
        await connection.execute(
            sa.update(_contact)
            .where(_contact.c.organization_id == ctx.organization_id, _contact.c.id == args.contact_id)
            .values(values | {"updated_at": utcnow()})
        )
        contact = await find_contact(connection, ctx, args.contact_id)
    return contact_ref(contact) | {"company": contact.company, "updated": sorted(values)}


# -- add_contact_note ---------------------------------------------------------------------------


async def _plan_note(
    connection: AsyncConnection, ctx: ToolContext, args: AddContactNoteArgs
) -> dict[str, Any]:
    contact = await find_contact(connection, ctx, args.contact_id, for_update=True)
    return {
        "action": "Add a note to a contact",
        "contact": contact_ref(contact),
        "note": {"body": args.body, "author": ctx.member.name},
    }


async def add_contact_note(ctx: ToolContext, args: AddContactNoteArgs) -> dict[str, Any]:
    async with ctx.engine.begin() as connection:
        plan = await _plan_note(connection, ctx, args)
        note_id, now = uuid.uuid4(), utcnow()
        await connection.execute(
            sa.insert(_note).values(
                id=note_id,
                organization_id=ctx.organization_id,
                contact_id=args.contact_id,
                author_id=ctx.member.id,
                body=args.body,
                created_at=now,
            )
        )
        await _touch(connection, ctx, args.contact_id)
    return {"note_id": str(note_id), "contact": plan["contact"], "created_at": local_time(ctx, now)}


# -- manage_contact_tags ------------------------------------------------------------------------


async def _plan_tags(
    connection: AsyncConnection, ctx: ToolContext, args: ManageContactTagsArgs
) -> dict[str, Any]:
    contact = await find_contact(connection, ctx, args.contact_id, for_update=True)
    current = (await _tags_of(connection, ctx, [contact.id]))[contact.id]
    add = [tag for tag in dict.fromkeys(args.add) if tag not in current]
    remove = [tag for tag in dict.fromkeys(args.remove) if tag in current]
    if not add and not remove:
        raise ToolFailure(
            "no_change",
            f"{_name(contact)} already has exactly these tags ({', '.join(current) or 'none'}); "
            "nothing to change.",
        )
    preview: dict[str, Any] = {
        "action": "Change a contact's tags",
        "contact": contact_ref(contact),
        "add": add,
        "remove": remove,
        "result": sorted((set(current) - set(remove)) | set(add)),
    }
    if new := sorted(set(add) - await _existing_tags(connection, ctx, add)):
        preview["new_tags"] = new
    if already := [tag for tag in args.add if tag in current]:
        preview["already_tagged"] = already
    if absent := [tag for tag in args.remove if tag not in current]:
        preview["not_tagged"] = absent
    return preview


async def manage_contact_tags(ctx: ToolContext, args: ManageContactTagsArgs) -> dict[str, Any]:
    async with ctx.engine.begin() as connection:
        plan = await _plan_tags(connection, ctx, args)
        ids = await _ensure_tags(connection, ctx, plan["add"] + plan["remove"])
        if plan["remove"]:
            await connection.execute(
                sa.delete(_contact_tag).where(
                    _contact_tag.c.organization_id == ctx.organization_id,
                    _contact_tag.c.contact_id == args.contact_id,
                    _contact_tag.c.tag_id.in_([ids[name] for name in plan["remove"]]),
                )
            )
        if plan["add"]:
            await connection.execute(
                sa.insert(_contact_tag),
                [
                    {
                        "organization_id": ctx.organization_id,
                        "contact_id": args.contact_id,
                        "tag_id": ids[name],
                    }
                    for name in plan["add"]
                ],
            )
        await _touch(connection, ctx, args.contact_id)
        tags = (await _tags_of(connection, ctx, [args.contact_id]))[args.contact_id]
    return {"contact": plan["contact"], "added": plan["add"], "removed": plan["remove"], "tags": tags}


# -- manage_contact_emails / manage_contact_phones -----------------------------------------------


def _primary_change(
    contact: Any, result: list[dict[str, Any]], key: str, wanted: str | None, what: str
) -> dict[str, Any] | None:
    """Mark the primary entry of `result` (the `wanted` one, else the current one, else the first)
    and return {from, to} if that differs from before."""
    before = next((entry[key] for entry in result if entry["primary"]), None)
    kept = [entry for entry in result if entry.get("kept", True)]
    if wanted is not None and not any(entry[key] == wanted for entry in kept):
        raise ToolFailure(
            "not_found",
            f"{wanted} is not among {_name(contact)}'s {what} after this change, "
            "so it cannot be the primary one.",
            hint="Make an existing or an added one the primary one.",
        )
    after = wanted
    if after is None:
        after = next((entry[key] for entry in kept if entry["primary"]), None)
    if after is None and kept:
        after = kept[0][key]
    for entry in result:
        entry["primary"] = entry[key] == after
    return {"from": before, "to": after} if before != after else None


async def _plan_emails(
    connection: AsyncConnection, ctx: ToolContext, args: ManageContactEmailsArgs
) -> dict[str, Any]:
    contact = await find_contact(connection, ctx, args.contact_id, for_update=True)
    current = await _emails(connection, ctx, contact.id)
    have = {entry["email"] for entry in current}
    _once([entry.email for entry in args.add], "an address to add")
    if clash := [entry.email for entry in args.add if entry.email in args.remove]:
        raise ToolFailure("invalid_arguments", f"{clash[0]} is both added and removed.")
    if missing := [email for email in args.remove if email not in have]:
        raise ToolFailure(
            "not_found",
            f"{_name(contact)} has no address {', '.join(missing)}; "
            f"their addresses: {', '.join(sorted(have)) or 'none'}.",
        )
    add = [entry for entry in args.add if entry.email not in have]
    await _owners_of_emails(connection, ctx, [entry.email for entry in add], contact.id)
    remove = list(dict.fromkeys(args.remove))
    result = [entry | {"kept": entry["email"] not in remove} for entry in current]
    result += [{"email": entry.email, "label": entry.label, "primary": False} for entry in add]
    primary = _primary_change(contact, result, "email", args.primary, "e-mail addresses")
    result = [{k: v for k, v in entry.items() if k != "kept"} for entry in result if entry.get("kept", True)]
    if len(result) > MAX_EMAILS:
        raise ToolFailure("too_many", f"A contact can have at most {MAX_EMAILS} e-mail addresses.")
    if not add and not remove and primary is None:
        raise ToolFailure(
            "no_change", f"{_name(contact)}'s addresses already are like that; nothing to change."
        )
    preview: dict[str, Any] = {
        "action": "Change a contact's e-mail addresses",
        "contact": contact_ref(contact),
        "add": [{"email": entry.email, "label": entry.label} for entry in add],
        "remove": remove,
        "result": result,
    }
    if primary is not None:
        preview["primary"] = primary
    if already := [entry.email for entry in args.add if entry.email in have]:
        preview["already_present"] = already
    return preview


async def manage_contact_emails(ctx: ToolContext, args: ManageContactEmailsArgs) -> dict[str, Any]:
    async with ctx.engine.begin() as connection:
        plan = await _plan_emails(connection, ctx, args)
        await _apply_entries(connection, ctx, _email, "email", plan, plan["remove"], plan["add"])
        emails = await _emails(connection, ctx, args.contact_id)
    return {"contact": plan["contact"], "emails": emails}


async def _plan_phones(
    connection: AsyncConnection, ctx: ToolContext, args: ManageContactPhonesArgs
) -> dict[str, Any]:
    contact = await find_contact(connection, ctx, args.contact_id, for_update=True)
    current = await _phones(connection, ctx, contact.id)
    have = {entry["e164"]: entry for entry in current}
    typed = [entry.number for entry in args.add] + args.remove + ([args.primary] if args.primary else [])
    read = await _read_phones(connection, ctx, typed)
    _once([read[entry.number] for entry in args.add], "a number to add")
    if clash := [entry.number for entry in args.add if read[entry.number] in {read[n] for n in args.remove}]:
        raise ToolFailure("invalid_arguments", f"{clash[0]} is both added and removed.")
    if missing := [number for number in args.remove if read[number] not in have]:
        raise ToolFailure(
            "not_found",
            f"{_name(contact)} has no number {', '.join(missing)}; their numbers: "
            f"{', '.join(entry['number'] for entry in current) or 'none'}.",
        )
    remove = list(dict.fromkeys(read[number] for number in args.remove))
    add = [entry for entry in args.add if read[entry.number] not in have]
    result = [entry | {"kept": entry["e164"] not in remove} for entry in current]
    result += [
        {"number": entry.number, "e164": read[entry.number], "label": entry.label, "primary": False}
        for entry in add
    ]
    wanted = read[args.primary] if args.primary else None
    primary = _primary_change(contact, result, "e164", wanted, "phone numbers")
    result = [{k: v for k, v in entry.items() if k != "kept"} for entry in result if entry.get("kept", True)]
    if len(result) > MAX_PHONES:
        raise ToolFailure("too_many", f"A contact can have at most {MAX_PHONES} phone numbers.")
    if not add and not remove and primary is None:
        raise ToolFailure(
            "no_change", f"{_name(contact)}'s numbers already are like that; nothing to change."
        )
    preview: dict[str, Any] = {
        "action": "Change a contact's phone numbers",
        "contact": contact_ref(contact),
        "add": [{"number": entry.number, "e164": read[entry.number], "label": entry.label} for entry in add],
        "remove": [{"number": have[e164]["number"], "e164": e164} for e164 in remove],
        "result": result,
    }
    if primary is not None:
        preview["primary"] = primary
    if already := [entry.number for entry in args.add if read[entry.number] in have]:
        preview["already_present"] = already
    if warnings := await _phone_warnings(connection, ctx, [read[entry.number] for entry in add], contact.id):
        preview["warnings"] = warnings
    return preview


async def manage_contact_phones(ctx: ToolContext, args: ManageContactPhonesArgs) -> dict[str, Any]:
    async with ctx.engine.begin() as connection:
        plan = await _plan_phones(connection, ctx, args)
        added = [{"number": p["number"], "number_e164": p["e164"], "label": p["label"]} for p in plan["add"]]
        removed = [entry["e164"] for entry in plan["remove"]]
        await _apply_entries(connection, ctx, _phone, "number_e164", plan, removed, added)
        phones = await _phones(connection, ctx, args.contact_id)
    return {"contact": plan["contact"], "phones": phones}


async def _apply_entries(
    connection: AsyncConnection,
    ctx: ToolContext,
    table: sa.Table,
    key: str,
    plan: dict[str, Any],
    remove: list[str],
    added: list[dict[str, Any]],
) -> None:
    """Apply a planned change of e-mail addresses or phone numbers (`key`: the column they are
    known by, `remove` its values); the primary is cleared before the new one is set (at most one
    primary per contact)."""
    contact_id = uuid.UUID(plan["contact"]["id"])
    mine = sa.and_(table.c.organization_id == ctx.organization_id, table.c.contact_id == contact_id)
    result_key = "email" if key == "email" else "e164"
    primary = next((entry[result_key] for entry in plan["result"] if entry["primary"]), None)
    if remove:
        await connection.execute(sa.delete(table).where(mine, table.c[key].in_(remove)))
    await connection.execute(sa.update(table).where(mine, table.c.is_primary).values(is_primary=False))
    if added:
        now = utcnow()
        await connection.execute(
            sa.insert(table),
            [
                entry
                | {
                    "id": uuid.uuid4(),
                    "organization_id": ctx.organization_id,
                    "contact_id": contact_id,
                    "is_primary": False,
                    "created_at": now,
                }
                for entry in added
            ],
        )
    if primary is not None:
        await connection.execute(
            sa.update(table).where(mine, table.c[key] == primary).values(is_primary=True)
        )
    await _touch(connection, ctx, contact_id)


TOOLS = (
    Tool(
        "search_contacts",
        CATEGORY,
        "Find contacts by part of a name, company, e-mail address or phone number (any format), "
        "optionally with a tag; paginated.",
        SearchContactsArgs,
        "contact:list",
        False,
        search_contacts,
    ),
    Tool(
        "get_contact_details",
        CATEGORY,
        "One contact in full: e-mail addresses, phone numbers, tags, latest notes and activity counts.",
        ContactIdArgs,
        "contact:view",
        False,
        get_contact_details,
    ),
    Tool(
        "create_contact",
        CATEGORY,
        "Create a contact with optional e-mail addresses, phone numbers, tags and a first note.",
        CreateContactArgs,
        "contact:create",
        True,
        create_contact,
        preview=_previewing(_plan_create),
    ),
    Tool(
        "update_contact",
        CATEGORY,
        "Change a contact's first name, last name or company.",
        UpdateContactArgs,
        "contact:update",
        True,
        update_contact,
        preview=_previewing(_plan_update),
    ),
    Tool(
        "add_contact_note",
        CATEGORY,
        "Add a note to a contact, written by the user.",
        AddContactNoteArgs,
        "contact:update",
        True,
        add_contact_note,
        preview=_previewing(_plan_note),
    ),
    Tool(
        "manage_contact_tags",
        CATEGORY,
        "Add tags to and remove tags from a contact (new tag names are created).",
        ManageContactTagsArgs,
        "contact:update",
        True,
        manage_contact_tags,
        preview=_previewing(_plan_tags),
    ),
    Tool(
        "manage_contact_emails",
        CATEGORY,
        "Add or remove a contact's e-mail addresses, or choose the primary one.",
        ManageContactEmailsArgs,
        "contact:update",
        True,
        manage_contact_emails,
        preview=_previewing(_plan_emails),
    ),
    Tool(
        "manage_contact_phones",
        CATEGORY,
        "Add or remove a contact's phone numbers (any format), or choose the primary one.",
        ManageContactPhonesArgs,
        "contact:update",
        True,
        manage_contact_phones,
        preview=_previewing(_plan_phones),
    ),
)
