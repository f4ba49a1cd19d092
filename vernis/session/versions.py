"""`regenerate` and `edit_message` (SPEC §3): the last exchange written again, the earlier version
kept.

- `regenerate` answers the last user message again. The new answer is appended right after the
  earlier one, so an assistant message directly followed by another assistant message is an earlier
  version of it (every other answer is stored right after its user message).
- `edit_message` replaces the last user message: the earlier exchange (that message and its answers)
  stays stored, marked `superseded`, and the edited message and its answer follow it.

History replays every version; the model's window keeps only the newest (`WindowCache.build`). One
answer at a time per conversation holds as for a `user_message`: the same admission (limits, quotas,
lease; `vernis.answers.admission`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from vernis.answers.admission import Admission
from vernis.conversation.store import DuplicateClientMessage, MessageUpdate, StoredMessage
from vernis.conversation.window import WindowEntry
from vernis.exceptions import MessageBlocked, NotFound, ResponseInProgress
from vernis.ids import random_uuid
from vernis.session.send import start_answer
from vernis.store.models import MessageRole, MessageStatus

if TYPE_CHECKING:
    from vernis.conversation.store import ConversationInfo
    from vernis.session.state import Session

__all__ = ["NOTHING_TO_REGENERATE", "ONLY_THE_LAST", "edit_message", "regenerate"]

NOTHING_TO_REGENERATE = "There is no answer to write again here yet."
ONLY_THE_LAST = "Only your last message can be edited."


async def regenerate(session: Session, client_message_id: str | None) -> None:
    if await _seen(session, client_message_id):
        return
    conversation = session.conversation
    if conversation is None:
        raise NotFound(NOTHING_TO_REGENERATE)
    services, settings = session.services, session.settings
    store = services.store
    # It costs a model answer like a message: the same admission (vernis.answers.admission).
    admission = await services.gate.admit(session.member, session.rate, conversation.id)
    message_id = random_uuid()
    try:
        live = await _current(session, conversation)
        last_user = _last_user(live)
        answers = live[last_user + 1 :] if last_user is not None else []
        if last_user is None or not answers:
            raise NotFound(NOTHING_TO_REGENERATE)
        if any(m.status == MessageStatus.STREAMING for m in answers):
            raise ResponseInProgress()
        try:
            await store.add_message(
                conversation.id,
                MessageRole.ASSISTANT,
                "",
                message_id=message_id,
                status=MessageStatus.STREAMING,
                client_message_id=client_message_id,
                model=settings.chat_model,
            )
        except DuplicateClientMessage:
            await admission.release(conversation.id)
            return
    except BaseException:
        await admission.release(conversation.id)
        raise
    # The window ends with the user message: the earlier versions of its answer stay out.
    await _answer(
        session, conversation, live[: last_user + 1], None, message_id, admission, live[last_user].created_at
    )


async def edit_message(
    session: Session, message_id: UUID, content: str, client_message_id: str | None
) -> None:
    if await _seen(session, client_message_id):
        return
    conversation = session.conversation
    if conversation is None:
        raise NotFound(ONLY_THE_LAST)
    services, settings = session.services, session.settings
    store = services.store
    admission = await services.gate.admit(session.member, session.rate, None)
    # The guards (vernis.guards), as for a new message: before anything is stored or sent.
    verdict = await services.guards.check_input(content, session.member, conversation.id)
    if verdict.blocked:
        raise MessageBlocked(verdict.user_message())
    content = verdict.text
    answer_id = random_uuid()
    await admission.lease(conversation.id)
    try:
        live = await _current(session, conversation)
        last_user = _last_user(live)
        # The last user message, named by its id (or by its answer's, for a client that only saw
        # it live: its own id is not sent back).
        if last_user is None or message_id not in {m.id for m in live[last_user:]}:
            raise NotFound(ONLY_THE_LAST)
        if any(m.status == MessageStatus.STREAMING for m in live[last_user:]):
            raise ResponseInProgress()
        # The earlier exchange stays as the earlier version; the edited one follows it.
        await store.supersede(conversation.id, live[last_user].position)
        try:
            user = await store.add_exchange(
                conversation.id,
                content,
                answer_id=answer_id,
                model=settings.chat_model,
                client_message_id=client_message_id,
            )
        except DuplicateClientMessage:
            await admission.release(conversation.id)
            return
        attachments = session.services.attachments
        if attachments is not None:
            # The edited message carries the files of the one it replaces (SPEC §21).
            replaced = live[last_user].id
            await attachments.link(user.id, (await attachments.of_messages([replaced])).get(replaced, []))
    except BaseException:
        await admission.release(conversation.id)
        raise
    await _answer(
        session,
        conversation,
        live[:last_user],
        WindowEntry(MessageRole.USER, content, message_id=user.id),
        answer_id,
        admission,
        user.created_at,
        notices=[verdict.model_notice()],
    )


# --- shared -----------------------------------------------------------------------------------------


async def _seen(session: Session, client_message_id: str | None) -> bool:
    """A command with this `client_message_id` was already carried out (a resend after a cut)."""
    if client_message_id is None:
        return False
    member = session.member
    found = await session.services.store.find_by_client_message_id(
        member.id, member.organization_id, client_message_id
    )
    return found is not None


async def _current(session: Session, conversation: ConversationInfo) -> list[StoredMessage]:
    """The conversation's latest messages, without earlier versions of edited exchanges."""
    stored = await session.services.store.messages(conversation.id, last=session.settings.window_messages + 1)
    return [m for m in stored if m.status != MessageStatus.SUPERSEDED]


def _last_user(messages: Sequence[StoredMessage]) -> int | None:
    return max((i for i, m in enumerate(messages) if m.role == MessageRole.USER), default=None)


async def _answer(
    session: Session,
    conversation: ConversationInfo,
    before: Sequence[StoredMessage],
    new_user: WindowEntry | None,
    message_id: UUID,
    admission: Admission,
    asked_at: datetime,
    notices: Sequence[str | None] = (),
) -> None:
    """Build the window (`before`, then `new_user` if given) and start the answer the way a new
    message does (`send.start_answer`). The caller was admitted: `admission` holds the lease."""
    services = session.services
    try:
        # After the conversation's summary checkpoint (SPEC §19), as `send.read_window` reads it.
        summary = await services.summaries.latest(conversation.id)
        window = services.windows.build(conversation.id, before, summary)
    except BaseException:
        await asyncio.shield(
            services.store.update_messages([MessageUpdate(message_id, "", None, MessageStatus.FAILED)])
        )
        await admission.release(conversation.id)
        raise
    if new_user is not None:
        window.append(new_user)
    await start_answer(
        session,
        conversation,
        window,
        message_id=message_id,
        admission=admission,
        asked_at=asked_at,
        notices=notices,
    )
