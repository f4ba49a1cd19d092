"""What the Contacts tools share: the tables, phone and e-mail reading, argument types, lookups
scoped to the caller's organization, and the plan-then-apply machinery of their writes.

A phone number typed without a country code is read in the country of the organization's own
(oldest) phone line. Each write plans its change first: the preview is that plan, and the approved
run plans again in the transaction that applies it, so what was approved is what is written.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.store.engine import dialect_insert
from vernis.store.models import Member, table_of, utcnow
from vernis.tools import ToolFailure
from vernis_crm.models import (
    Call,
    Contact,
    ContactEmail,
    ContactNote,
    ContactPhone,
    ContactTag,
    PhoneNumber,
    Plan,
    SmsMessage,
    Tag,
    Task,
    to_e164,
)
from vernis_crm.resources import CrmContext

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


class ContactIdArgs(_Args):
    contact_id: uuid.UUID = Field(description="The contact's id, as search_contacts returned it.")


class EmailInput(_Args):
    email: EmailAddress = Field(description="The e-mail address.")
    label: Literal["personal", "work", "other"] = Field("personal", description="Kind of address.")


class PhoneInput(_Args):
    number: PhoneText = Field(description="The phone number, in any format.")
    label: Literal["mobile", "home", "work", "other"] = Field("mobile", description="Kind of number.")


def _name(row: Any) -> str:
    return f"{row.first_name} {row.last_name}".strip()


def contact_ref(row: Any) -> dict[str, Any]:
    """How a contact is named in results and previews."""
    return {"id": str(row.id), "name": _name(row)}


def local_time(ctx: CrmContext, value: datetime | None) -> str | None:
    """`value` in the organization's time zone (ISO 8601 with the offset), as results show times."""
    if value is None:
        return None
    try:
        zone = ZoneInfo(ctx.member.organization_timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    return value.astimezone(zone).isoformat(timespec="minutes")


async def find_contact(
    connection: AsyncConnection, ctx: CrmContext, contact_id: uuid.UUID, *, for_update: bool = False
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


async def _tags_of(
    connection: AsyncConnection, ctx: CrmContext, ids: Sequence[uuid.UUID]
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
    connection: AsyncConnection, ctx: CrmContext, table: sa.Table, column: str, ids: Sequence[uuid.UUID]
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


async def _emails(
    connection: AsyncConnection, ctx: CrmContext, contact_id: uuid.UUID
) -> list[dict[str, Any]]:
    rows = await connection.execute(
        sa.select(_email)
        .where(_email.c.organization_id == ctx.organization_id, _email.c.contact_id == contact_id)
        .order_by(_email.c.is_primary.desc(), _email.c.created_at, _email.c.email)
    )
    return [{"email": row.email, "label": row.label, "primary": row.is_primary} for row in rows]


async def _phones(
    connection: AsyncConnection, ctx: CrmContext, contact_id: uuid.UUID
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


async def _owners_of_emails(
    connection: AsyncConnection, ctx: CrmContext, emails: Iterable[str], other_than: uuid.UUID | None
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
    connection: AsyncConnection, ctx: CrmContext, numbers: Iterable[str], other_than: uuid.UUID | None
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
    connection: AsyncConnection, ctx: CrmContext, numbers: Iterable[str]
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


async def _ensure_tags(connection: AsyncConnection, ctx: CrmContext, names: Sequence[str]) -> dict[str, Any]:
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


async def _existing_tags(connection: AsyncConnection, ctx: CrmContext, names: Iterable[str]) -> set[str]:
    names = list(names)
    if not names:
        return set()
    rows = await connection.scalars(
        sa.select(_tag.c.name).where(_tag.c.organization_id == ctx.organization_id, _tag.c.name.in_(names))
    )
    return set(rows)


async def _touch(connection: AsyncConnection, ctx: CrmContext, contact_id: uuid.UUID) -> None:
    await connection.execute(
        sa.update(_contact)
        .where(_contact.c.organization_id == ctx.organization_id, _contact.c.id == contact_id)
        .values(updated_at=utcnow())
    )


Planner = Callable[[AsyncConnection, CrmContext, Any], Awaitable[dict[str, Any]]]


def _previewing(plan: Planner) -> Callable[[CrmContext, Any], Awaitable[dict[str, Any]]]:
    """A write's preview: its plan, made in a transaction that is rolled back (it changes nothing)."""

    async def preview(ctx: CrmContext, args: Any) -> dict[str, Any]:
        async with ctx.resources.connect() as connection:
            return await plan(connection, ctx, args)

    return preview


# -- create_contact -----------------------------------------------------------------------------
