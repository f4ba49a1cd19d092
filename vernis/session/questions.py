"""`answer_question`: the user answers the form of an `ask_user` call, or cancels it (SPEC §17).

The answers are checked against the questions (`vernis.tools.asking.check_answers`): one that does
not fit gets `invalid_message` naming the question, which stays open. Text answers pass the guards
like a message. Then the new answer is admitted (`continue_answer`, through `Gate.admit` with this
connection's rate window), and only once it is, the question is resolved by compare-and-set (two
tabs answering at once: one wins, the other gets `not_found`): the answers become the `ask_user`
call's result, in the stored call (history, the model's window) and on every socket showing the
conversation (`tool_call_completed`), and the new answer reads them. A cancelled form goes on the
same way, the model told that the user declined. A question past its expiry
(`VERNIS_APPROVAL_TTL`) ends as `expired` and is `not_found`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any
from uuid import UUID

from vernis.conversation import events
from vernis.exceptions import InvalidMessage, MessageBlocked, NotFound
from vernis.runtime import Services
from vernis.session.send import Asker, continue_answer
from vernis.store.models import QuestionStatus, utcnow
from vernis.tools import error_envelope
from vernis.tools.asking import ASK_USER, check_answers
from vernis.tools.questions import QuestionInfo, QuestionService

if TYPE_CHECKING:
    from vernis.session.state import Session

__all__ = ["BlockedAnswer", "answer_question", "expire_questions"]

logger = logging.getLogger("vernis.questions")

ANSWERED = "This question was already answered."
EXPIRED = "This question has expired; ask the assistant again."
UNKNOWN = "No such question."
# Bounds of the time between two sweeps for overdue questions, in seconds.
EXPIRY_SWEEP_MIN = 0.25
EXPIRY_SWEEP_MAX = 60.0


class BlockedAnswer(MessageBlocked):
    """A guard stopped a text answer: nothing was stored or sent; `question_id` names its question."""

    def __init__(self, question_id: str, public_message: str | None) -> None:
        super().__init__(public_message)
        self.question_id = question_id


def _questions(services: Services) -> QuestionService:
    assert services.questions is not None, "the app sets the question service"
    return services.questions


async def answer_question(
    session: Session, question_id: UUID, answers: dict[str, Any] | None, cancelled: bool
) -> None:
    services, member = session.services, session.member
    questions = _questions(services)
    if answers is None and not cancelled:
        raise InvalidMessage("Invalid `answer_question` command: give `answers`, or `cancelled: true`.")
    question = await questions.get(question_id, member.id, member.organization_id)
    if question is None:
        raise NotFound(UNKNOWN)
    if question.status != QuestionStatus.PENDING:
        raise NotFound(ANSWERED)
    if question.expires_at <= utcnow():
        await _expire(services, question)
        raise NotFound(EXPIRED)

    notes: list[str] = []
    checked: dict[str, Any] | None = None
    if not cancelled:
        checked = check_answers(question.questions, answers or {})
        for spec in question.questions:
            value = checked.get(spec.id)
            if not isinstance(value, str) or spec.type != "text":
                continue
            # Text the user typed reaches the model: it passes the guards like a message.
            verdict = await services.guards.check_input(value, member, question.conversation_id)
            if verdict.blocked:
                raise BlockedAnswer(spec.id, verdict.user_message(f"the answer to {spec.label!r}"))
            checked[spec.id] = verdict.text
            notice = verdict.model_notice()
            if notice is not None:
                notes.append(notice)

    async def settle() -> None:
        if not await questions.resolve(question.id, checked):
            current = await questions.get(question.id, member.id, member.organization_id)
            expired = current is not None and current.status == QuestionStatus.PENDING
            if expired:
                await _expire(services, question)
            raise NotFound(EXPIRED if expired else ANSWERED)
        if checked is None:
            envelope = error_envelope(
                "cancelled",
                "The user closed the form without answering.",
                hint="Do not ask the same questions again unasked; go on without them or ask in words.",
            )
            await _end_card(services, question, "rejected", envelope)
        else:
            await _end_card(services, question, "ok", {"ok": True, "data": {"answers": checked}})

    notice = (
        "The user has answered the questions you asked with ask_user: the answers are the result of "
        "that call above. Go on with what they asked for, using them; do not ask them again."
        if checked is not None
        else "The user closed the form of your ask_user call without answering (its result above). "
        "Go on without those answers, or ask in a sentence if you cannot."
    )
    await continue_answer(
        services,
        Asker.of(session),
        question.conversation_id,
        key=f"question:{question.id}",
        notice="\n\n".join([notice, *notes]),
        rate=session.rate,
        admitted=settle,
        trace_parent=question.trace_parent,
    )


async def expire_questions(services: Services) -> None:
    """Runs for as long as the app serves: an unanswered question's card ends as `expired` on time
    (a quarter of `VERNIS_APPROVAL_TTL` late at most, and never more than a minute), on every
    socket showing it and in history, even when nobody tries to answer it."""
    questions = _questions(services)
    interval = min(EXPIRY_SWEEP_MAX, max(EXPIRY_SWEEP_MIN, questions.ttl / 4))
    while True:
        await asyncio.sleep(interval)
        try:
            for question in await questions.overdue():
                await _expire(services, question)
        except Exception:
            # The database is out of reach (SPEC §10): the next sweep tries again.
            logger.warning("overdue questions could not be expired now", exc_info=True)


async def _expire(services: Services, question: QuestionInfo) -> None:
    """The question expired: its card ends as `expired` (once, whoever finds it)."""
    if not await _questions(services).expire(question.id):
        return
    envelope = error_envelope(
        "expired",
        "The user did not answer these questions in time.",
        hint="Ask again only if the user still wants it.",
    )
    await _end_card(services, question, "expired", envelope)


async def _end_card(
    services: Services, question: QuestionInfo, status: events.ToolStatus, envelope: dict[str, Any]
) -> None:
    """The `ask_user` card ends: in the stored tool call (history replay, the model's next window)
    and on every socket showing the conversation."""
    await services.approvals.update_stored_call(
        question.message_id, question.call_id, status=status, result=envelope
    )
    services.windows.discard(question.conversation_id)
    await services.hub.touch(question.conversation_id)
    services.hub.publish(
        question.conversation_id,
        events.ToolCallCompleted(
            call_id=question.call_id, tool_name=ASK_USER.name, status=status, result=envelope
        ),
    )
