"""Managing a contact's tags, e-mail addresses and phone numbers against the seeded demo CRM: each
write previews the resulting set, then applies exactly that after the user's approval."""

from __future__ import annotations

from tests.crm.tools._contacts import JANE, MEMBER, approved, emails, phones, previewed, search, tags
from tests.crm.tools.conftest import Tools, error

# -- manage_contact_tags ------------------------------------------------------------------------


async def test_manage_contact_tags_previews_the_resulting_set_then_applies_it(tools: Tools) -> None:
    """Tags: the preview lists additions, removals and the resulting set; the write makes it so, once."""
    jane = tools.entity(JANE)
    arguments = {"contact_id": str(jane), "add": ["Follow Up", "vip"], "remove": ["patient", "lead"]}
    preview = await previewed(tools, "manage_contact_tags", arguments)
    assert preview == {
        "action": "Change a contact's tags",
        "contact": {"id": str(jane), "name": "Jane Cooper"},
        "add": ["follow-up"],
        "remove": ["patient"],
        "result": ["follow-up", "vip"],
        "new_tags": ["follow-up"],
        "already_tagged": ["vip"],
        "not_tagged": ["lead"],
    }
    assert await tags(tools, jane) == ["patient", "vip"]

    changed = await approved(tools, "manage_contact_tags", arguments, preview)
    assert changed["tags"] == ["follow-up", "vip"]
    assert await tags(tools, jane) == ["follow-up", "vip"]
    followers = await search(tools, "", tag="follow-up")
    assert [contact["id"] for contact in followers["contacts"]] == [str(jane)]
    again = await tools.call(MEMBER, "manage_contact_tags", arguments)
    assert error(again)["code"] == "no_change"
    both = await tools.call(
        MEMBER, "manage_contact_tags", {"contact_id": str(jane), "add": ["x"], "remove": ["X"]}
    )
    assert error(both)["code"] == "invalid_arguments"


# -- manage_contact_emails ----------------------------------------------------------------------


async def test_manage_contact_emails_previews_the_resulting_set_then_applies_it(tools: Tools) -> None:
    """E-mails: removing the primary address promotes the added one; preview and write agree."""
    jane = tools.entity(JANE)
    arguments = {
        "contact_id": str(jane),
        "add": [{"email": "Jane@HudsonYards.example", "label": "work"}],
        "remove": ["jane.cooper@gmail.com"],
    }
    preview = await previewed(tools, "manage_contact_emails", arguments)
    assert preview == {
        "action": "Change a contact's e-mail addresses",
        "contact": {"id": str(jane), "name": "Jane Cooper"},
        "add": [{"email": "jane@hudsonyards.example", "label": "work"}],
        "remove": ["jane.cooper@gmail.com"],
        "result": [{"email": "jane@hudsonyards.example", "label": "work", "primary": True}],
        "primary": {"from": "jane.cooper@gmail.com", "to": "jane@hudsonyards.example"},
    }
    assert await emails(tools, jane) == {("jane.cooper@gmail.com", "personal", True)}

    changed = await approved(tools, "manage_contact_emails", arguments, preview)
    assert changed["emails"] == preview["result"]
    assert await emails(tools, jane) == {("jane@hudsonyards.example", "work", True)}


async def test_manage_contact_emails_can_switch_the_primary_address(tools: Tools) -> None:
    """Adding an address and making it primary keeps the old one as a secondary address."""
    jane = tools.entity(JANE)
    arguments = {"contact_id": str(jane), "add": [{"email": "j@hy.example"}], "primary": "j@hy.example"}
    preview = await previewed(tools, "manage_contact_emails", arguments)
    assert preview["result"] == [
        {"email": "jane.cooper@gmail.com", "label": "personal", "primary": False},
        {"email": "j@hy.example", "label": "personal", "primary": True},
    ]
    await approved(tools, "manage_contact_emails", arguments, preview)
    assert await emails(tools, jane) == {
        ("jane.cooper@gmail.com", "personal", False),
        ("j@hy.example", "personal", True),
    }


async def test_manage_contact_emails_refuses_duplicates_and_unknown_addresses(tools: Tools) -> None:
    """Another contact's address is a duplicate; removing an address the contact lacks is not found."""
    jane = str(tools.entity(JANE))
    taken = await tools.call(
        MEMBER, "manage_contact_emails", {"contact_id": jane, "add": [{"email": "janet.cooper62@yahoo.com"}]}
    )
    assert error(taken)["code"] == "duplicate_email"
    assert "Janet Cooper" in error(taken)["message"]
    unknown = await tools.call(
        MEMBER, "manage_contact_emails", {"contact_id": jane, "remove": ["jane@nowhere.example"]}
    )
    assert error(unknown)["code"] == "not_found"
    assert "jane.cooper@gmail.com" in error(unknown)["message"]
    globex = await tools.call(
        MEMBER,
        "manage_contact_emails",
        {"contact_id": jane, "add": [{"email": "jane.cooper@initech.example"}]},
    )
    assert globex.status == "needs_confirmation"


# -- manage_contact_phones ----------------------------------------------------------------------


async def test_manage_contact_phones_previews_the_resulting_set_then_applies_it(tools: Tools) -> None:
    """Phones: numbers in any format; the preview shows additions, removals, the primary and the result."""
    jane = tools.entity(JANE)
    arguments = {
        "contact_id": str(jane),
        "add": [{"number": "+1 (929) 555-0277", "label": "work"}],
        "remove": ["212.555.0147"],
    }
    preview = await previewed(tools, "manage_contact_phones", arguments)
    assert preview == {
        "action": "Change a contact's phone numbers",
        "contact": {"id": str(jane), "name": "Jane Cooper"},
        "add": [{"number": "+1 (929) 555-0277", "e164": "+19295550277", "label": "work"}],
        "remove": [{"number": "(212) 555-0147", "e164": "+12125550147"}],
        "result": [{"number": "+1 (929) 555-0277", "e164": "+19295550277", "label": "work", "primary": True}],
        "primary": {"from": "+12125550147", "to": "+19295550277"},
    }
    assert await phones(tools, jane) == {("(212) 555-0147", "+12125550147", "mobile", True)}

    changed = await approved(tools, "manage_contact_phones", arguments, preview)
    assert changed["phones"] == preview["result"]
    assert await phones(tools, jane) == {("+1 (929) 555-0277", "+19295550277", "work", True)}
    assert (await search(tools, "929-555-0277"))["contacts"][0]["id"] == str(jane)


async def test_manage_contact_phones_warns_of_shared_numbers_and_refuses_bad_ones(tools: Tools) -> None:
    """A number another contact has is added with a warning; a non-number or unknown removal is refused."""
    jane = str(tools.entity(JANE))
    shared = await previewed(
        tools,
        "manage_contact_phones",
        {"contact_id": jane, "add": [{"number": "646-555-0188", "label": "home"}]},
    )
    assert shared["warnings"] == ["+16465550188 is also the number of Janet Cooper."]
    assert shared["result"][0]["primary"] is True  # her own number stays the primary one
    bad = await tools.call(
        MEMBER, "manage_contact_phones", {"contact_id": jane, "add": [{"number": "555-CALL"}]}
    )
    assert error(bad)["code"] == "invalid_phone"
    unknown = await tools.call(
        MEMBER, "manage_contact_phones", {"contact_id": jane, "remove": ["(718) 555-0000"]}
    )
    assert error(unknown)["code"] == "not_found"
    assert "(212) 555-0147" in error(unknown)["message"]
