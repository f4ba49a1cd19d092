"""Contacts tools that manage a contact's lists: its tags, its e-mail addresses, its phone numbers.

Each takes what to add and what to remove (and which entry is primary), previews the resulting list
exactly, and applies that plan once approved (see `_contacts_common`).
"""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from pydantic import Field, model_validator
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.store.models import utcnow
from vernis.tools import Tool, ToolFailure
from vernis_crm.resources import CrmContext
from vernis_crm.tools._contacts_common import (
    CATEGORY,
    MAX_EMAILS,
    MAX_PHONES,
    ContactIdArgs,
    EmailAddress,
    EmailInput,
    PhoneInput,
    PhoneText,
    TagName,
    _contact_tag,
    _email,
    _emails,
    _ensure_tags,
    _existing_tags,
    _name,
    _once,
    _owners_of_emails,
    _phone,
    _phone_warnings,
    _phones,
    _previewing,
    _read_phones,
    _tags_of,
    _touch,
    contact_ref,
    find_contact,
)

__all__ = ["TOOLS"]


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


async def _plan_tags(
    connection: AsyncConnection, ctx: CrmContext, args: ManageContactTagsArgs
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


async def manage_contact_tags(ctx: CrmContext, args: ManageContactTagsArgs) -> dict[str, Any]:
    async with ctx.resources.begin() as connection:
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
    connection: AsyncConnection, ctx: CrmContext, args: ManageContactEmailsArgs
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


async def manage_contact_emails(ctx: CrmContext, args: ManageContactEmailsArgs) -> dict[str, Any]:
    async with ctx.resources.begin() as connection:
        plan = await _plan_emails(connection, ctx, args)
        await _apply_entries(connection, ctx, _email, "email", plan, plan["remove"], plan["add"])
        emails = await _emails(connection, ctx, args.contact_id)
    return {"contact": plan["contact"], "emails": emails}


async def _plan_phones(
    connection: AsyncConnection, ctx: CrmContext, args: ManageContactPhonesArgs
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


async def manage_contact_phones(ctx: CrmContext, args: ManageContactPhonesArgs) -> dict[str, Any]:
    async with ctx.resources.begin() as connection:
        plan = await _plan_phones(connection, ctx, args)
        added = [{"number": p["number"], "number_e164": p["e164"], "label": p["label"]} for p in plan["add"]]
        removed = [entry["e164"] for entry in plan["remove"]]
        await _apply_entries(connection, ctx, _phone, "number_e164", plan, removed, added)
        phones = await _phones(connection, ctx, args.contact_id)
    return {"contact": plan["contact"], "phones": phones}


async def _apply_entries(
    connection: AsyncConnection,
    ctx: CrmContext,
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
