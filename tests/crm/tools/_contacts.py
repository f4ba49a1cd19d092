"""What the contacts tests share: the demo members and contacts they use, and reading a contact's rows."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from tests.crm.tools.conftest import Tools, data, rows
from vernis.store.models import AuditEntry, table_of
from vernis_crm.models import Contact, ContactEmail, ContactPhone, ContactTag, Tag

MEMBER = "member@acme.test"
VIEWER = "viewer@acme.test"
GLOBEX = "owner@globex.test"
JANE = "acme:contact:Jane Cooper"
GLOBEX_JANE = "globex:contact:Jane Cooper"

_contact = table_of(Contact)
_email = table_of(ContactEmail)
_phone = table_of(ContactPhone)
_tag = table_of(Tag)
_contact_tag = table_of(ContactTag)
_audit = table_of(AuditEntry)


async def contact_row(tools: Tools, contact_id: uuid.UUID) -> Any:
    (row,) = await rows(tools, sa.select(_contact).where(_contact.c.id == contact_id))
    return row


async def emails(tools: Tools, contact_id: uuid.UUID) -> set[tuple[str, str, bool]]:
    found = await rows(
        tools,
        sa.select(_email.c.email, _email.c.label, _email.c.is_primary).where(
            _email.c.contact_id == contact_id
        ),
    )
    return {tuple(row) for row in found}


async def phones(tools: Tools, contact_id: uuid.UUID) -> set[tuple[str, str, str, bool]]:
    found = await rows(
        tools,
        sa.select(_phone.c.number, _phone.c.number_e164, _phone.c.label, _phone.c.is_primary).where(
            _phone.c.contact_id == contact_id
        ),
    )
    return {tuple(row) for row in found}


async def tags(tools: Tools, contact_id: uuid.UUID) -> list[str]:
    found = await rows(
        tools,
        sa.select(_tag.c.name)
        .join(_contact_tag, _contact_tag.c.tag_id == _tag.c.id)
        .where(_contact_tag.c.contact_id == contact_id)
        .order_by(_tag.c.name),
    )
    return [row.name for row in found]


async def previewed(tools: Tools, name: str, arguments: dict[str, Any], email: str = MEMBER) -> Any:
    """The preview of a write, as the user is shown it (nothing approved)."""
    outcome = await tools.call(email, name, arguments)
    assert outcome.status == "needs_confirmation", outcome.envelope
    return outcome.preview


async def approved(
    tools: Tools, name: str, arguments: dict[str, Any], preview: Any, email: str = MEMBER
) -> Any:
    """Preview again, approve and run; the preview must be the one shown before, the write must leave
    its audit row. Returns the write's data."""
    shown, envelope = await tools.write(email, name, arguments)
    assert shown.preview == preview
    assert envelope["ok"], envelope
    member = await tools.member(email)
    (audit,) = await rows(tools, sa.select(_audit).where(_audit.c.approval_id == shown.confirmation_id))
    assert (audit.tool_name, audit.outcome, audit.member_id) == (name, "ok", member.id)
    return envelope["data"]


async def search(tools: Tools, query: str, email: str = MEMBER, **more: Any) -> Any:
    return data(await tools.call(email, "search_contacts", {"query": query, **more}))
