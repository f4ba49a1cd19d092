"""Conversation titles through the whole server (SPEC §4 step 9).

After the first exchange a background task asks the title model (`SCRIPTED_TITLE_MODEL`) for a title
of at most 60 characters, stores it and sends `title_updated`; whatever the title model does, the
chat is unaffected and the title falls back to the first words of the first user message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.fixtures.server import Client, Vernis, VernisFactory, text_of, types_of
from vernis.model.scripted import SCRIPTED_TITLE_MODEL, Fault, Reply

LONG_MESSAGE = "Could you list every overdue task assigned to the front desk team this week please"
# The first words of LONG_MESSAGE that fit, with an ellipsis for the rest.
LONG_MESSAGE_FALLBACK = "Could you list every overdue task assigned to the front…"


def is_title(body: Mapping[str, Any]) -> bool:
    return body.get("model") == SCRIPTED_TITLE_MODEL


def title_requests(vernis: Vernis) -> list[dict[str, Any]]:
    return [body for body in vernis.scripted.requests if is_title(body)]


async def loaded_title(vernis: Vernis) -> str | None:
    """The title a fresh socket is shown for the member's latest conversation."""
    async with vernis.connect() as client:
        (loaded, *_) = await client.until("history_end")
    assert loaded["type"] == "conversation_loaded"
    title: str | None = loaded["title"]
    return title


async def first_exchange(client: Client, content: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Send the first message; returns its answer's events and the `title_updated` that follows."""
    events = await client.answer(content)
    assert types_of(events)[0] == "conversation_created"
    (title,) = await client.expect("title_updated")
    assert title["conversation_id"] == events[0]["conversation_id"]
    assert title["seq"] > events[-1]["seq"]
    return events, title


async def test_first_exchange_is_titled_and_the_title_is_stored(vernis: Vernis) -> None:
    """After the first exchange the title model is asked once, `title_updated` brings its title, and it is stored."""
    vernis.scripted.add("Tuesday at 10 and Thursday at 2.", match="dentist")
    async with vernis.opened() as client:
        events, title = await first_exchange(client, "please find the dentist appointments for next week")
        assert text_of(events) == "Tuesday at 10 and Thursday at 2."
        assert title["title"] == "Please find the dentist appointments for"
        await client.send("list_conversations")
        (listing,) = await client.expect("conversation_list")
    (request,) = title_requests(vernis)
    assert "tools" not in request
    prompt = request["messages"][-1]["content"]
    assert "please find the dentist appointments for next week" in prompt
    assert "Tuesday at 10 and Thursday at 2." in prompt
    assert listing["conversations"][0]["title"] == title["title"]
    assert await loaded_title(vernis) == title["title"]


async def test_second_exchange_makes_no_new_title(vernis: Vernis) -> None:
    """Only the first exchange of a conversation is titled: the second sends no `title_updated` and asks no title model."""
    async with vernis.opened() as client:
        _, title = await first_exchange(client, "first question about invoices")
        events = await client.answer("second question about refunds")
        assert "title_updated" not in types_of(events)
        await client.silent(0.5)
    assert len(title_requests(vernis)) == 1
    assert await loaded_title(vernis) == title["title"]


@pytest.mark.parametrize(
    "fault",
    [Fault.http(500), Fault.stall(after=1, seconds=30), Fault.error_mid_stream(after=1)],
    ids=["http-500", "stall", "error-object"],
)
async def test_failing_title_model_falls_back_and_never_touches_the_chat(
    vernis_factory: VernisFactory, fault: Fault
) -> None:
    """A title model that fails (500, stall, error object) leaves the answer complete; the title is the first words of the message."""
    async with vernis_factory(llm_max_retries=0, llm_stall_timeout=0.5) as vernis:
        failing = vernis.scripted.add(Reply(fault=fault), match=is_title, times=None)
        vernis.scripted.add("Three tasks are overdue.", match="overdue")
        async with vernis.opened() as client:
            events, title = await first_exchange(client, LONG_MESSAGE)
        assert types_of(events)[:2] == ["conversation_created", "assistant_start"]
        assert "error" not in types_of(events)
        assert text_of(events) == "Three tasks are overdue."
        assert events[-1]["stopped"] is False
        assert failing.hits >= 1
        assert title["title"] == LONG_MESSAGE_FALLBACK
        async with vernis.connect() as client:
            loaded, user, assistant, _ = await client.expect(
                "conversation_loaded", "history_message", "history_message", "history_end"
            )
        assert loaded["title"] == LONG_MESSAGE_FALLBACK
        assert (user["content"], assistant["content"], assistant["status"]) == (
            LONG_MESSAGE,
            "Three tasks are overdue.",
            "complete",
        )


async def test_a_long_title_is_cut_to_60_characters(vernis: Vernis) -> None:
    """A title model answer longer than 60 characters becomes a title of at most 60, stored as sent."""
    long_title = "Quarterly review of every overdue dental hygiene appointment reminder across all clinics"
    assert len(long_title) > 60
    vernis.scripted.add(long_title, match=is_title)
    async with vernis.opened() as client:
        _, title = await first_exchange(client, "review the reminders")
    assert 0 < len(title["title"]) <= 60
    assert title["title"].startswith("Quarterly review of every overdue dental hygiene")
    assert await loaded_title(vernis) == title["title"]


async def test_title_reaches_every_socket_showing_the_conversation(vernis: Vernis) -> None:
    """`title_updated` goes to a second tab of the member that shows the conversation, not only to the one that asked."""
    # A slow title reply leaves time for the second tab to open the conversation first.
    vernis.scripted.add(Reply("Front desk tasks", chunk_delay=0.25), match=is_title)
    async with vernis.opened() as first:
        events = await first.answer("what is on the front desk list")
        conversation_id = events[0]["conversation_id"]
        async with vernis.connect(query=f"?conversation_id={conversation_id}") as second:
            opening = await second.until("history_end")
            assert opening[0]["conversation_id"] == conversation_id
            assert opening[0]["title"] is None
            (seen_first,) = await first.expect("title_updated")
            (seen_second,) = await second.expect("title_updated")
    assert seen_first["title"] == seen_second["title"] == "Front desk tasks"
    assert seen_first["seq"] == seen_second["seq"]
