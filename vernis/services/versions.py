"""`regenerate` (SPEC §3): answer the last user message again.

The earlier answer stays stored: the new one is appended right after it, so in a conversation an
assistant message directly followed by another assistant message is an earlier version of it (the
protocol stores every other answer right after its user message). History replays every version;
the model's window keeps only the newest (`WindowCache.build`). One answer at a time per
conversation holds as for a `user_message`: the same lease, the same rate limits.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from uuid import uuid4

from vernis.db.models import MessageRole, MessageStatus
from vernis.exceptions import NotFound, RateLimited, ResponseInProgress
from vernis.services.answers import AnswerSpec
from vernis.services.assistant import LoopSettings
from vernis.services.persistence import DuplicateClientMessage, MessageUpdate
from vernis.services.prompt import PromptParts, build_system_prompt
from vernis.tools import ToolContext
from vernis.tools.runner import ToolRunner

if TYPE_CHECKING:
    from vernis.services.session import Session

__all__ = ["NOTHING_TO_REGENERATE", "regenerate"]

NOTHING_TO_REGENERATE = "There is no answer to write again here yet."


async def regenerate(session: Session, client_message_id: str | None) -> None:
    services, member, settings = session.services, session.member, session.settings
    store, hub = services.store, services.hub
    if client_message_id is not None:
        seen = await store.find_by_client_message_id(member.id, member.organization_id, client_message_id)
        if seen is not None:
            return
    conversation = session.conversation
    if conversation is None:
        raise NotFound(NOTHING_TO_REGENERATE)

    # It costs a model answer like a message: the same limits.
    retry_after = session.rate.peek()
    if retry_after is None:
        retry_after = await services.member_limiter.hit(member.id)
    if retry_after is not None:
        raise RateLimited(retry_after)
    session.rate.hit()

    owner = uuid4().hex
    message_id = uuid4()
    if not await hub.try_acquire(conversation.id, owner):
        raise ResponseInProgress()
    try:
        stored = await store.messages(conversation.id, last=settings.window_messages + 1)
        last_user = max((i for i, m in enumerate(stored) if m.role == MessageRole.USER), default=None)
        answers = stored[last_user + 1 :] if last_user is not None else []
        if last_user is None or not answers:
            raise NotFound(NOTHING_TO_REGENERATE)
        if any(m.status == MessageStatus.STREAMING for m in answers):
            raise ResponseInProgress()
        user = stored[last_user]
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

    try:
        # The window ends with the user message: the earlier versions of its answer stay out.
        window = services.windows.build(conversation.id, stored[: last_user + 1])
        context = ToolContext(
            member=member,
            permissions=session.permissions,
            conversation_id=conversation.id,
            resources=None,
            token=session.identity.token,
            claims=session.identity.claims,
            message_id=message_id,
            asked_at=user.created_at,
        )
        system = build_system_prompt(
            PromptParts(
                persona=services.catalog.persona,
                member=member,
                ai_rules=await store.get_ai_rules(member.organization_id),
                toolset=session.toolset,
                page=None,
                now=datetime.now(UTC),
            )
        )
        runner = (
            ToolRunner(session.toolset, context, services.approvals, guards=services.guards)
            if session.toolset
            else None
        )
        messages = [{"role": "system", "content": system}, *window.to_messages()]
    except BaseException:
        await asyncio.shield(
            store.update_messages([MessageUpdate(message_id, "", None, MessageStatus.FAILED)])
        )
        await hub.release(conversation.id, owner)
        raise

    services.answers.start(
        AnswerSpec(
            conversation_id=conversation.id,
            messages=messages,
            runner=runner,
            window=window,
            loop=LoopSettings(
                model=settings.chat_model,
                max_tool_rounds=settings.max_tool_rounds,
                retries=settings.llm_max_retries,
                max_tokens=settings.llm_max_tokens,
            ),
            message_id=message_id,
            first_user_message=None,
        ),
        owner,
    )
