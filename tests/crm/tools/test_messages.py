"""Messages tools against the seeded demo CRM: a contact's thread, who waits for an answer, and
send_sms through its preview, the user's approval, the outbox and the audit log; each behind its
permission and inside one organization."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from tests.crm.tools.conftest import Tools, data, error, rows
from vernis.store.models import AuditEntry, Member, table_of, utcnow
from vernis_crm.models import Call, Contact, ContactPhone, SmsMessage

MEMBER = "member@acme.test"
VIEWER = "viewer@acme.test"
GLOBEX = "owner@globex.test"
JANE = "acme:contact:Jane Cooper"
GLOBEX_JANE = "globex:contact:Jane Cooper"
STAR_MESSAGE = "Hi, is it normal that my new crown feels a bit high when I bite?"

_sms = table_of(SmsMessage)
_call = table_of(Call)
_contact = table_of(Contact)
_phone = table_of(ContactPhone)
_audit = table_of(AuditEntry)


async def messages_of(tools: Tools, contact_id: uuid.UUID) -> list[Any]:
    return await rows(
        tools, sa.select(_sms).where(_sms.c.contact_id == contact_id).order_by(_sms.c.created_at)
    )


async def org_contacts(tools: Tools, email: str) -> set[str]:
    member = await tools.member(email)
    found = await rows(
        tools, sa.select(_contact.c.id).where(_contact.c.organization_id == member.organization_id)
    )
    return {str(row.id) for row in found}


# -- get_contact_messages -----------------------------------------------------------------------


async def test_contact_messages_are_the_thread_newest_first_and_paginated(tools: Tools) -> None:
    """A contact's messages come newest first, compact, counted, paged and filterable by direction."""
    jane = tools.entity(JANE)
    stored = await messages_of(tools, jane)
    first = data(await tools.call(VIEWER, "get_contact_messages", {"contact_id": str(jane), "limit": 2}))
    assert first["contact"] == {"id": str(jane), "name": "Jane Cooper"}
    assert first["total"] == len(stored) > 2
    assert first["next_offset"] == 2
    latest = first["messages"][0]
    assert latest["id"] == str(tools.entity("acme:sms:Jane Cooper"))
    assert (latest["direction"], latest["body"], latest["status"]) == ("inbound", STAR_MESSAGE, "received")
    assert set(latest) == {"id", "direction", "body", "status", "at"}
    everything = data(
        await tools.call(VIEWER, "get_contact_messages", {"contact_id": str(jane), "limit": 50})
    )
    assert [message["id"] for message in everything["messages"]] == [str(row.id) for row in reversed(stored)][
        :50
    ]
    assert everything["messages"][:2] == first["messages"]
    inbound = data(
        await tools.call(VIEWER, "get_contact_messages", {"contact_id": str(jane), "direction": "inbound"})
    )
    assert inbound["total"] == sum(row.direction == "inbound" for row in stored)
    assert {message["direction"] for message in inbound["messages"]} == {"inbound"}
    too_many = await tools.call(VIEWER, "get_contact_messages", {"contact_id": str(jane), "limit": 51})
    assert error(too_many)["code"] == "invalid_arguments"


async def test_message_reads_stay_in_the_callers_organization(tools: Tools) -> None:
    """A Globex thread is not found for an Acme member; each organization's unanswered list holds only its own contacts."""
    outcome = await tools.call(MEMBER, "get_contact_messages", {"contact_id": str(tools.entity(GLOBEX_JANE))})
    assert error(outcome)["code"] == "not_found"
    assert "search_contacts" in error(outcome)["hint"]
    globex = data(
        await tools.call(GLOBEX, "get_contact_messages", {"contact_id": str(tools.entity(GLOBEX_JANE))})
    )
    stored = await messages_of(tools, tools.entity(GLOBEX_JANE))
    assert {message["id"] for message in globex["messages"]} == {str(row.id) for row in stored}
    acme_waiting = data(await tools.call(MEMBER, "get_unanswered_contacts", {"days": 90, "limit": 50}))
    globex_waiting = data(await tools.call(GLOBEX, "get_unanswered_contacts", {"days": 90, "limit": 50}))
    assert acme_waiting["contacts"]
    assert globex_waiting["contacts"]
    assert {contact["id"] for contact in acme_waiting["contacts"]} <= await org_contacts(tools, MEMBER)
    assert {contact["id"] for contact in globex_waiting["contacts"]} <= await org_contacts(tools, GLOBEX)


async def test_the_viewer_may_not_send_and_reads_need_message_list(tools: Tools) -> None:
    """The viewer is offered the message reads but not send_sms, which is refused unrun; reads need message:list."""
    jane = tools.entity(JANE)
    assert "send_sms" in await tools.offered(MEMBER)
    offered = await tools.offered(VIEWER)
    assert "send_sms" not in offered
    assert {"get_contact_messages", "get_unanswered_contacts"} <= offered
    refused = await tools.call(VIEWER, "send_sms", {"contact_id": str(jane), "body": "Hello"})
    assert error(refused)["code"] == "forbidden"
    assert (
        len(await messages_of(tools, jane))
        == data(await tools.call(VIEWER, "get_contact_messages", {"contact_id": str(jane)}))["total"]
    )
    async with tools.engine.begin() as connection:
        await connection.execute(
            sa.update(table_of(Member))
            .where(table_of(Member).c.email == VIEWER)
            .values(revoked_permissions=["message:list"])
        )
    for name, arguments in (
        ("get_contact_messages", {"contact_id": str(jane)}),
        ("get_unanswered_contacts", {}),
    ):
        assert error(await tools.call(VIEWER, name, arguments))["code"] == "forbidden"


# -- send_sms -----------------------------------------------------------------------------------


async def test_send_sms_previews_then_queues_exactly_that_message(tools: Tools) -> None:
    """send_sms shows recipient, number, line and text; nothing is queued until approved, then exactly it."""
    jane = tools.entity(JANE)
    arguments = {
        "contact_id": str(jane),
        "body": "Hi Jane, a slightly high crown is normal for a day or two. - Acme Dental",
    }
    shown = await tools.call(MEMBER, "send_sms", arguments)
    assert shown.status == "needs_confirmation", shown.envelope
    assert shown.preview == {
        "action": "Send an SMS",
        "to": {"id": str(jane), "name": "Jane Cooper", "number": "+12125550147", "label": "mobile"},
        # She last texted the main line: the answer leaves from it.
        "from": {"label": "Main line", "number": "+12125550100"},
        "body": arguments["body"],
    }
    before = await messages_of(tools, jane)

    write_preview, envelope = await tools.write(MEMBER, "send_sms", arguments)
    assert write_preview.preview == shown.preview
    assert envelope["ok"], envelope
    sent = envelope["data"]
    assert (sent["status"], sent["to"], sent["from"], sent["body"]) == (
        "queued",
        shown.preview["to"],
        shown.preview["from"],
        arguments["body"],
    )
    after = await messages_of(tools, jane)
    (new,) = [row for row in after if row.id not in {old.id for old in before}]
    member = await tools.member(MEMBER)
    assert str(new.id) == sent["message_id"]
    assert (new.direction, new.status, new.body, new.contact_number, new.sender_id, new.organization_id) == (
        "outbound",
        "queued",
        arguments["body"],
        "+12125550147",
        member.id,
        member.organization_id,
    )
    assert new.phone_number_id == tools.entity("acme:phone_number:Main line")
    (audit,) = await rows(
        tools, sa.select(_audit).where(_audit.c.approval_id == write_preview.confirmation_id)
    )
    assert (audit.tool_name, audit.outcome, audit.member_id) == ("send_sms", "ok", member.id)
    thread = data(await tools.call(MEMBER, "get_contact_messages", {"contact_id": str(jane), "limit": 1}))
    assert thread["messages"][0] | {"at": None} == {
        "id": sent["message_id"],
        "direction": "outbound",
        "body": arguments["body"],
        "status": "queued",
        "at": None,
        "sent_by": "Priya Raman",
    }


async def test_send_sms_checks_the_recipient_in_the_callers_organization(tools: Tools) -> None:
    """send_sms goes to one of the contact's numbers (any format), needs one, and never to Globex."""
    jane = str(tools.entity(JANE))
    other_format = await tools.call(
        MEMBER, "send_sms", {"contact_id": jane, "body": "Hi", "to_number": "212.555.0147"}
    )
    assert other_format.preview["to"]["number"] == "+12125550147"
    not_hers = await tools.call(
        MEMBER, "send_sms", {"contact_id": jane, "body": "Hi", "to_number": "646-555-0188"}
    )
    assert error(not_hers)["code"] == "not_found"
    assert "manage_contact_phones" in error(not_hers)["hint"]
    member = await tools.member(MEMBER)
    has_phone = sa.exists().where(_phone.c.contact_id == _contact.c.id)
    (no_phone,) = (
        await rows(
            tools,
            sa.select(_contact.c.id)
            .where(_contact.c.organization_id == member.organization_id, ~has_phone)
            .limit(1),
        )
    )[0]
    refused = await tools.call(MEMBER, "send_sms", {"contact_id": str(no_phone), "body": "Hi"})
    assert error(refused)["code"] == "no_phone"
    globex_jane = tools.entity(GLOBEX_JANE)
    before = await messages_of(tools, globex_jane)
    foreign = await tools.call(MEMBER, "send_sms", {"contact_id": str(globex_jane), "body": "Hi"})
    assert error(foreign)["code"] == "not_found"
    assert await messages_of(tools, globex_jane) == before
    globex = await tools.call(GLOBEX, "send_sms", {"contact_id": str(globex_jane), "body": "Hallo"})
    assert globex.preview["from"] == {"label": "Zentrale", "number": "+493023125100"}
    assert globex.preview["to"]["number"] == "+493023125101"


# -- get_unanswered_contacts --------------------------------------------------------------------


async def expected_waiting(tools: Tools, email: str, days: int, calls: bool) -> list[str]:
    """The contacts waiting for an answer, worked out in Python from every message and call."""
    member = await tools.member(email)
    since = utcnow() - timedelta(days=days)
    last: dict[tuple[uuid.UUID, str], Any] = {}

    def note(contact_id: uuid.UUID, kind: str, at: Any) -> None:
        last[contact_id, kind] = max(at, last.get((contact_id, kind), at))

    for row in await rows(tools, sa.select(_sms).where(_sms.c.organization_id == member.organization_id)):
        if row.contact_id is not None and row.created_at >= since:
            if row.direction == "inbound":
                note(row.contact_id, "sms in", row.created_at)
            elif row.status != "failed":
                note(row.contact_id, "sms out", row.created_at)
    for row in await rows(tools, sa.select(_call).where(_call.c.organization_id == member.organization_id)):
        if calls and row.contact_id is not None and row.started_at >= since:
            if row.direction == "outbound" or row.status == "answered":
                note(row.contact_id, "call out", row.started_at)
            elif row.status in ("missed", "voicemail"):
                note(row.contact_id, "call in", row.started_at)
    waiting: dict[str, Any] = {}
    for (contact_id, kind), at in last.items():
        if kind.endswith(" in"):
            answered = last.get((contact_id, kind.replace(" in", " out")))
            if answered is None or at > answered:
                waiting[str(contact_id)] = max(at, waiting.get(str(contact_id), at))
    return [
        contact_id
        for _, contact_id in sorted((-at.timestamp(), contact_id) for contact_id, at in waiting.items())
    ]


async def unanswered(tools: Tools, email: str, **arguments: Any) -> Any:
    return data(await tools.call(email, "get_unanswered_contacts", arguments))


async def every_unanswered(tools: Tools, email: str, **arguments: Any) -> list[dict[str, Any]]:
    """Every page of get_unanswered_contacts, followed by next_offset."""
    contacts: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = await unanswered(tools, email, limit=50, offset=offset, **arguments)
        contacts += page["contacts"]
        offset = page.get("next_offset")
    assert len(contacts) == page["total"]
    return contacts


async def test_unanswered_contacts_are_those_whose_last_reach_out_has_no_answer(tools: Tools) -> None:
    """Waiting: their latest SMS has no later SMS reply, or a missed call no later call back; newest first."""
    for calls in (False, True):
        expected = await expected_waiting(tools, MEMBER, 14, calls)
        found = await unanswered(tools, MEMBER, days=14, include_missed_calls=calls, limit=50)
        assert found["total"] == len(expected) > 0
        assert [contact["id"] for contact in found["contacts"]] == expected[:50]
    sms_only = await every_unanswered(tools, MEMBER, include_missed_calls=False)
    (jane,) = [contact for contact in sms_only if contact["id"] == str(tools.entity(JANE))]
    assert jane["name"] == "Jane Cooper"
    assert jane["number"] == "+12125550147"
    assert jane["unanswered_messages"] >= 1
    assert jane["unanswered_calls"] == 0
    assert jane["latest"]["kind"] == "sms"
    assert jane["latest"]["body"] == STAR_MESSAGE
    assert set(jane) == {
        "id",
        "name",
        "number",
        "waiting_since",
        "unanswered_messages",
        "unanswered_calls",
        "latest",
    }
    page = await unanswered(tools, MEMBER, limit=3)
    assert len(page["contacts"]) == 3
    assert page["next_offset"] == 3
    rest = await unanswered(tools, MEMBER, limit=3, offset=3)
    assert not {c["id"] for c in page["contacts"]} & {c["id"] for c in rest["contacts"]}
    assert (
        error(await tools.call(MEMBER, "get_unanswered_contacts", {"limit": 51}))["code"]
        == "invalid_arguments"
    )
    assert (
        error(await tools.call(MEMBER, "get_unanswered_contacts", {"days": 91}))["code"]
        == "invalid_arguments"
    )


async def test_an_answer_takes_a_contact_off_the_unanswered_list(tools: Tools) -> None:
    """Once an SMS to Jane Cooper is queued she no longer waits for an answer."""
    jane = str(tools.entity(JANE))
    waiting = [contact["id"] for contact in await every_unanswered(tools, MEMBER, include_missed_calls=False)]
    assert jane in waiting
    _, envelope = await tools.write(MEMBER, "send_sms", {"contact_id": jane, "body": "Yes, that is normal."})
    assert envelope["ok"], envelope
    after = [contact["id"] for contact in await every_unanswered(tools, MEMBER, include_missed_calls=False)]
    assert after == [contact_id for contact_id in waiting if contact_id != jane]
