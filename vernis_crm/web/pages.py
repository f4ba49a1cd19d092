"""The demo host app: a small CRM (contacts, a contact's page, calls) with the assistant on every page.

It stands for the product Vernis is embedded in. Every read is scoped to the signed-in member's
organization. A contact's page sets `data-entity-type="contact"` and `data-entity-id` on `<body>`,
so "summarize this contact" in the assistant needs no name.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from starlette.requests import Request
from starlette.responses import Response

from vernis.identity import MemberInfo
from vernis.runtime import Services
from vernis.store.models import table_of
from vernis_crm.models import (
    Call,
    Contact,
    ContactEmail,
    ContactNote,
    ContactPhone,
    ContactTag,
    SmsMessage,
    Tag,
)
from vernis_crm.web._html import Entity, Markup, e, page
from vernis_crm.web.login import current_member, redirect_to_login

__all__ = ["calls", "contact", "contacts"]

PAGE_SIZE = 50
RECENT = 10

_contact = table_of(Contact)
_email = table_of(ContactEmail)
_phone = table_of(ContactPhone)
_tag = table_of(Tag)
_contact_tag = table_of(ContactTag)
_note = table_of(ContactNote)
_call = table_of(Call)
_sms = table_of(SmsMessage)


def _name(first: str | None, last: str | None) -> str:
    return " ".join(part for part in (first, last) if part) or "Unnamed contact"


def _zone(member: MemberInfo) -> ZoneInfo:
    try:
        return ZoneInfo(member.organization_timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def _when(value: datetime | None, zone: ZoneInfo) -> Markup:
    if value is None:
        return Markup("—")
    if value.tzinfo is None:
        value = value.replace(tzinfo=ZoneInfo("UTC"))
    local = value.astimezone(zone)
    return Markup(f'<time datetime="{e(value.isoformat())}">{e(local.strftime("%b %d, %Y · %H:%M"))}</time>')


def _duration(seconds: int | None) -> str:
    if not seconds:
        return "—"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


def _badge(value: str | None) -> Markup:
    return Markup(f'<span class="badge badge-{e(value)}">{e(value)}</span>') if value else Markup("")


def _primary(table: sa.Table, column: str) -> Any:
    # The contact's primary value (or any one when none is marked primary).
    return (
        sa.select(table.c[column])
        .where(table.c.contact_id == _contact.c.id)
        .order_by(table.c.is_primary.desc(), table.c.created_at)
        .limit(1)
        .scalar_subquery()
    )


async def contacts(request: Request) -> Response:
    """GET /contacts: the organization's contacts, searchable, 50 a page."""
    member = await current_member(request)
    if member is None:
        return redirect_to_login(request)
    services: Services = request.state.services
    search = request.query_params.get("q", "").strip()[:100]
    try:
        page_number = max(1, int(request.query_params.get("page", "1")))
    except ValueError:
        page_number = 1
    where = [_contact.c.organization_id == member.organization_id]
    if search:
        like = f"%{search.lower()}%"
        emails = sa.select(_email.c.contact_id).where(
            _email.c.organization_id == member.organization_id, _email.c.email.like(like)
        )
        where.append(
            sa.or_(
                sa.func.lower(_contact.c.first_name + " " + _contact.c.last_name).like(like),
                sa.func.lower(sa.func.coalesce(_contact.c.company, "")).like(like),
                _contact.c.id.in_(emails),
            )
        )
    query = (
        sa.select(
            _contact.c.id,
            _contact.c.first_name,
            _contact.c.last_name,
            _contact.c.company,
            _primary(_email, "email").label("email"),
            _primary(_phone, "number").label("phone"),
        )
        .where(*where)
        .order_by(_contact.c.last_name, _contact.c.first_name, _contact.c.id)
        .limit(PAGE_SIZE + 1)
        .offset((page_number - 1) * PAGE_SIZE)
    )
    async with services.engine.connect() as connection:
        total = await connection.scalar(sa.select(sa.func.count()).select_from(_contact).where(*where))
        rows = (await connection.execute(query)).all()
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    body = "".join(
        f"""<tr>
  <td><a href="/contacts/{e(row.id)}">{e(_name(row.first_name, row.last_name))}</a></td>
  <td>{e(row.company or "—")}</td>
  <td>{e(row.email or "—")}</td>
  <td class="nowrap">{e(row.phone or "—")}</td>
</tr>"""
        for row in rows
    )
    if not rows:
        body = '<tr><td colspan="4" class="empty-row">No contacts match.</td></tr>'
    pager = _pager("/contacts", search, page_number, more)
    content = Markup(f"""<div class="page-head">
  <div><h1>Contacts</h1>
    <p class="muted">{e(total)} contact{"" if total == 1 else "s"} in {e(member.organization_name)}</p></div>
  <form class="search" role="search" method="get" action="/contacts">
    <label class="sr-only" for="q">Search contacts</label>
    <input id="q" name="q" type="search" value="{e(search)}" placeholder="Search by name, company or e-mail">
    <button class="button" type="submit">Search</button>
  </form>
</div>
<div class="card table-card">
<table class="table">
  <thead><tr><th scope="col">Name</th><th scope="col">Company</th>
    <th scope="col">E-mail</th><th scope="col">Phone</th></tr></thead>
  <tbody>{body}</tbody>
</table>
</div>
{pager}""")
    return page("Contacts", content, member=member, active="contacts")


def _pager(path: str, search: str, page_number: int, more: bool) -> str:
    def link(number: int) -> str:
        query = {"page": str(number)}
        if search:
            query["q"] = search
        return f"{path}?{urlencode(query)}"

    parts = []
    if page_number > 1:
        parts.append(f'<a class="button" href="{e(link(page_number - 1))}" rel="prev">Previous</a>')
    if more:
        parts.append(f'<a class="button" href="{e(link(page_number + 1))}" rel="next">Next</a>')
    if not parts:
        return ""
    return f'<nav class="pager" aria-label="Pages">{"".join(parts)}</nav>'


async def contact(request: Request) -> Response:
    """GET /contacts/{id}: one contact, with the assistant's page context set to it."""
    member = await current_member(request)
    if member is None:
        return redirect_to_login(request)
    services: Services = request.state.services
    try:
        contact_id = uuid.UUID(request.path_params["contact_id"])
    except ValueError:
        return _not_found(member)
    org = member.organization_id
    async with services.engine.connect() as connection:
        row = (
            await connection.execute(
                sa.select(_contact).where(_contact.c.id == contact_id, _contact.c.organization_id == org)
            )
        ).first()
        if row is None:
            return _not_found(member)
        emails = (
            await connection.execute(
                sa.select(_email.c.email, _email.c.label, _email.c.is_primary)
                .where(_email.c.contact_id == contact_id, _email.c.organization_id == org)
                .order_by(_email.c.is_primary.desc(), _email.c.created_at)
            )
        ).all()
        phones = (
            await connection.execute(
                sa.select(_phone.c.number, _phone.c.label, _phone.c.is_primary)
                .where(_phone.c.contact_id == contact_id, _phone.c.organization_id == org)
                .order_by(_phone.c.is_primary.desc(), _phone.c.created_at)
            )
        ).all()
        tags = (
            await connection.scalars(
                sa.select(_tag.c.name)
                .join(_contact_tag, _contact_tag.c.tag_id == _tag.c.id)
                .where(_contact_tag.c.contact_id == contact_id, _contact_tag.c.organization_id == org)
                .order_by(_tag.c.name)
            )
        ).all()
        notes = (
            await connection.execute(
                sa.select(_note.c.body, _note.c.created_at)
                .where(_note.c.contact_id == contact_id, _note.c.organization_id == org)
                .order_by(_note.c.created_at.desc())
                .limit(RECENT)
            )
        ).all()
        recent_calls = (
            await connection.execute(
                sa.select(
                    _call.c.direction,
                    _call.c.status,
                    _call.c.duration_seconds,
                    _call.c.started_at,
                    _call.c.summary,
                )
                .where(_call.c.contact_id == contact_id, _call.c.organization_id == org)
                .order_by(_call.c.started_at.desc())
                .limit(RECENT)
            )
        ).all()
        messages = (
            await connection.execute(
                sa.select(_sms.c.direction, _sms.c.body, _sms.c.status, _sms.c.created_at)
                .where(_sms.c.contact_id == contact_id, _sms.c.organization_id == org)
                .order_by(_sms.c.created_at.desc())
                .limit(RECENT)
            )
        ).all()

    zone = _zone(member)
    name = _name(row.first_name, row.last_name)
    email_items = _items([_address(item.email, item.label, item.is_primary) for item in emails], "None")
    phone_items = _items([_address(item.number, item.label, item.is_primary) for item in phones], "None")
    tag_items = "".join(f'<li class="tag">{e(tag)}</li>' for tag in tags) or "<li class='muted'>No tags</li>"
    note_items = _items(
        [f"<p>{e(note.body)}</p><p class='muted small'>{_when(note.created_at, zone)}</p>" for note in notes],
        "No notes yet.",
    )
    call_items = _items([_call_item(call, zone) for call in recent_calls], "No calls yet.")
    message_items = _items([_message_item(message, zone) for message in messages], "No messages yet.")
    initials = f"{(row.first_name or '?')[:1]}{(row.last_name or '')[:1]}"
    content = Markup(f"""<nav class="breadcrumbs" aria-label="Breadcrumb">
  <a href="/contacts">Contacts</a> <span aria-hidden="true">/</span>
  <span aria-current="page">{e(name)}</span>
</nav>
<div class="page-head">
  <div class="contact-head">
    <span class="avatar" aria-hidden="true">{e(initials)}</span>
    <div><h1>{e(name)}</h1><p class="muted">{e(row.company or "No company")}</p></div>
  </div>
</div>
<div class="grid">
  <section class="card" aria-labelledby="details-title">
    <h2 id="details-title">Details</h2>
    <h3>E-mail</h3><ul class="plain">{email_items}</ul>
    <h3>Phone</h3><ul class="plain">{phone_items}</ul>
    <h3>Tags</h3><ul class="tags">{tag_items}</ul>
    <p class="muted small">Added {_when(row.created_at, zone)}</p>
  </section>
  <section class="card" aria-labelledby="notes-title">
    <h2 id="notes-title">Notes</h2><ul class="plain list">{note_items}</ul>
  </section>
  <section class="card" aria-labelledby="calls-title">
    <h2 id="calls-title">Recent calls</h2><ul class="plain list">{call_items}</ul>
  </section>
  <section class="card" aria-labelledby="sms-title">
    <h2 id="sms-title">Messages</h2><ul class="plain list">{message_items}</ul>
  </section>
</div>""")
    return page(name, content, member=member, active="contacts", entity=Entity("contact", str(contact_id)))


def _items(items: list[str], empty: str) -> str:
    if not items:
        return f"<li class='muted'>{e(empty)}</li>"
    return "".join(f"<li>{item}</li>" for item in items)


def _address(value: str, label: str, primary: bool) -> str:
    note = f"{label} · primary" if primary else label
    return f"{e(value)} <span class='muted'>{e(note)}</span>"


def _call_item(call: Any, zone: ZoneInfo) -> str:
    when = f"{_when(call.started_at, zone)} · {e(_duration(call.duration_seconds))}"
    summary = f"<p>{e(call.summary)}</p>" if call.summary else ""
    head = f"{_badge(call.direction)} {_badge(call.status)} <span class='muted small'>{when}</span>"
    return f'<div class="row-head">{head}</div>{summary}'


def _message_item(message: Any, zone: ZoneInfo) -> str:
    meta = f"{e(message.direction)} · {e(message.status)} · {_when(message.created_at, zone)}"
    return f"<p>{e(message.body)}</p><p class='muted small'>{meta}</p>"


def _not_found(member: MemberInfo) -> Response:
    content = Markup(
        '<div class="card"><h1>Not found</h1><p>There is no such contact in your organization.</p>'
        '<p><a href="/contacts">Back to contacts</a></p></div>'
    )
    return page("Not found", content, member=member, active="contacts", status_code=404)


async def calls(request: Request) -> Response:
    """GET /calls: the organization's latest calls."""
    member = await current_member(request)
    if member is None:
        return redirect_to_login(request)
    services: Services = request.state.services
    query = (
        sa.select(
            _call.c.id,
            _call.c.contact_id,
            _contact.c.first_name,
            _contact.c.last_name,
            _call.c.contact_number,
            _call.c.direction,
            _call.c.status,
            _call.c.duration_seconds,
            _call.c.started_at,
            _call.c.summary,
        )
        .outerjoin(
            _contact,
            sa.and_(
                _contact.c.id == _call.c.contact_id, _contact.c.organization_id == _call.c.organization_id
            ),
        )
        .where(_call.c.organization_id == member.organization_id)
        .order_by(_call.c.started_at.desc())
        .limit(PAGE_SIZE)
    )
    async with services.engine.connect() as connection:
        rows = (await connection.execute(query)).all()
    zone = _zone(member)

    def who(row: Any) -> str:
        if row.contact_id is not None and row.first_name is not None:
            return f'<a href="/contacts/{e(row.contact_id)}">{e(_name(row.first_name, row.last_name))}</a>'
        return e(row.contact_number or "Unknown caller")

    body = "".join(
        f"""<tr>
  <td class="nowrap">{_when(row.started_at, zone)}</td>
  <td>{who(row)}</td>
  <td>{_badge(row.direction)}</td>
  <td>{_badge(row.status)}</td>
  <td class="nowrap">{e(_duration(row.duration_seconds))}</td>
  <td class="summary">{e(row.summary or "")}</td>
</tr>"""
        for row in rows
    )
    if not rows:
        body = '<tr><td colspan="6" class="empty-row">No calls yet.</td></tr>'
    content = Markup(f"""<div class="page-head"><div><h1>Calls</h1>
<p class="muted">The latest {PAGE_SIZE} calls in {e(member.organization_name)}</p></div></div>
<div class="card table-card">
<table class="table">
  <thead><tr><th scope="col">When</th><th scope="col">Contact</th><th scope="col">Direction</th>
  <th scope="col">Status</th><th scope="col">Length</th><th scope="col">Summary</th></tr></thead>
  <tbody>{body}</tbody>
</table>
</div>""")
    return page("Calls", content, member=member, active="calls")
