"""`regenerate` (SPEC §3): the last user message answered again, the earlier answer kept as an
earlier version in the history, and only the newest in what the model reads."""

from __future__ import annotations

from typing import Any

from tests.e2e.test_llm_faults import chat_about, first_answer, replay
from tests.fixtures.server import Vernis, text_of
from vernis.model.scripted import Reply
from vernis.model.scripted.scenarios import last_user_text


def chat_requests(vernis: Vernis) -> list[dict[str, Any]]:
    return [body for body in vernis.scripted.requests if body.get("tools")]


async def test_regenerate_keeps_the_earlier_answer_and_the_model_reads_only_the_newest(
    vernis: Vernis,
) -> None:
    """The answer is written again (the first one stays stored before it); the model is asked without the first, and a follow-up sees only the second."""
    vernis.scripted.add(Reply("First version."), match=chat_about("capital"), times=1)
    vernis.scripted.add(Reply("Second version."), match=chat_about("capital"), times=1)
    vernis.scripted.add(Reply("Follow-up answer."), match=chat_about("why"))
    async with vernis.opened() as client:
        await first_answer(client, "what is the capital?")
        await client.send("regenerate", client_message_id="regen-1")
        events = await client.until("assistant_end")
        assert events[0]["type"] == "assistant_start"
        assert text_of(events) == "Second version."
        # The regenerate request: the user message last, the first version nowhere.
        asked = chat_requests(vernis)[-1]
        assert last_user_text(asked) == "what is the capital?"
        assert asked["messages"][-1]["role"] == "user"
        assert "First version." not in str(asked["messages"])
        await client.answer("why?")
        follow_up = chat_requests(vernis)[-1]["messages"]
        assert "Second version." in str(follow_up)
        assert "First version." not in str(follow_up)
    history = await replay(vernis)
    assert [(m["role"], m["content"], m["status"]) for m in history] == [
        ("user", "what is the capital?", "complete"),
        ("assistant", "First version.", "complete"),
        ("assistant", "Second version.", "complete"),
        ("user", "why?", "complete"),
        ("assistant", "Follow-up answer.", "complete"),
    ]


async def test_a_repeated_regenerate_is_answered_once(vernis: Vernis) -> None:
    """The same client_message_id twice (a resend after a cut) writes the answer again once."""
    vernis.scripted.add(Reply("One."), match=chat_about("count"), times=1)
    vernis.scripted.add(Reply("Two."), match=chat_about("count"), times=1)
    async with vernis.opened() as client:
        await first_answer(client, "count please")
        await client.send("regenerate", client_message_id="same")
        await client.until("assistant_end")
        await client.send("regenerate", client_message_id="same")
        await client.silent(0.5)
    history = await replay(vernis)
    assert [m["content"] for m in history] == ["count please", "One.", "Two."]


async def test_regenerate_without_an_answer_is_refused(vernis: Vernis) -> None:
    """A pending conversation has nothing to write again: `not_found`, and nothing is stored."""
    async with vernis.opened() as client:
        await client.send("new_conversation")
        await client.until("history_end")
        await client.send("regenerate")
        (error,) = await client.expect("error")
        assert error["code"] == "not_found"
    assert vernis.scripted.requests == []


async def test_edit_and_resend_keeps_the_original_exchange_as_an_earlier_version(vernis: Vernis) -> None:
    """The last user message edited: the original exchange stays stored as superseded, the edited one is answered, and the model never reads the original."""
    vernis.scripted.add(Reply("About Tuesday."), match=chat_about("tuesday"))
    vernis.scripted.add(Reply("About Wednesday."), match=chat_about("wednesday"))
    vernis.scripted.add(Reply("Noted."), match=chat_about("thanks"))
    async with vernis.opened() as client:
        events = await first_answer(client, "book me on tuesday")
        answer_id = next(e for e in events if e["type"] == "assistant_start")["message_id"]
    history = await replay(vernis)
    user_id = history[0]["message_id"]
    async with vernis.connect() as client:
        await client.until("history_end")
        # Only the last user message: an unknown id is refused and changes nothing.
        await client.send(
            "edit_message", message_id=answer_id.replace(answer_id[:8], "00000000"), content="x"
        )
        (error,) = await client.expect("error")
        assert error["code"] == "not_found"
        await client.send(
            "edit_message", message_id=user_id, content="book me on wednesday", client_message_id="e1"
        )
        events = await client.until("assistant_end")
        assert text_of(events) == "About Wednesday."
        asked = chat_requests(vernis)[-1]["messages"]
        assert last_user_text(chat_requests(vernis)[-1]) == "book me on wednesday"
        assert "tuesday" not in str(asked[1:])
        # Identified by its answer's id (a client that saw the message live), it can be edited again.
        new_answer = next(e for e in events if e["type"] == "assistant_start")["message_id"]
        await client.answer("thanks")
        follow_up = chat_requests(vernis)[-1]["messages"]
        assert "About Wednesday." in str(follow_up)
        assert "tuesday" not in str(follow_up[1:])
        await client.send("edit_message", message_id=new_answer, content="too late")
        (error,) = await client.expect("error")
        assert error["code"] == "not_found"
    history = await replay(vernis)
    assert [(m["role"], m["content"], m["status"]) for m in history] == [
        ("user", "book me on tuesday", "superseded"),
        ("assistant", "About Tuesday.", "superseded"),
        ("user", "book me on wednesday", "complete"),
        ("assistant", "About Wednesday.", "complete"),
        ("user", "thanks", "complete"),
        ("assistant", "Noted.", "complete"),
    ]


async def test_an_edit_over_the_limit_is_refused(vernis: Vernis) -> None:
    """An edited text over 8,000 characters gets `message_too_long`; nothing changes."""
    vernis.scripted.add(Reply("Fine."), match=chat_about("short"))
    async with vernis.opened() as client:
        events = await first_answer(client, "short question")
        answer_id = next(e for e in events if e["type"] == "assistant_start")["message_id"]
        await client.send("edit_message", message_id=answer_id, content="x" * 8001)
        (error,) = await client.expect("error")
        assert error["code"] == "message_too_long"
    history = await replay(vernis)
    assert [m["status"] for m in history] == ["complete", "complete"]
