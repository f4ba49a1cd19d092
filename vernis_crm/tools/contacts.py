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
from datetime import timedelta
from typing import Annotated, Any

import sqlalchemy as sa
from pydantic import Field, StringConstraints
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.store.models import utcnow
from vernis.tools import Shown, Tool, ToolFailure, entity, table
from vernis_crm.models import (
    PlanStatus,
    TaskStatus,
    to_e164,
)
from vernis_crm.resources import CrmContext
from vernis_crm.tools._contacts_common import (
    CATEGORY,
    LATEST_NOTES,
    NOTE_EXCERPT,
    RECENT_DAYS,
    ContactIdArgs,
    EmailInput,
    PhoneInput,
    TagName,
    Text,
    _Args,
    _call,
    _contact,
    _contact_tag,
    _email,
    _emails,
    _ensure_tags,
    _existing_tags,
    _first_of,
    _lower,
    _member,
    _name,
    _note,
    _once,
    _owners_of_emails,
    _phone,
    _phone_warnings,
    _phones,
    _plan,
    _previewing,
    _read_phones,
    _sms,
    _tag,
    _tags_of,
    _task,
    _touch,
    contact_ref,
    find_contact,
    local_time,
)

__all__ = ["TOOLS"]


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


_PHONE_QUERY = re.compile(r"^[\d\s().+\-/]+$")


def _matches(ctx: CrmContext, query: str) -> tuple[sa.ColumnElement[bool], list[sa.ColumnElement[int]]]:
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


async def search_contacts(ctx: CrmContext, args: SearchContactsArgs) -> Shown:
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
    async with ctx.resources.connect() as connection:
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
    shown = table(
        [("name", "Name"), ("company", "Company"), ("email", "E-mail"), ("phone", "Phone")],
        (
            {key: contact[key] for key in ("name", "company", "email", "phone")}
            for contact in result["contacts"]
        ),
        total=total,
    )
    return Shown(result, ui=[shown])


def _about(ctx: CrmContext, table: sa.Table, contact_id: uuid.UUID, what: Any, *where: Any) -> Any:
    """`what` (an aggregate) over the contact's rows of `table`, as a scalar subquery."""
    return (
        sa.select(what)
        .where(table.c.organization_id == ctx.organization_id, table.c.contact_id == contact_id, *where)
        .scalar_subquery()
    )


async def _activity(connection: AsyncConnection, ctx: CrmContext, contact_id: uuid.UUID) -> dict[str, Any]:
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


def _excerpt(text: str, limit: int = NOTE_EXCERPT) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


async def get_contact_details(ctx: CrmContext, args: ContactIdArgs) -> Shown:
    async with ctx.resources.connect() as connection:
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
        details = contact_ref(contact) | {
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
    card = entity(
        "contact",
        details["id"],
        details["name"],
        [
            ("Company", details["company"]),
            ("E-mail", ", ".join(e["email"] for e in details["emails"]) if details["emails"] else None),
            ("Phone", ", ".join(p["number"] for p in details["phones"]) if details["phones"] else None),
            ("Tags", ", ".join(details["tags"]) or None),
            ("Open tasks", details["activity"]["open_tasks"]),
            ("Last call", details["activity"]["last_call_at"]),
        ],
        url=f"/contacts/{details['id']}",
    )
    return Shown(details, ui=[card])


# -- shared checks of the writes ----------------------------------------------------------------


async def _plan_create(
    connection: AsyncConnection, ctx: CrmContext, args: CreateContactArgs
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


async def create_contact(ctx: CrmContext, args: CreateContactArgs) -> Shown:
    async with ctx.resources.begin() as connection:
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
    name = f"{plan['first_name']} {plan['last_name']}".strip()
    return Shown({"id": str(contact_id), "name": name, "created": True}, summary=f"Created contact {name}")


# -- update_contact -----------------------------------------------------------------------------


async def _plan_update(
    connection: AsyncConnection, ctx: CrmContext, args: UpdateContactArgs
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


async def update_contact(ctx: CrmContext, args: UpdateContactArgs) -> dict[str, Any]:
    async with ctx.resources.begin() as connection:
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
    connection: AsyncConnection, ctx: CrmContext, args: AddContactNoteArgs
) -> dict[str, Any]:
    contact = await find_contact(connection, ctx, args.contact_id, for_update=True)
    return {
        "action": "Add a note to a contact",
        "contact": contact_ref(contact),
        "note": {"body": args.body, "author": ctx.member.name},
    }


async def add_contact_note(ctx: CrmContext, args: AddContactNoteArgs) -> dict[str, Any]:
    async with ctx.resources.begin() as connection:
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
)
