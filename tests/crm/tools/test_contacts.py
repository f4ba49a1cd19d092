"""Contacts tools against the seeded demo CRM: search, details, creating and updating a contact and
adding a note, each write through its preview, the user's approval and the audit log; every contacts
tool behind its permission and inside one organization (the managing tools: test_contacts_manage)."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from tests.crm.tools._contacts import (
    GLOBEX,
    GLOBEX_JANE,
    JANE,
    MEMBER,
    VIEWER,
    approved,
    contact_row,
    emails,
    phones,
    previewed,
    search,
    tags,
)
from tests.crm.tools.conftest import Tools, data, error, rows
from vernis.store.models import Member, table_of
from vernis_crm.models import Call, Contact, ContactEmail, ContactNote, ContactPhone, SmsMessage, Tag

_contact = table_of(Contact)
_email = table_of(ContactEmail)
_phone = table_of(ContactPhone)
_note = table_of(ContactNote)
_tag = table_of(Tag)

WRITES = [
    "create_contact",
    "update_contact",
    "add_contact_note",
    "manage_contact_tags",
    "manage_contact_emails",
    "manage_contact_phones",
]


# -- search_contacts ----------------------------------------------------------------------------


async def test_search_finds_partial_names_and_email_addresses(tools: Tools) -> None:
    """Any part of a name (in any case and word order) or of an e-mail address finds the contact."""
    for query in ("jane", "JANE", "coop", "Jane Cooper", "jane coo", "cooper jane", "Cooper, Jane"):
        found = await search(tools, query, limit=50)
        assert str(tools.entity(JANE)) in [contact["id"] for contact in found["contacts"]], query
        assert all(
            word in f"{contact['name']} {contact['company']} {contact['email']}".lower()
            for contact in found["contacts"]
            for word in query.lower().replace(",", "").split()
        ), query
    assert (await search(tools, "jane cooper"))["contacts"][0]["name"] == "Jane Cooper"
    for query, who in (
        ("jane.cooper@gmail.com", JANE),
        ("JANE.COOPER@", JANE),
        ("metlife-dental", "acme:contact:Esther Howard"),
        ("robfox@", "acme:contact:Robert Fox"),
    ):
        found = await search(tools, query)
        assert str(tools.entity(who)) in [contact["id"] for contact in found["contacts"]], query


async def test_search_finds_phone_numbers_in_any_format(tools: Tools) -> None:
    """A whole number in any format finds exactly its contact; part of one finds all that contain it."""
    for query in ("(212) 555-0147", "+12125550147", "212.555.0147", "1-212-555-0147", "+1 212 555 0147"):
        found = await search(tools, query)
        assert [contact["id"] for contact in found["contacts"]] == [str(tools.entity(JANE))], query
        assert found["contacts"][0]["phone"] == "+12125550147"
    partial = await search(tools, "555-0147", limit=50)
    assert str(tools.entity(JANE)) in [contact["id"] for contact in partial["contacts"]]
    numbers = await rows(
        tools,
        sa.select(sa.func.count(sa.distinct(_phone.c.contact_id))).where(
            _phone.c.organization_id == (await tools.member(MEMBER)).organization_id,
            _phone.c.number_e164.contains("5550147"),
        ),
    )
    assert partial["total"] == numbers[0][0] > 1


async def test_search_results_are_compact_and_paginated(tools: Tools) -> None:
    """A page holds at most `limit` compact contacts, with the total and where the next page starts."""
    first = await search(tools, "", tag="patient", limit=5)
    assert len(first["contacts"]) == 5
    assert first["total"] > 100
    assert first["next_offset"] == 5
    assert all(
        set(contact) == {"id", "name", "company", "email", "phone", "tags"} for contact in first["contacts"]
    )
    assert all("patient" in contact["tags"] for contact in first["contacts"])
    second = await search(tools, "", tag="patient", limit=5, offset=5)
    assert not {c["id"] for c in first["contacts"]} & {c["id"] for c in second["contacts"]}
    last = await search(tools, "", tag="patient", limit=50, offset=first["total"] - 3)
    assert len(last["contacts"]) == 3
    assert "next_offset" not in last
    jane = (await search(tools, "jane cooper"))["contacts"][0]
    assert jane == {
        "id": str(tools.entity(JANE)),
        "name": "Jane Cooper",
        "company": "Hudson Yards Capital",
        "email": "jane.cooper@gmail.com",
        "phone": "+12125550147",
        "tags": ["patient", "vip"],
    }
    too_many = await tools.call(MEMBER, "search_contacts", {"query": "a", "limit": 51})
    assert error(too_many)["code"] == "invalid_arguments"


async def test_search_stays_in_the_callers_organization(tools: Tools) -> None:
    """Acme finds only Acme's contacts, Globex only Globex's, whatever the query matches elsewhere."""
    assert (await search(tools, "23125101"))["total"] == 0  # Globex's Jane Cooper's number
    assert (await search(tools, "initech"))["total"] == 0  # her company and e-mail domain
    acme = await search(tools, "jane cooper")
    assert str(tools.entity(GLOBEX_JANE)) not in [contact["id"] for contact in acme["contacts"]]
    globex = await search(tools, "jane cooper", GLOBEX)
    assert [contact["id"] for contact in globex["contacts"]] == [str(tools.entity(GLOBEX_JANE))]
    assert (await search(tools, "030 23125101", GLOBEX))["contacts"][0]["id"] == str(
        tools.entity(GLOBEX_JANE)
    )


# -- get_contact_details ------------------------------------------------------------------------


async def test_details_hold_addresses_numbers_tags_notes_and_activity(tools: Tools) -> None:
    """A contact's details: e-mails, phones, tags, the latest notes and counts that match the data."""
    jane = tools.entity(JANE)
    details = data(await tools.call(VIEWER, "get_contact_details", {"contact_id": str(jane)}))
    assert details["name"] == "Jane Cooper"
    assert details["company"] == "Hudson Yards Capital"
    assert details["emails"] == [{"email": "jane.cooper@gmail.com", "label": "personal", "primary": True}]
    assert details["phones"] == [
        {"number": "(212) 555-0147", "e164": "+12125550147", "label": "mobile", "primary": True}
    ]
    assert details["tags"] == ["patient", "vip"]
    assert details["notes"]["total"] == 1
    (note,) = details["notes"]["latest"]
    assert note["body"].startswith("Prefers late-afternoon appointments.")
    assert note["created_at"].endswith(("-05:00", "-04:00"))  # New York time
    calls = await rows(tools, sa.select(sa.func.count()).where(table_of(Call).c.contact_id == jane))
    messages = await rows(tools, sa.select(sa.func.count()).where(table_of(SmsMessage).c.contact_id == jane))
    activity = details["activity"]
    assert (activity["calls"], activity["messages"]) == (calls[0][0], messages[0][0])
    assert activity["calls_last_30_days"] <= activity["calls"]
    assert activity["open_tasks"] >= 1  # "Call Jane Cooper about her crown fitting"
    assert activity["active_plans"] >= 1  # her post-treatment follow-up


async def test_details_of_another_organizations_contact_are_not_found(tools: Tools) -> None:
    """A Globex contact's id given to an Acme member is not found, and nothing of it is shown."""
    outcome = await tools.call(MEMBER, "get_contact_details", {"contact_id": str(tools.entity(GLOBEX_JANE))})
    assert error(outcome)["code"] == "not_found"
    assert "search_contacts" in error(outcome)["hint"]
    assert "Initech" not in str(outcome.envelope)
    unknown = await tools.call(MEMBER, "get_contact_details", {"contact_id": str(uuid.uuid4())})
    assert error(unknown)["code"] == "not_found"


# -- permissions and organization of the writes -------------------------------------------------


def write_arguments(contact_id: uuid.UUID) -> dict[str, dict[str, Any]]:
    target = {"contact_id": str(contact_id)}
    return {
        "create_contact": {"first_name": "Ada", "last_name": "Lovelace"},
        "update_contact": target | {"company": "Analytical Engines"},
        "add_contact_note": target | {"body": "Called about the invoice."},
        "manage_contact_tags": target | {"add": ["follow-up"]},
        "manage_contact_emails": target | {"add": [{"email": "ada@example.com"}]},
        "manage_contact_phones": target | {"add": [{"number": "(929) 555-0277"}]},
    }


async def test_the_viewer_may_not_write_and_reads_need_their_permissions(tools: Tools) -> None:
    """The viewer is offered no contact write and each is refused unrun; reads need contact:list / contact:view."""
    assert set(WRITES) <= await tools.offered(MEMBER)
    assert not set(WRITES) & await tools.offered(VIEWER)
    jane = tools.entity(JANE)
    before = (await contact_row(tools, jane), await emails(tools, jane), await tags(tools, jane))
    for name, arguments in write_arguments(jane).items():
        outcome = await tools.call(VIEWER, name, arguments)
        assert error(outcome)["code"] == "forbidden", name
    assert (await contact_row(tools, jane), await emails(tools, jane), await tags(tools, jane)) == before
    assert await rows(tools, sa.select(_contact).where(_contact.c.first_name == "Ada")) == []

    assert {"search_contacts", "get_contact_details"} <= await tools.offered(VIEWER)
    async with tools.engine.begin() as connection:
        await connection.execute(
            sa.update(table_of(Member))
            .where(table_of(Member).c.email == VIEWER)
            .values(revoked_permissions=["contact:list", "contact:view"])
        )
    assert not {"search_contacts", "get_contact_details"} & await tools.offered(VIEWER)
    refused = await tools.call(VIEWER, "search_contacts", {"query": "jane"})
    assert error(refused)["code"] == "forbidden"
    refused = await tools.call(VIEWER, "get_contact_details", {"contact_id": str(jane)})
    assert error(refused)["code"] == "forbidden"


async def test_writes_to_another_organizations_contact_are_not_found(tools: Tools) -> None:
    """Every write on a Globex contact's id by an Acme member is refused at the preview as not found."""
    globex_jane = tools.entity(GLOBEX_JANE)
    before = (
        await contact_row(tools, globex_jane),
        await emails(tools, globex_jane),
        await tags(tools, globex_jane),
    )
    for name, arguments in list(write_arguments(globex_jane).items())[1:]:
        outcome = await tools.call(MEMBER, name, arguments)
        assert error(outcome)["code"] == "not_found", name
        assert error(outcome)["hint"] == "Use search_contacts to find the contact's id."
    after = (
        await contact_row(tools, globex_jane),
        await emails(tools, globex_jane),
        await tags(tools, globex_jane),
    )
    assert after == before


# -- create_contact -----------------------------------------------------------------------------


async def test_create_contact_previews_then_creates_exactly_that(tools: Tools) -> None:
    """create_contact shows the whole new contact, creates nothing until approved, then exactly it."""
    arguments = {
        "first_name": " Ada ",
        "last_name": "Lovelace",
        "company": "Analytical Engines",
        "emails": [{"email": "Ada@Example.com", "label": "work"}, {"email": "ada.l@example.org"}],
        "phones": [{"number": "(929) 555-0277"}],
        "tags": ["patient", "Open Day"],
        "note": "Met at the open day.",
    }
    preview = await previewed(tools, "create_contact", arguments)
    assert preview == {
        "action": "Create a contact",
        "contact": {
            "first_name": "Ada",
            "last_name": "Lovelace",
            "company": "Analytical Engines",
            "emails": [
                {"email": "ada@example.com", "label": "work", "primary": True},
                {"email": "ada.l@example.org", "label": "personal", "primary": False},
            ],
            "phones": [
                {"number": "(929) 555-0277", "e164": "+19295550277", "label": "mobile", "primary": True}
            ],
            "tags": ["patient", "open-day"],
            "note": "Met at the open day.",
        },
        "new_tags": ["open-day"],
    }
    lovelaces = sa.select(_contact.c.id).where(_contact.c.last_name == "Lovelace")
    assert await rows(tools, lovelaces) == []
    assert await rows(tools, sa.select(_tag).where(_tag.c.name == "open-day")) == []

    created = await approved(tools, "create_contact", arguments, preview)
    ((contact_id,),) = await rows(tools, lovelaces)
    assert created == {"id": str(contact_id), "name": "Ada Lovelace", "created": True}
    row = await contact_row(tools, contact_id)
    member = await tools.member(MEMBER)
    assert (row.organization_id, row.first_name, row.company) == (
        member.organization_id,
        "Ada",
        "Analytical Engines",
    )
    assert await emails(tools, contact_id) == {
        ("ada@example.com", "work", True),
        ("ada.l@example.org", "personal", False),
    }
    assert await phones(tools, contact_id) == {("(929) 555-0277", "+19295550277", "mobile", True)}
    assert await tags(tools, contact_id) == ["open-day", "patient"]
    (note,) = await rows(tools, sa.select(_note).where(_note.c.contact_id == contact_id))
    assert (note.body, note.author_id) == ("Met at the open day.", member.id)
    found = await search(tools, "lovelace")
    assert [contact["id"] for contact in found["contacts"]] == [str(contact_id)]


async def test_create_contact_looks_for_duplicates_in_the_organization_only(tools: Tools) -> None:
    """An address another Acme contact has is refused, naming it; Globex's contacts count for nothing."""
    outcome = await tools.call(
        MEMBER, "create_contact", {"first_name": "J", "emails": [{"email": "Jane.Cooper@gmail.com"}]}
    )
    assert error(outcome)["code"] == "duplicate_email"
    assert f"Jane Cooper (contact {tools.entity(JANE)})" in error(outcome)["message"]
    preview = await previewed(
        tools,
        "create_contact",
        {"first_name": "Jane", "last_name": "Cooper", "emails": [{"email": "jane.cooper@initech.example"}]},
    )
    assert preview["warnings"] == [
        f"A contact named Jane Cooper already exists (contact {tools.entity(JANE)})."
    ]
    assert str(tools.entity(GLOBEX_JANE)) not in str(preview)


async def test_create_contact_reads_numbers_in_the_organizations_country(tools: Tools) -> None:
    """A number without a country code is read in the organization's country; a non-number is refused."""
    globex = await previewed(
        tools, "create_contact", {"first_name": "Jo", "phones": [{"number": "030 1234567"}]}, GLOBEX
    )
    assert globex["contact"]["phones"][0]["e164"] == "+49301234567"
    acme = await previewed(
        tools, "create_contact", {"first_name": "Jo", "phones": [{"number": "212-555-0999"}]}
    )
    assert acme["contact"]["phones"][0]["e164"] == "+12125550999"
    bad = await tools.call(MEMBER, "create_contact", {"first_name": "Jo", "phones": [{"number": "12345"}]})
    assert error(bad)["code"] == "invalid_phone"
    bad_email = await tools.call(MEMBER, "create_contact", {"first_name": "Jo", "emails": [{"email": "jo@"}]})
    assert error(bad_email)["code"] == "invalid_arguments"


# -- update_contact -----------------------------------------------------------------------------


async def test_update_contact_previews_from_and_to_then_applies_exactly_that(tools: Tools) -> None:
    """update_contact shows each changed field from → to and applies exactly those; repeated, it is no_change."""
    jane = tools.entity(JANE)
    arguments = {"contact_id": str(jane), "first_name": "Janie", "last_name": "Cooper", "company": ""}
    preview = await previewed(tools, "update_contact", arguments)
    assert preview == {
        "action": "Update a contact",
        "contact": {"id": str(jane), "name": "Jane Cooper"},
        "changes": {
            "first_name": {"from": "Jane", "to": "Janie"},
            "company": {"from": "Hudson Yards Capital", "to": None},
        },
    }
    before = await contact_row(tools, jane)
    assert (before.first_name, before.company) == ("Jane", "Hudson Yards Capital")

    updated = await approved(tools, "update_contact", arguments, preview)
    assert updated == {
        "id": str(jane),
        "name": "Janie Cooper",
        "company": None,
        "updated": ["company", "first_name"],
    }
    after = await contact_row(tools, jane)
    assert (after.first_name, after.last_name, after.company) == ("Janie", "Cooper", None)
    assert after.updated_at > before.updated_at
    again = await tools.call(MEMBER, "update_contact", arguments)
    assert error(again)["code"] == "no_change"
    nothing = await tools.call(MEMBER, "update_contact", {"contact_id": str(jane)})
    assert error(nothing)["code"] == "no_change"


# -- add_contact_note ---------------------------------------------------------------------------


async def test_add_contact_note_previews_then_adds_the_note_by_the_user(tools: Tools) -> None:
    """add_contact_note shows the note and its author, adds nothing until approved, then exactly it."""
    jane = tools.entity(JANE)
    arguments = {"contact_id": str(jane), "body": "Asked to move Friday's check to 4 pm."}
    preview = await previewed(tools, "add_contact_note", arguments)
    assert preview == {
        "action": "Add a note to a contact",
        "contact": {"id": str(jane), "name": "Jane Cooper"},
        "note": {"body": "Asked to move Friday's check to 4 pm.", "author": "Priya Raman"},
    }
    notes = sa.select(_note).where(_note.c.contact_id == jane)
    assert len(await rows(tools, notes)) == 1

    added = await approved(tools, "add_contact_note", arguments, preview)
    new = [note for note in await rows(tools, notes) if str(note.id) == added["note_id"]]
    assert [(note.body, note.author_id) for note in new] == [
        (arguments["body"], (await tools.member(MEMBER)).id)
    ]
    details = data(await tools.call(MEMBER, "get_contact_details", {"contact_id": str(jane)}))
    assert details["notes"]["total"] == 2
    assert details["notes"]["latest"][0]["body"] == arguments["body"]


async def test_a_created_contact_is_summed_up_in_one_sentence(tools: Tools) -> None:
    """create_contact's result carries a one-line summary for the host page ("Created contact Ada Lovelace") beside its data."""
    _, envelope = await tools.write(MEMBER, "create_contact", {"first_name": "Ada", "last_name": "Lovelace"})
    assert envelope["ok"], envelope
    assert envelope["summary"] == "Created contact Ada Lovelace"
    assert envelope["data"]["name"] == "Ada Lovelace"
