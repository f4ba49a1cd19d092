"""An approval in the chat needs an explicit approval (SPEC §5, §24), and distrust stays with the
conversation: through a real server, the real `openai` client and the scripted model."""

from __future__ import annotations

import pytest

from tests.data import add_notification, is_read
from tests.e2e.test_approvals import audit, mark_read, preview
from tests.e2e.test_guards import PLANTED, add_contact_with_note
from tests.fixtures.server import Vernis
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis.tools.consent import approves


@pytest.mark.parametrize("answer", ["thanks", "no, leave it unread", "what would that change?"])
async def test_a_confirmed_call_after_a_message_that_does_not_approve_writes_nothing(
    vernis: Vernis, answer: str
) -> None:
    """After a preview, a later message that is not an approval ("thanks", a no, a question) ends the preview unapproved (the conversation moved on, SPEC §24) and lets no confirmed call of the model run: nothing written, the refusal audited, a late button approval not_found."""
    notification_id = await add_notification(vernis)
    async with vernis.opened() as client:
        confirmation, _ = await preview(client, vernis, notification_id)
        vernis.scripted.add(mark_read(notification_id, confirmed=True), match=answer)
        events = await client.answer(answer)
        done = [e for e in events if e["type"] == "tool_call_completed"]
        assert [e["status"] for e in done] == ["expired", "error"]
        assert done[0]["result"]["error"]["code"] == "superseded"
        assert done[1]["result"]["error"]["code"] == "confirmation_required"
        assert not await is_read(vernis, notification_id)
        # The card's button no longer decides: the conversation moved on.
        await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True)
        (late,) = [e for e in await client.until("error") if e["type"] == "error"]
        assert late["code"] == "not_found"
    assert not await is_read(vernis, notification_id)
    assert await audit(vernis) == [("mark_notification_read", "refused")]


async def test_a_plain_yes_in_the_chat_runs_the_previewed_write(vernis: Vernis) -> None:
    """After a preview, "yes, go ahead" lets the model's identical confirmed call run the write once."""
    notification_id = await add_notification(vernis)
    async with vernis.opened() as client:
        await preview(client, vernis, notification_id)
        vernis.scripted.add(mark_read(notification_id, confirmed=True), match="yes, go ahead")
        events = await client.answer("yes, go ahead")
    statuses = [e["status"] for e in events if e["type"] == "tool_call_completed"]
    assert "ok" in statuses
    assert await is_read(vernis, notification_id)


async def test_distrust_stays_on_the_conversation_and_every_later_card_says_so(vernis: Vernis) -> None:
    """A planted instruction read in one answer puts its caution on the card of a write proposed in a later answer of the same conversation."""
    contact_id = await add_contact_with_note(vernis, PLANTED)
    notification_id = await add_notification(vernis)
    chat = vernis.settings.llm_model
    vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("get_contact_details", {"contact_id": contact_id})]),
        match="show mallory",
    )
    vernis.scripted.add(
        "Here she is.", match=lambda body: body["model"] == chat and body["messages"][-1]["role"] == "tool"
    )
    async with vernis.opened() as client:
        events = await client.answer("show mallory")
        read = [e for e in events if e["type"] == "tool_call_completed"]
        assert read[0]["result"]["untrusted"]
        vernis.scripted.add(mark_read(notification_id), match="mark it read")
        events = await client.answer("mark it read please")
    (confirmation,) = [e for e in events if e["type"] == "confirmation_required"]
    assert any("Caution" in warning for warning in confirmation["preview"]["warnings"])


def test_what_counts_as_an_approval() -> None:
    """Short affirmatives approve; thanks, questions, refusals, hesitations and long requests do not."""
    for text in ("yes", "Yes, do it", "ok", "Okay, please go ahead", "sure", "👍", "yes please", "confirm"):
        assert approves(text), text
    for text in (
        "thanks",
        "no",
        "no, don't",
        "yes but change the date first",
        "wait",
        "what would it cost?",
        "",
        "ok so now find every contact in Berlin and send each of them a text about the new prices",
    ):
        assert not approves(text), text
