"""Reviews in process (vernis.session.reviews, SPEC §23): demo mode sends the CRM's `send_sms` to
review by holders of `message:review` (admins and owners); the app's services, sessions with
recording outboxes, the scripted model."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
import sqlalchemy as sa

from tests.session.conftest import App, Connect, Tab
from vernis.exceptions import Forbidden, NotFound
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis.session.confirm import confirm_tool
from vernis.session.reviews import ANSWERED, list_reviews, review_tool
from vernis.session.send import send_user_message

REVIEWER = "admin@acme.test"


async def a_contact(app: App, tab: Tab) -> uuid.UUID:
    """A contact of the member's organization with a primary phone number (an SMS can go to it)."""
    async with app.services.engine.connect() as connection:
        contact_id = await connection.scalar(
            sa.text(
                "SELECT c.id FROM contact c JOIN contact_phone p ON p.contact_id = c.id AND p.is_primary "
                "WHERE c.organization_id = :org ORDER BY c.id LIMIT 1"
            ),
            {"org": tab.session.member.organization_id.hex},
        )
    return uuid.UUID(str(contact_id))


async def sent(app: App, body: str) -> int:
    """How many SMS with this text the CRM's outbox holds."""
    async with app.services.engine.connect() as connection:
        count = await connection.scalar(
            sa.text("SELECT count(*) FROM sms_message WHERE body = :body"), {"body": body}
        )
    return int(count or 0)


async def requested(app: App, member: Tab, body: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The member asks for an SMS and approves its card: its `confirmation_required` and the card's
    `review_requested`."""
    contact_id = await a_contact(app, member)
    app.script(
        Reply(tool_calls=[ScriptedToolCall("send_sms", {"contact_id": str(contact_id), "body": body})]),
        "please text",
    )
    await send_user_message(member.session, "please text them", None, None)
    answer = await member.until("assistant_end")
    await member.until("title_updated")
    (confirmation,) = [e for e in answer if e["type"] == "confirmation_required"]

    await confirm_tool(member.session, uuid.UUID(confirmation["confirmation_id"]), approved=True)

    received = await member.until("review_requested")
    assert "tool_call_completed" not in [e["type"] for e in received]
    return confirmation, received[-1]


def continuing(body: Mapping[str, Any]) -> bool:
    """The request of the answer that follows a review's outcome."""
    return "A reviewer has decided" in str(body["messages"][0]["content"])


async def test_an_approved_write_waits_for_a_reviewer_who_hears_of_it_and_lists_it(
    app: App, connect: Connect
) -> None:
    """Approved by its member, a reviewed write runs nothing: the card says review_requested, a reviewer's session hears review_required and lists it."""
    member, reviewer = await connect(), await connect(REVIEWER)
    body = "Your appointment is confirmed"

    _, card = await requested(app, member, body)

    assert await sent(app, body) == 0
    (pushed,) = await reviewer.until("review_required")
    assert pushed["review"]["review_id"] == card["review_id"]
    assert pushed["review"]["arguments"]["body"] == body
    await list_reviews(reviewer.session)
    (listed,) = await reviewer.until("review_list")
    assert [review["review_id"] for review in listed["reviews"]] == [card["review_id"]]


async def test_a_reviewers_approval_runs_the_write_once_as_the_requester_and_the_conversation_goes_on(
    app: App, connect: Connect
) -> None:
    """The reviewer's approval resolves the review for the reviewers, runs the SMS once, ends the member's card ok, and the member's conversation gets a new answer that read the outcome; a second answer is NotFound."""
    member, reviewer = await connect(), await connect(REVIEWER)
    body = "See you on Monday"
    confirmation, card = await requested(app, member, body)
    app.scripted.model.add("The SMS went out.", match=continuing)

    await review_tool(reviewer.session, uuid.UUID(card["review_id"]), approved=True, note=None)

    resolved = (await reviewer.until("review_resolved"))[-1]
    assert (resolved["review_id"], resolved["status"]) == (card["review_id"], "approved")
    received = await member.until("assistant_end")
    (completed,) = [e for e in received if e["type"] == "tool_call_completed"]
    assert (completed["call_id"], completed["status"]) == (confirmation["call_id"], "ok")
    started = next(e for e in received if e["type"] == "assistant_start")
    assert started["continues"] is True
    assert "The SMS went out." in "".join(e["content"] for e in received if e["type"] == "text_delta")
    assert await sent(app, body) == 1
    with pytest.raises(NotFound) as again:
        await review_tool(reviewer.session, uuid.UUID(card["review_id"]), approved=True, note=None)
    assert again.value.public_message == ANSWERED
    assert await sent(app, body) == 1


async def test_a_rejected_review_runs_nothing_and_ends_the_card_rejected(app: App, connect: Connect) -> None:
    """The reviewer's rejection sends nothing; the member's card ends rejected with the reviewer's note."""
    member, reviewer = await connect(), await connect(REVIEWER)
    body = "Not this one"
    confirmation, card = await requested(app, member, body)
    app.scripted.model.add("The reviewer said no.", match=continuing)

    await review_tool(reviewer.session, uuid.UUID(card["review_id"]), approved=False, note="Wrong number")

    received = await member.until("tool_call_completed")
    assert (received[-1]["call_id"], received[-1]["status"]) == (confirmation["call_id"], "rejected")
    assert "Wrong number" in str(received[-1]["result"])
    await member.until("assistant_end")
    assert await sent(app, body) == 0


async def test_no_one_reviews_their_own_request_nor_another_organizations(app: App, connect: Connect) -> None:
    """A reviewer cannot review their own request (Forbidden), a member without the reviewer permission cannot (Forbidden), another organization's owner cannot see it (NotFound); it stays pending for the others."""
    requester = await connect(REVIEWER)
    _, card = await requested(app, requester, "Careful")
    review_id = uuid.UUID(card["review_id"])
    viewer, foreign = await connect("viewer@acme.test"), await connect("owner@globex.test")

    with pytest.raises(Forbidden):
        await review_tool(requester.session, review_id, approved=True, note=None)
    with pytest.raises(Forbidden):
        await review_tool(viewer.session, review_id, approved=True, note=None)
    with pytest.raises(NotFound):
        await review_tool(foreign.session, review_id, approved=True, note=None)

    owner = await connect("owner@acme.test")
    await list_reviews(owner.session)
    (listed,) = await owner.until("review_list")
    assert [review["review_id"] for review in listed["reviews"]] == [card["review_id"]]
    assert await sent(app, "Careful") == 0
