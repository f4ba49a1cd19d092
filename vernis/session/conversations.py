"""The session picker's use-cases (SPEC §3, §4): open, load, list, rename, delete, stop, feedback.

Each takes the socket's `Session` and acts as its member: a conversation of another member or
organization is `NotFound`, never shown.
"""

from __future__ import annotations

import asyncio
from uuid import UUID

from vernis.conversation import events
from vernis.conversation.store import ConversationInfo
from vernis.exceptions import InvalidMessage, MessageBlocked, NotFound, Unavailable
from vernis.session.loading import load_conversation
from vernis.session.send import read_window
from vernis.session.state import Session

__all__ = [
    "compact_conversation",
    "delete_conversation",
    "find_conversation",
    "give_feedback",
    "list_conversations",
    "load",
    "open_session",
    "rename_conversation",
    "stop_answer",
]


async def find_conversation(session: Session, conversation_id: UUID) -> ConversationInfo:
    """The member's conversation `conversation_id`; `NotFound` for anyone else's."""
    member = session.member
    conversation = await session.services.store.get_conversation(
        conversation_id, member.id, member.organization_id
    )
    if conversation is None:
        raise NotFound()
    return conversation


async def open_session(session: Session, requested: str | None, after_seq: str | None) -> None:
    """What a socket shows when it opens: the conversation it asked for, else the latest one."""
    conversation = None
    if requested:
        try:
            conversation = await find_conversation(session, UUID(requested))
        except (ValueError, NotFound):
            session.outbox.send(
                events.ErrorOccurred("not_found", "No such conversation; opening your latest one.")
            )
    if conversation is None:
        member = session.member
        conversation = await session.services.store.latest_conversation(member.id, member.organization_id)
        after_seq = None
    if conversation is None:
        session.show_pending()
        return
    resume_from = int(after_seq) if after_seq is not None and after_seq.isdigit() else None
    await load_conversation(session, conversation, after_seq=resume_from)


async def load(session: Session, conversation_id: UUID, after_seq: int | None) -> None:
    """`load_conversation`: switch to it, replaying its history (or only what came after `after_seq`)."""
    await load_conversation(session, await find_conversation(session, conversation_id), after_seq=after_seq)


async def stop_answer(session: Session) -> None:
    """Stop the shown conversation's answer, here or on whichever instance runs it."""
    services, shown = session.services, session.conversation
    if shown is not None and not services.answers.stop(shown.id):
        await services.hub.request_stop(shown.id)


async def list_conversations(session: Session, before: str | None) -> None:
    """The 20 most recently updated conversations, older ones by the cursor `before`."""
    member = session.member
    conversations, next_before = await session.services.store.list_conversations(
        member.id, member.organization_id, before=before, limit=20
    )
    session.outbox.send(events.ConversationList(conversations=conversations, next_before=next_before))


async def rename_conversation(session: Session, conversation_id: UUID, title: str) -> None:
    """Rename it; every socket showing it is told (`title_updated`)."""
    member = session.member
    # A title is kept and shown like a message: it passes the same guards.
    verdict = await session.services.guards.check_input(title, member, conversation_id)
    if verdict.blocked:
        raise MessageBlocked(verdict.not_saved("the title"))
    renamed = await session.services.store.rename_conversation(
        conversation_id, member.id, member.organization_id, verdict.text if verdict.redacted else title
    )
    if renamed is None or renamed.title is None:
        raise NotFound()
    session.publish(renamed.id, events.TitleUpdated(conversation_id=renamed.id, title=renamed.title))


async def delete_conversation(session: Session, conversation_id: UUID) -> None:
    """Delete it, stopping its answer first; a socket showing it goes back to a pending state."""
    services, member = session.services, session.member
    await find_conversation(session, conversation_id)
    running = services.answers.running(conversation_id)
    if running is not None and services.answers.stop(conversation_id) and running.task is not None:
        await asyncio.gather(running.task, return_exceptions=True)
    attached = (
        [] if services.attachments is None else await services.attachments.in_conversation(conversation_id)
    )
    if not await services.store.delete_conversation(conversation_id, member.id, member.organization_id):
        raise NotFound()
    services.windows.discard(conversation_id)
    if services.attachments is not None:
        # Its files go with it, unless another message still carries them (SPEC §21).
        await services.attachments.release(attached)
    if session.conversation is not None and session.conversation.id == conversation_id:
        session.show_pending()
    await list_conversations(session, None)


async def give_feedback(session: Session, message_id: UUID, rating: str, comment: str | None) -> None:
    """Rate one of the member's answers (`up`/`down`), with an optional comment."""
    member = session.member
    if comment is not None:
        # A comment is kept and exported like a message: it passes the same guards.
        verdict = await session.services.guards.check_input(comment, member, None)
        if verdict.blocked:
            raise MessageBlocked(verdict.not_saved("the comment"))
        comment = verdict.text if verdict.redacted else comment
    stored = await session.services.feedback.rate(
        message_id, member.id, member.organization_id, rating, comment
    )
    if not stored:
        raise NotFound("No such answer.")


async def compact_conversation(session: Session, conversation_id: UUID) -> None:
    """Summarise the conversation's older messages now (SPEC §19), whatever its size: admitted like
    an answer (a model writes the summary), under its lease (`response_in_progress` while it
    answers). Every socket showing it hears `conversation_compacted`. `invalid_message` when there
    is nothing to summarise yet; `unavailable` when no summary could be had (nothing changed)."""
    services, member = session.services, session.member
    await find_conversation(session, conversation_id)
    if services.compactor is None:
        raise Unavailable("Conversations are not summarised on this server.")
    admission = await services.gate.admit(member, session.rate, conversation_id)
    try:
        window = await read_window(services, conversation_id)
        if window.cut() == 0:
            raise InvalidMessage("There is nothing to summarise yet: the conversation is still short.")
        if await services.compactor.compact(conversation_id, window, member, force=True) is None:
            services.windows.discard(conversation_id)
            raise Unavailable("The summary could not be made just now; nothing changed. Try again later.")
    finally:
        await admission.release(conversation_id)
