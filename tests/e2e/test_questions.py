"""Questions (SPEC §17): the model asks with `ask_user`, the user answers in a form, end to end."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.data import database
from tests.fixtures.server import Client, Vernis, VernisFactory, text_of, types_of
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis_crm.demo.scripted import demo_scenarios

BOTH_BACKENDS = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)

QUESTIONS: list[dict[str, Any]] = [
    {"id": "topic", "label": "What is it about?", "type": "text", "required": True},
    {"id": "channel", "label": "How?", "type": "choice", "options": ["Call", "SMS"], "required": True},
    {"id": "prepare", "label": "Ready beforehand?", "type": "multi_choice", "options": ["Notes", "Invoice"]},
    {"id": "minutes", "label": "How long?", "type": "number"},
    {"id": "day", "label": "Which day?", "type": "date"},
    {"id": "remind", "label": "Remind me?", "type": "boolean"},
]
VALID = {
    "topic": "Renewal",
    "channel": "SMS",
    "prepare": ["Invoice", "Notes"],
    "minutes": 15,
    "day": "2026-12-01",
    "remind": True,
}


def answered(body: Mapping[str, Any]) -> bool:
    """The request of the answer that follows the user's form."""
    system = str(body["messages"][0]["content"])
    return "you asked with ask_user" in system or "form of your ask_user call" in system


async def sql(vernis: Vernis, statement: str) -> list[Any]:
    async with database(vernis) as engine, engine.begin() as connection:
        return list((await connection.execute(sa.text(statement))).all())


async def ask(
    vernis: Vernis, client: Client, questions: list[dict[str, Any]] | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The model asks `questions` (the six types by default) in the conversation's first answer:
    its question_required event and the answer's events, read through the title."""
    tag = uuid.uuid4().hex[:8]
    arguments = {"title": "Follow-up", "questions": questions or QUESTIONS}
    vernis.scripted.add(
        Reply("A few questions first.", tool_calls=[ScriptedToolCall("ask_user", arguments)]), match=tag
    )
    events = await client.answer(f"plan it {tag}")
    events += await client.until("title_updated")
    (question,) = [e for e in events if e["type"] == "question_required"]
    return question, events


async def test_the_question_is_shown_as_a_form_and_the_answer_waits(vernis: Vernis) -> None:
    """ask_user stores a pending question, its card says needs_answer, question_required carries the questions, and the answer ends without asking the model again."""
    async with vernis.opened() as client:
        requests = len(vernis.scripted.requests)
        question, events = await ask(vernis, client)
    kinds = types_of(events)
    assert (
        kinds.index("tool_call_completed") < kinds.index("question_required") < kinds.index("assistant_end")
    )
    completed = next(e for e in events if e["type"] == "tool_call_completed")
    assert completed["status"] == "needs_answer"
    assert completed["call_id"] == question["call_id"]
    assert question["title"] == "Follow-up"
    assert [q["id"] for q in question["questions"]] == [q["id"] for q in QUESTIONS]
    assert question["questions"][0]["required"] is True
    assert question["questions"][1]["options"] == ["Call", "SMS"]
    assert "expires_at" in question
    # The question ended the answer: one request for the answer (and one for the title), no second round.
    chat = [r for r in vernis.scripted.requests[requests:] if r.get("tools")]
    assert len(chat) == 1
    assert any(t["function"]["name"] == "ask_user" for t in chat[0]["tools"])
    rows = await sql(vernis, "SELECT status FROM assistant_question")
    assert [row.status for row in rows] == ["pending"]


@BOTH_BACKENDS
async def test_a_valid_answer_becomes_the_result_and_the_assistant_goes_on(vernis: Vernis) -> None:
    """Valid answers end the card as ok with the answers as the result, a new answer continues in the same conversation and its model reads them; answering twice is not_found."""
    async with vernis.opened() as client:
        question, events = await ask(vernis, client)
        conversation_id = next(e for e in events if e["type"] == "assistant_start")["conversation_id"]
        vernis.scripted.add("Booked: an SMS about the renewal.", match=answered)
        await client.send("answer_question", question_id=question["question_id"], answers=VALID)
        events = await client.until("assistant_end")
        assert types_of(events)[:2] == ["tool_call_completed", "assistant_start"]
        done, start = events[0], events[1]
        assert done["call_id"] == question["call_id"]
        assert done["status"] == "ok"
        # Normalised: the multiple choice in the order offered.
        assert done["result"]["data"]["answers"] == VALID | {"prepare": ["Notes", "Invoice"]}
        assert start["conversation_id"] == conversation_id
        assert start["continues"] is True
        assert text_of(events) == "Booked: an SMS about the renewal."

        await client.send("answer_question", question_id=question["question_id"], answers=VALID)
        (again,) = await client.expect("error")
        assert again["code"] == "not_found"
    request = next(r for r in vernis.scripted.requests if answered(r))
    results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    assert '"answers"' in results[-1]
    assert "Renewal" in results[-1]
    rows = await sql(vernis, "SELECT status FROM assistant_question")
    assert [row.status for row in rows] == ["answered"]


async def test_answers_that_do_not_fit_are_refused_naming_the_question_and_it_stays_open(
    vernis: Vernis,
) -> None:
    """A missing required answer, an option not offered, a wrong type and an unknown question are each invalid_message naming the question; nothing continues and a valid answer still goes through."""
    async with vernis.opened() as client:
        question, _ = await ask(vernis, client)
        question_id = question["question_id"]
        wrong = [
            ({k: v for k, v in VALID.items() if k != "topic"}, "topic"),
            (VALID | {"topic": "   "}, "topic"),
            (VALID | {"channel": "Fax"}, "channel"),
            (VALID | {"prepare": ["Notes", "Lunch"]}, "prepare"),
            (VALID | {"minutes": "fifteen"}, "minutes"),
            (VALID | {"minutes": True}, "minutes"),
            (VALID | {"day": "next Tuesday"}, "day"),
            (VALID | {"remind": "yes"}, "remind"),
            (VALID | {"colour": "red"}, "colour"),
        ]
        for answers, named in wrong:
            await client.send("answer_question", question_id=question_id, answers=answers)
            (error,) = await client.expect("error")
            assert error["code"] == "invalid_message", (answers, error)
            assert error["question_id"] == named, (answers, error)
            assert repr(named) in error["message"]
        await client.send("answer_question", question_id=question_id)
        (neither,) = await client.expect("error")
        assert neither["code"] == "invalid_message"
        rows = await sql(vernis, "SELECT status FROM assistant_question")
        assert [row.status for row in rows] == ["pending"]

        vernis.scripted.add("Thanks.", match=answered)
        await client.send("answer_question", question_id=question_id, answers=VALID)
        events = await client.until("assistant_end")
    assert next(e for e in events if e["type"] == "tool_call_completed")["status"] == "ok"


async def test_two_tabs_answering_at_once_resolve_it_once(vernis: Vernis) -> None:
    """Two sockets answering the same question at the same moment: one continuation runs, with the first tab's or the second's answers, and the other tab is refused."""
    async with vernis.opened() as first, vernis.opened() as second:
        question, _ = await ask(vernis, first)
        vernis.scripted.add("Thanks.", match=answered)
        await asyncio.gather(
            first.send("answer_question", question_id=question["question_id"], answers=VALID),
            second.send(
                "answer_question", question_id=question["question_id"], answers=VALID | {"topic": "Other"}
            ),
        )
        # The second tab shows no conversation (it opened before there was one): it gets only its error.
        seen = await first.until("assistant_end")
        errors = [e for e in seen if e["type"] == "error"]
        if not errors:
            errors = await second.expect("error")
    assert [e["code"] in {"not_found", "response_in_progress"} for e in errors] == [True]
    completed = [e for e in seen if e["type"] == "tool_call_completed"]
    assert len(completed) == 1
    rows = await sql(
        vernis, "SELECT count(*) FROM assistant_message WHERE client_message_id LIKE 'vernis:continue:%'"
    )
    assert rows[0][0] == 1


async def test_another_members_or_an_unknown_question_is_not_found(vernis: Vernis) -> None:
    """Another member's question, even in the same organization, and an unknown id are not_found, as foreign ids are elsewhere; the owner's question stays open."""
    async with vernis.opened() as client:
        question, _ = await ask(vernis, client)
    async with vernis.opened("admin@acme.test") as other:
        await other.send("answer_question", question_id=question["question_id"], answers=VALID)
        (foreign,) = await other.expect("error")
        await other.send("answer_question", question_id=str(uuid.uuid4()), cancelled=True)
        (unknown,) = await other.expect("error")
    assert foreign["code"] == unknown["code"] == "not_found"
    assert foreign["message"] == unknown["message"]
    rows = await sql(vernis, "SELECT status FROM assistant_question")
    assert [row.status for row in rows] == ["pending"]


async def test_a_cancelled_form_tells_the_model_and_the_assistant_goes_on(vernis: Vernis) -> None:
    """Cancelling ends the card as rejected with the code cancelled, and a new answer whose model read that the user declined."""
    async with vernis.opened() as client:
        question, _ = await ask(vernis, client)
        vernis.scripted.add("All right, never mind.", match=answered)
        await client.send("answer_question", question_id=question["question_id"], cancelled=True)
        events = await client.until("assistant_end")
    done = events[0]
    assert done["type"] == "tool_call_completed"
    assert done["status"] == "rejected"
    assert done["result"]["error"]["code"] == "cancelled"
    assert "assistant_start" in types_of(events)
    request = next(r for r in vernis.scripted.requests if answered(r))
    assert '"cancelled"' in [m["content"] for m in request["messages"] if m["role"] == "tool"][-1]
    rows = await sql(vernis, "SELECT status FROM assistant_question")
    assert [row.status for row in rows] == ["cancelled"]


@BOTH_BACKENDS
async def test_a_pending_question_comes_back_on_reload_then_its_answer(vernis: Vernis) -> None:
    """History replay redraws the open form (the call's status needs_answer and its question record); after the answer, it shows the answers and the answer that followed."""
    async with vernis.opened() as client:
        question, _ = await ask(vernis, client)
    async with vernis.connect() as client:
        history = await client.until("history_end")
        (asking,) = [e for e in history if e["type"] == "history_message" and e["role"] == "assistant"]
        (call,) = asking["tool_calls"]
        assert call["tool_name"] == "ask_user"
        assert call["status"] == "needs_answer"
        assert call["question"]["question_id"] == question["question_id"]
        assert call["question"]["questions"] == question["questions"]
        assert call["question"]["title"] == "Follow-up"
        vernis.scripted.add("Noted.", match=answered)
        await client.send("answer_question", question_id=question["question_id"], answers=VALID)
        await client.until("assistant_end")
    async with vernis.connect() as client:
        history = await client.until("history_end")
    answers = [e for e in history if e["type"] == "history_message" and e["role"] == "assistant"]
    (call,) = answers[0]["tool_calls"]
    assert call["status"] == "ok"
    assert call["result"]["data"]["answers"]["topic"] == "Renewal"
    assert call["question"]["question_id"] == question["question_id"]
    assert answers[1]["continues"] is True
    assert answers[1]["content"] == "Noted."


async def test_an_unanswered_question_expires_by_itself_and_is_then_not_found(
    vernis_factory: VernisFactory,
) -> None:
    """A question left unanswered past VERNIS_APPROVAL_TTL ends as expired by itself, live and in history; answering it then is not_found and no answer follows."""
    async with vernis_factory(approval_ttl=0.5) as vernis, vernis.opened() as client:
        question, events = await ask(vernis, client)
        ended = [e for e in events if e["type"] == "tool_call_completed" and e["status"] == "expired"]
        if not ended:
            ended = (await client.until("tool_call_completed"))[-1:]
        assert ended[0]["call_id"] == question["call_id"]
        assert ended[0]["status"] == "expired"
        assert ended[0]["result"]["error"]["code"] == "expired"
        await client.send("answer_question", question_id=question["question_id"], answers=VALID)
        (error,) = await client.expect("error")
        assert error["code"] == "not_found"
        await client.send("ping")
        await client.expect("pong")
        async with vernis.connect() as again:
            history = await again.until("history_end")
    (asking,) = [e for e in history if e["type"] == "history_message" and e["role"] == "assistant"]
    assert asking["tool_calls"][0]["status"] == "expired"
    rows = await sql(vernis, "SELECT status FROM assistant_question")
    assert [row.status for row in rows] == ["expired"]


async def test_a_text_answer_passes_the_guards(vernis: Vernis) -> None:
    """A text answer holding a secret key is blocked like a message (message_blocked naming the question, nothing stored), and the question stays open."""
    async with vernis.opened() as client:
        question, _ = await ask(vernis, client)
        await client.send(
            "answer_question",
            question_id=question["question_id"],
            answers=VALID | {"topic": "Save AKIAIOSFODNN7EXAMPLE"},
        )
        (error,) = await client.expect("error")
    assert error["code"] == "message_blocked"
    assert error["question_id"] == "topic"
    assert "AKIA" not in error["message"]
    rows = await sql(vernis, "SELECT status, answers_json FROM assistant_question")
    assert [(row.status, row.answers_json) for row in rows] == [("pending", None)]


async def test_questions_the_model_gets_wrong_are_its_error_and_nothing_is_asked(vernis: Vernis) -> None:
    """Nine questions, a choice without options, or two questions with one id: the model reads invalid_arguments, no question is stored or shown."""
    bad = [
        [{"id": f"q{n}", "label": "?", "type": "text"} for n in range(9)],
        [{"id": "pick", "label": "Which?", "type": "choice"}],
        [{"id": "same", "label": "A?", "type": "text"}, {"id": "same", "label": "B?", "type": "number"}],
    ]
    async with vernis.opened() as client:
        for questions in bad:
            tag = uuid.uuid4().hex[:8]
            vernis.scripted.add(
                Reply(tool_calls=[ScriptedToolCall("ask_user", {"questions": questions})]), match=tag
            )
            events = await client.answer(f"ask {tag}")
            assert "question_required" not in types_of(events)
            completed = next(e for e in events if e["type"] == "tool_call_completed")
            assert completed["status"] == "error"
            assert completed["result"]["error"]["code"] == "invalid_arguments"
    assert await sql(vernis, "SELECT id FROM assistant_question") == []


async def test_ask_user_false_does_not_offer_the_tool(vernis_factory: VernisFactory, tmp_path: Path) -> None:
    """With [assistant] ask_user = false the model is not offered ask_user (it is by default), and a call to it anyway is an unknown tool."""
    config = tmp_path / "vernis.toml"
    config.write_text("[assistant]\nask_user = false\n")
    async with vernis_factory(config=config) as vernis, vernis.opened() as client:
        vernis.scripted.add(
            Reply(tool_calls=[ScriptedToolCall("ask_user", {"questions": QUESTIONS[:1]})]), match="ask"
        )
        events = await client.answer("ask away")
    request = next(r for r in reversed(vernis.scripted.requests) if r.get("tools"))
    offered = {tool["function"]["name"] for tool in request["tools"]}
    assert "ask_user" not in offered
    assert "get_notifications" in offered
    assert "question_required" not in types_of(events)
    completed = next(e for e in events if e["type"] == "tool_call_completed")
    assert completed["result"]["error"]["code"] == "unknown_tool"


async def test_the_offline_demo_asks_and_reads_the_answers(vernis: Vernis) -> None:
    """The scripted demo model (vernis serve --demo --scripted-model) asks a form on "ask me a few questions" and its next answer quotes what the user answered."""
    vernis.scripted.scenarios = demo_scenarios()
    async with vernis.opened() as client:
        events = await client.answer("Ask me a few questions about the follow-up call")
        (question,) = [e for e in events if e["type"] == "question_required"]
        answers = {"topic": "Renewal", "channel": "Call"}
        await client.send("answer_question", question_id=question["question_id"], answers=answers)
        events = await client.until("assistant_end")
    assert next(e for e in events if e["type"] == "tool_call_completed")["status"] == "ok"
    text = text_of(events)
    assert "Renewal" in text
    assert "Call" in text
