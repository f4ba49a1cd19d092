"""The one encoder: the services' internal events (`vernis.conversation.events`) as protocol v1 frames.

Every event becomes its wire model (`vernis.ws.protocol`), so the wire shape is written down once;
a `text_delta`, the one event made per streamed token, skips the model and is encoded directly, and
so do an answer's start and end.
"""

from __future__ import annotations

from typing import Any, assert_never

import orjson

from vernis.conversation import events
from vernis.conversation.records import continues
from vernis.conversation.window import for_model
from vernis.tools.reviews import ReviewInfo
from vernis.ws import protocol

__all__ = ["encode", "to_wire"]


def encode(event: events.Event, seq: int | None = None) -> str:
    """One event as a JSON text frame, with its `seq` when it has one and belongs to a conversation."""
    if type(event) is events.TextDelta:
        if seq is None:
            return orjson.dumps({"type": "text_delta", "content": event.content}).decode()
        return protocol.encode_text_delta(event.content, seq)
    if type(event) is events.ReasoningDelta:
        # Per delta too: built without a model round trip, like text_delta.
        frame: dict[str, object] = {"type": "reasoning_delta", "content": event.content}
        if seq is not None:
            frame["seq"] = seq
        return orjson.dumps(frame).decode()
    # An answer's start and end, in every answer: built directly too, the same bytes as their models'
    # (tests/ws/test_encoder.py compares them).
    if type(event) is events.AnswerEnded:
        data: dict[str, object] = {
            "type": "assistant_end",
            "conversation_id": str(event.conversation_id),
            "message_id": str(event.message_id),
            "stopped": event.stopped,
        }
        if event.model is not None:
            data["model"] = event.model
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
        if event.continues is not None:
            data["continues"] = event.continues
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
        case events.ReasoningDelta():
            return protocol.ReasoningDelta(content=event.content)
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
                attachments=[
                    protocol.AttachmentRef.model_validate(attachment.wire())
                    for attachment in event.attachments
                ]
                or None,
                tool_calls=_calls_with_blocks(message.tool_calls),
                status=message.status,
                reasoning=message.reasoning or None,
                continues=True if continues(message) else None,
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
                conversation_id=event.conversation_id,
                message_id=event.message_id,
                resumed=event.resumed,
                continues=event.continues,
            )
        case events.ToolCallStarted():
            return protocol.ToolCallStarted(
                call_id=event.call_id, tool_name=event.tool_name, arguments=event.arguments
            )
        case events.ToolCallCompleted():
            result, ui = _split_blocks(event.result)
            return protocol.ToolCallCompleted(
                call_id=event.call_id, tool_name=event.tool_name, status=event.status, result=result, ui=ui
            )
        case events.ConfirmationRequired():
            return protocol.ConfirmationRequired(
                confirmation_id=event.confirmation_id,
                call_id=event.call_id,
                tool_name=event.tool_name,
                preview=event.preview,
            )
        case events.ClientToolCall():
            return protocol.ClientToolCall(
                call_id=event.call_id, tool_name=event.tool_name, arguments=event.arguments
            )
        case events.AnswerEnded():
            return protocol.AssistantEnd(
                conversation_id=event.conversation_id,
                message_id=event.message_id,
                stopped=event.stopped,
                model=event.model,
            )
        case events.TitleUpdated():
            return protocol.TitleUpdated(conversation_id=event.conversation_id, title=event.title)
        case events.ConversationCompacted():
            return protocol.ConversationCompacted(
                conversation_id=event.conversation_id, through_message_id=event.through_message_id
            )
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
                question_id=event.question_id,
            )
        case events.Pong():
            return protocol.Pong()
        case events.ReviewRequested():
            return protocol.ReviewRequested(
                review_id=event.review_id,
                call_id=event.call_id,
                tool_name=event.tool_name,
                expires_at=event.expires_at,
            )
        case events.ReviewRequired():
            return protocol.ReviewRequired(review=_review_item(event.review))
        case events.ReviewResolved():
            return protocol.ReviewResolved(review_id=event.review_id, status=event.status)
        case events.ReviewList():
            return protocol.ReviewList(reviews=[_review_item(review) for review in event.reviews])
        case events.QuestionRequired():
            return protocol.QuestionRequired(
                question_id=event.question_id,
                call_id=event.call_id,
                title=event.title,
                questions=event.questions,
                expires_at=event.expires_at,
            )
        case _:
            assert_never(event)


def _review_item(review: ReviewInfo) -> protocol.ReviewItem:
    return protocol.ReviewItem(
        review_id=review.id,
        tool_name=review.tool_name,
        arguments=review.arguments,
        preview=review.preview,
        requester_name=review.requester_name,
        created_at=review.created_at,
        expires_at=review.expires_at,
    )


def _split_blocks(result: Any) -> tuple[Any, list[dict[str, Any]] | None]:
    """A stored result envelope as the browser gets it: the envelope as the model reads it, and its
    UI blocks beside it (SPEC §16: `tool_call_completed.ui`, and the same in `history_message`)."""
    ui = result.get("ui") if isinstance(result, dict) else None
    return for_model(result), ui


def _calls_with_blocks(calls: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if not calls:
        return calls
    shown = []
    for call in calls:
        result, ui = _split_blocks(call.get("result"))
        shown.append(call if ui is None else {**call, "result": result, "ui": ui})
    return shown
