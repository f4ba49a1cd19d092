"""`regenerate` and `edit_message` (SPEC §3): the last exchange written again, the earlier version
kept.

- `regenerate` answers the last user message again. The new answer is appended right after the
  earlier one, so an assistant message directly followed by another assistant message is an earlier
  version of it (every other answer is stored right after its user message).
- `edit_message` replaces the last user message: the earlier exchange (that message and its answers)
  stays stored, marked `superseded`, and the edited message and its answer follow it.

History replays every version; the model's window keeps only the newest (`WindowCache.build`). One
answer at a time per conversation holds as for a `user_message`: the same lease, the same limits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID, uuid4

from vernis.context.window import WindowEntry
from vernis.db.models import MessageRole, MessageStatus
from vernis.exceptions import MessageBlocked, NotFound, RateLimited, ResponseInProgress
from vernis.services.chat import start_answer
from vernis.services.persistence import DuplicateClientMessage, MessageUpdate, StoredMessage

if TYPE_CHECKING:
    from vernis.services.persistence import ConversationInfo
    from vernis.services.session import Session

__all__ = ["NOTHING_TO_REGENERATE", "ONLY_THE_LAST", "edit_message", "regenerate"]

NOTHING_TO_REGENERATE = "There is no answer to write again here yet."
ONLY_THE_LAST = "Only your last message can be edited."


async def regenerate(session: Session, client_message_id: str | None) -> None:
    if await _seen(session, client_message_id):
        return
    conversation = session.conversation
    if conversation is None:
        raise NotFound(NOTHING_TO_REGENERATE)
    await _limit(session)
    services, settings = session.services, session.settings
    store, hub = services.store, services.hub
    owner, message_id = uuid4().hex, uuid4()
    if not await hub.try_acquire(conversation.id, owner):
        raise ResponseInProgress()
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
            await hub.release(conversation.id, owner)
            return
    except BaseException:
        await hub.release(conversation.id, owner)
        raise
    # The window ends with the user message: the earlier versions of its answer stay out.
    await _answer(
        session, conversation, live[: last_user + 1], None, message_id, owner, live[last_user].created_at
    )


async def edit_message(
    session: Session, message_id: UUID, content: str, client_message_id: str | None
) -> None:
    if await _seen(session, client_message_id):
        return
    conversation = session.conversation
    if conversation is None:
        raise NotFound(ONLY_THE_LAST)
    await _limit(session)
    services, settings = session.services, session.settings
    store, hub = services.store, services.hub
    # The guards (vernis.guards), as for a new message: before anything is stored or sent.
    verdict = await services.guards.check_input(content, session.member, conversation.id)
    if verdict.blocked:
        raise MessageBlocked(verdict.user_message())
    content = verdict.text
    owner, answer_id = uuid4().hex, uuid4()
    if not await hub.try_acquire(conversation.id, owner):
        raise ResponseInProgress()
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
            await hub.release(conversation.id, owner)
            return
    except BaseException:
        await hub.release(conversation.id, owner)
        raise
    await _answer(
        session,
        conversation,
        live[:last_user],
        content,
        answer_id,
        owner,
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


async def _limit(session: Session) -> None:
    """It costs a model answer like a message: the same limits."""
    retry_after = session.rate.peek()
    if retry_after is None:
        retry_after = await session.services.member_limiter.hit(session.member.id)
    if retry_after is not None:
        raise RateLimited(retry_after)
    session.rate.hit()


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
    new_user: str | None,
    message_id: UUID,
    owner: str,
    asked_at: datetime,
    notices: Sequence[str | None] = (),
) -> None:
    """Build the window (`before`, then `new_user` if given) and start the answer the way a new
    message does (`chat.start_answer`). The caller holds the lease as `owner`."""
    services = session.services
    try:
        window = services.windows.build(conversation.id, before)
    except BaseException:
        await asyncio.shield(
            services.store.update_messages([MessageUpdate(message_id, "", None, MessageStatus.FAILED)])
        )
        await services.hub.release(conversation.id, owner)
        raise
    if new_user is not None:
        window.append(WindowEntry(MessageRole.USER, new_user))
    await start_answer(
        session, conversation, window, message_id=message_id, owner=owner, asked_at=asked_at, notices=notices
    )
