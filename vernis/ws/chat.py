"""A `user_message`, in the order of SPEC §4: rate limits, one answer at a time, lazy creation,
rollover, the stored message, the system prompt and tools, then the answer, which from then on
belongs to the conversation and not to this socket.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from uuid import uuid4

from vernis.context.window import ConversationWindow, WindowEntry
from vernis.db.models import MessageRole
from vernis.exceptions import RateLimited, ResponseInProgress
from vernis.services.answers import AnswerSpec
from vernis.services.assistant import LoopSettings
from vernis.services.hub import publish_event
from vernis.services.persistence import DuplicateClientMessage
from vernis.services.prompt import PromptParts, build_system_prompt
from vernis.services.registry import ToolContext, ToolRunner
from vernis.ws import protocol

if TYPE_CHECKING:
    from vernis.ws.connection import Connection

__all__ = ["send_user_message"]

logger = logging.getLogger("vernis.ws")


async def send_user_message(connection: Connection, command: protocol.UserMessage) -> None:
    services, member, settings = connection.services, connection.member, connection.settings
    store, hub = services.store, services.hub
    if command.client_message_id is not None:
        seen = await store.find_by_client_message_id(
            member.id, member.organization_id, command.client_message_id
        )
        if seen is not None:
            # Already received (the client resent it after a reconnect): answered once, not twice.
            logger.info("duplicate client_message_id ignored")
            return

    # 1. Rate limits: this socket's, then the member's across all their sockets.
    retry_after = connection.rate.peek()
    if retry_after is None:
        retry_after = await services.member_limiter.hit(member.id)
    if retry_after is not None:
        raise RateLimited(retry_after)
    connection.rate.hit()

    # 2. One answer at a time per conversation.
    conversation = connection.conversation
    if conversation is not None:
        if await hub.holder(conversation.id) is not None:
            raise ResponseInProgress()
        conversation = await store.get_conversation(conversation.id, member.id, member.organization_id)
        if conversation is None:  # deleted from another tab meanwhile
            connection.show(None)

    window: ConversationWindow | None = None
    first_exchange = conversation is not None and conversation.message_count == 0
    if conversation is None:
        # 3. Lazy creation: a pending conversation is stored now.
        conversation = await store.create_conversation(member.id, member.organization_id)
        connection.show(conversation)
        window = services.windows.build(conversation.id, ())
        first_exchange = True
        created = protocol.ConversationCreated(conversation_id=conversation.id)
        publish_event(hub, conversation.id, created)
    elif conversation.message_count >= settings.rollover_messages:
        # 4. Rollover: continue in a new conversation linked to the full one, with the same context.
        previous = conversation
        old_window = services.windows.get(previous.id) or services.windows.build(
            previous.id, await store.messages(previous.id, last=settings.window_messages)
        )
        conversation = await store.create_conversation(
            member.id, member.organization_id, previous_conversation_id=previous.id
        )
        connection.show(conversation)
        first_exchange = True
        window = old_window.copy()
        services.windows.put(conversation.id, window)
        loaded = protocol.ConversationLoaded(
            conversation_id=conversation.id, title=None, rolled_over_from=previous.id
        )
        publish_event(hub, conversation.id, loaded)
    if window is None:
        window = services.windows.get(conversation.id) or services.windows.build(
            conversation.id, await store.messages(conversation.id, last=settings.window_messages)
        )

    owner = uuid4().hex
    if not await hub.try_acquire(conversation.id, owner):
        raise ResponseInProgress()
    try:
        # 5. The user message is stored.
        try:
            user_message = await store.add_message(
                conversation.id,
                MessageRole.USER,
                command.content,
                client_message_id=command.client_message_id,
            )
        except DuplicateClientMessage:
            await hub.release(conversation.id, owner)
            return
        window.append(WindowEntry(MessageRole.USER, command.content))

        # 6. The system prompt and this member's tools.
        page = None
        if command.page_context is not None:
            page = await services.resolve_page(command.page_context, member)
        system = build_system_prompt(
            PromptParts(
                member=member,
                ai_rules=await store.get_ai_rules(member.organization_id),
                toolset=connection.toolset,
                page=page,
                now=datetime.now(UTC),
            )
        )
        message_id = uuid4()
        runner = None
        if connection.toolset:
            runner = ToolRunner(
                connection.toolset,
                ToolContext(
                    member=member,
                    permissions=connection.permissions,
                    conversation_id=conversation.id,
                    message_id=message_id,
                    asked_at=user_message.created_at,
                    resources=services.tool_resources,
                ),
            )
        messages = [{"role": "system", "content": system}, *window.to_messages()]
    except BaseException:
        await hub.release(conversation.id, owner)
        raise

    # 7. The answer streams; it belongs to the conversation from here on.
    services.answers.start(
        AnswerSpec(
            conversation_id=conversation.id,
            member_id=member.id,
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
            first_user_message=command.content if first_exchange else None,
        ),
        owner,
    )
