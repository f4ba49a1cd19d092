"""The one encoder: the services' internal events (`vernis.services.events`) as protocol v1 frames.

Every event becomes its wire model (`vernis.ws.protocol`), so the wire shape is written down once;
a `text_delta`, the one event made per streamed token, skips the model and is encoded directly, and
so do an answer's start and end.
"""

from __future__ import annotations

from typing import assert_never

import orjson

from vernis.services import events
from vernis.ws import protocol

__all__ = ["encode", "to_wire"]


def encode(event: events.Event, seq: int | None = None) -> str:
    """One event as a JSON text frame, with its `seq` when it has one and belongs to a conversation."""
    if type(event) is events.TextDelta:
        if seq is None:
            return orjson.dumps({"type": "text_delta", "content": event.content}).decode()
        return protocol.encode_text_delta(event.content, seq)
    # An answer's start and end, in every answer: built directly too, the same bytes as their models'
    # (tests/ws/test_encoder.py compares them).
    if type(event) is events.AnswerEnded:
        data: dict[str, object] = {
            "type": "assistant_end",
            "conversation_id": str(event.conversation_id),
            "message_id": str(event.message_id),
            "stopped": event.stopped,
        }
        if seq is not None:
            data["seq"] = seq
        return orjson.dumps(data).decode()
    if type(event) is events.AnswerStarted:
        data = {
            "type": "assistant_start",
            "conversation_id": str(event.conversation_id),
            "message_id": str(event.message_id),
        }
        if event.resumed is not None:
            data["resumed"] = event.resumed
        if seq is not None:
            data["seq"] = seq
        return orjson.dumps(data).decode()
    wire = to_wire(event)
    data = wire.model_dump(mode="json")
    # Only events of a conversation carry a seq (a conversation list or a pong belongs to none).
    if seq is not None and "seq" in type(wire).model_fields:
        data["seq"] = seq
    return orjson.dumps(data).decode()


def to_wire(event: events.Event) -> protocol.Event:
    match event:
        case events.TextDelta():
            return protocol.TextDelta(content=event.content)
        case events.ConversationLoaded():
            return protocol.ConversationLoaded(
                conversation_id=event.conversation_id,
                title=event.title,
                rolled_over_from=event.rolled_over_from,
                resumed=event.resumed,
            )
        case events.HistoryMessage():
            message = event.message
            return protocol.HistoryMessage(
                message_id=message.id,
                role=message.role,
                content=message.content,
                tool_calls=message.tool_calls,
                status=message.status,
                created_at=message.created_at,
            )
        case events.HistoryEnd():
            return protocol.HistoryEnd(conversation_id=event.conversation_id)
        case events.ConversationCreated():
            return protocol.ConversationCreated(conversation_id=event.conversation_id)
        case events.ConversationList():
            return protocol.ConversationList(
                conversations=[
                    protocol.ConversationListItem(
                        conversation_id=c.id,
                        title=c.title,
                        updated_at=c.updated_at,
                        message_count=c.message_count,
                    )
                    for c in event.conversations
                ],
                next_before=event.next_before,
            )
        case events.AnswerStarted():
            return protocol.AssistantStart(
                conversation_id=event.conversation_id, message_id=event.message_id, resumed=event.resumed
            )
        case events.ToolCallStarted():
            return protocol.ToolCallStarted(
                call_id=event.call_id, tool_name=event.tool_name, arguments=event.arguments
            )
        case events.ToolCallCompleted():
            return protocol.ToolCallCompleted(
                call_id=event.call_id, tool_name=event.tool_name, status=event.status, result=event.result
            )
        case events.ConfirmationRequired():
            return protocol.ConfirmationRequired(
                confirmation_id=event.confirmation_id,
                call_id=event.call_id,
                tool_name=event.tool_name,
                preview=event.preview,
            )
        case events.AnswerEnded():
            return protocol.AssistantEnd(
                conversation_id=event.conversation_id, message_id=event.message_id, stopped=event.stopped
            )
        case events.TitleUpdated():
            return protocol.TitleUpdated(conversation_id=event.conversation_id, title=event.title)
        case events.ErrorOccurred():
            quota = event.quota
            return protocol.ErrorEvent(
                code=event.code,  # checked by the model: a wrong code fails loudly
                message=event.message,
                retry_after_ms=event.retry_after_ms,
                scope=None if quota is None else quota.scope,
                limit=None if quota is None else quota.limit,
                used=None if quota is None else quota.used,
                reset_at=None if quota is None else quota.reset_at,
            )
        case events.Pong():
            return protocol.Pong()
        case _:
            assert_never(event)
