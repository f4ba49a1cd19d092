"""Wire protocol v1 (SPEC §3): every command and every event, as one closed union each.

Incoming frames are parsed by `parse_command()` with one `TypeAdapter`; outgoing events are these
models, built from the services' internal events by the one encoder (`vernis.ws.encoder`). Both ends
are plain code: no socket, no database.

Field names on the wire are the model field names. Optional fields that are unset are left out of event
frames, so a client sees only what applies (`retry_after_ms` only on `rate_limited`, `resumed` only
on a resume); a required field that is null (the `conversation_id` of a pending conversation) stays.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_serializer,
)

from vernis.exceptions import InvalidMessage, MessageTooLong
from vernis.services.events import ErrorCode

__all__ = [
    "MAX_CONTENT_CHARS",
    "AssistantEnd",
    "AssistantStart",
    "Authenticate",
    "Command",
    "ConfirmTool",
    "ConfirmationRequired",
    "ConversationCreated",
    "ConversationList",
    "ConversationListItem",
    "ConversationLoaded",
    "DeleteConversation",
    "EditMessage",
    "ErrorEvent",
    "Event",
    "Feedback",
    "HistoryEnd",
    "HistoryMessage",
    "ListConversations",
    "LoadConversation",
    "NewConversation",
    "PageContext",
    "Ping",
    "Pong",
    "Regenerate",
    "RenameConversation",
    "Stop",
    "TextDelta",
    "TitleUpdated",
    "ToolCallCompleted",
    "ToolCallStarted",
    "UserMessage",
    "decode_event",
    "encode_text_delta",
    "parse_command",
]

MAX_CONTENT_CHARS = 8_000


class _Command(BaseModel):
    # Unknown fields are refused: a typo in a field name is a client bug worth reporting.
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Optional fields (default None) are left out when unset; a required field that is null
        # (`conversation_id` of a pending conversation) stays, as the protocol says.
        data: dict[str, Any] = handler(self)
        for name in _optional_fields(type(self)):
            if name in data and data[name] is None:
                del data[name]
        return data


@functools.cache
def _optional_fields(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(
        name for name, info in model.model_fields.items() if not info.is_required() and info.default is None
    )


# --- client → server -------------------------------------------------------------------------


class PageContext(_Command):
    route: Annotated[str, StringConstraints(max_length=2048)]
    entity_type: Annotated[str, StringConstraints(max_length=64)] | None = None
    entity_id: Annotated[str, StringConstraints(max_length=128)] | None = None


class UserMessage(_Command):
    type: Literal["user_message"]
    # Length is checked after parsing so that over-long content gets `message_too_long`.
    content: str
    page_context: PageContext | None = None
    client_message_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None


class NewConversation(_Command):
    type: Literal["new_conversation"]


class ListConversations(_Command):
    type: Literal["list_conversations"]
    before: Annotated[str, StringConstraints(max_length=256)] | None = None


class LoadConversation(_Command):
    type: Literal["load_conversation"]
    conversation_id: UUID
    after_seq: Annotated[int, Field(ge=0)] | None = None


class Stop(_Command):
    type: Literal["stop"]


class ConfirmTool(_Command):
    type: Literal["confirm_tool"]
    confirmation_id: UUID
    approved: bool


class RenameConversation(_Command):
    type: Literal["rename_conversation"]
    conversation_id: UUID
    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)]


class DeleteConversation(_Command):
    type: Literal["delete_conversation"]
    conversation_id: UUID


class Feedback(_Command):
    type: Literal["feedback"]
    message_id: UUID
    rating: Literal["up", "down"]
    comment: Annotated[str, StringConstraints(max_length=2000)] | None = None


class Regenerate(_Command):
    type: Literal["regenerate"]
    client_message_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None


class EditMessage(_Command):
    type: Literal["edit_message"]
    message_id: UUID
    # Length is checked after parsing, as for `user_message`.
    content: str
    client_message_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None


class Ping(_Command):
    type: Literal["ping"]


class Authenticate(_Command):
    type: Literal["authenticate"]
    token: Annotated[str, StringConstraints(min_length=1, max_length=16384)]


Command = Annotated[
    UserMessage
    | NewConversation
    | ListConversations
    | LoadConversation
    | Stop
    | ConfirmTool
    | RenameConversation
    | DeleteConversation
    | Feedback
    | Regenerate
    | EditMessage
    | Ping
    | Authenticate,
    Field(discriminator="type"),
]

_command_adapter: TypeAdapter[Command] = TypeAdapter(Command)


def parse_command(frame: str | bytes) -> Command:
    """Parse one text frame into a command.

    Raises `InvalidMessage` (malformed JSON, not an object, unknown type, bad field) or
    `MessageTooLong`, each with a message safe to show the client.
    """
    try:
        data = orjson.loads(frame)
    except orjson.JSONDecodeError:
        raise InvalidMessage("The frame is not valid JSON.") from None
    if not isinstance(data, dict):
        raise InvalidMessage("A frame must be a JSON object with a `type`.")
    kind = data.get("type")
    if not isinstance(kind, str):
        raise InvalidMessage("A frame must have a string `type`.")
    try:
        command = _command_adapter.validate_python(data)
    except ValidationError as exc:
        raise InvalidMessage(_describe(kind, exc)) from None
    if isinstance(command, UserMessage | EditMessage):
        if len(command.content) > MAX_CONTENT_CHARS:
            raise MessageTooLong(f"A message can be at most {MAX_CONTENT_CHARS:,} characters.")
        if not command.content.strip():
            raise InvalidMessage("A message cannot be empty.")
    return command


def _describe(kind: str, exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    if errors and errors[0]["type"] == "union_tag_invalid":
        return f"Unknown command type {kind[:40]!r}."
    first = errors[0]
    # The location names the field; pydantic prefixes it with the union tag.
    where = ".".join(str(part) for part in first["loc"][1:]) or "frame"
    return f"Invalid `{kind[:40]}` command: {where}: {first['msg']}."


# --- server → client -------------------------------------------------------------------------


class _ConversationEvent(_Event):
    # Grows within a conversation (SPEC §3); set by whoever publishes the event.
    seq: int | None = None


class ConversationLoaded(_ConversationEvent):
    type: Literal["conversation_loaded"] = "conversation_loaded"
    conversation_id: UUID | None
    title: str | None
    rolled_over_from: UUID | None = None
    # On a load with `after_seq`: true when exactly the missed events follow, false when the whole
    # history follows instead (the replay window no longer covers the gap: redraw).
    resumed: bool | None = None


class HistoryMessage(_ConversationEvent):
    type: Literal["history_message"] = "history_message"
    message_id: UUID
    role: Literal["user", "assistant"]
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    status: str | None = None
    created_at: datetime


class HistoryEnd(_ConversationEvent):
    type: Literal["history_end"] = "history_end"
    conversation_id: UUID | None


class ConversationCreated(_ConversationEvent):
    type: Literal["conversation_created"] = "conversation_created"
    conversation_id: UUID


class ConversationListItem(_Event):
    conversation_id: UUID
    title: str | None
    updated_at: datetime
    message_count: int


class ConversationList(_Event):
    type: Literal["conversation_list"] = "conversation_list"
    conversations: list[ConversationListItem]
    next_before: str | None = None


class AssistantStart(_ConversationEvent):
    type: Literal["assistant_start"] = "assistant_start"
    conversation_id: UUID
    message_id: UUID
    resumed: bool | None = None


class TextDelta(_ConversationEvent):
    type: Literal["text_delta"] = "text_delta"
    content: str


class ToolCallStarted(_ConversationEvent):
    type: Literal["tool_call_started"] = "tool_call_started"
    call_id: str
    tool_name: str
    arguments: Any


class ToolCallCompleted(_ConversationEvent):
    type: Literal["tool_call_completed"] = "tool_call_completed"
    call_id: str
    tool_name: str
    status: Literal["ok", "error", "needs_confirmation", "rejected"]
    result: Any


class ConfirmationRequired(_ConversationEvent):
    type: Literal["confirmation_required"] = "confirmation_required"
    confirmation_id: UUID
    call_id: str
    tool_name: str
    preview: Any


class AssistantEnd(_ConversationEvent):
    type: Literal["assistant_end"] = "assistant_end"
    conversation_id: UUID
    message_id: UUID
    stopped: bool


class TitleUpdated(_ConversationEvent):
    type: Literal["title_updated"] = "title_updated"
    conversation_id: UUID
    title: str


class ErrorEvent(_ConversationEvent):
    type: Literal["error"] = "error"
    code: ErrorCode
    message: str
    retry_after_ms: int | None = None
    # `quota_exceeded` only (SPEC §15): which quota ("member" per day, "organization" per month), its
    # size and what was used, in tokens, and when it resets (ISO 8601, UTC).
    scope: Literal["member", "organization"] | None = None
    limit: int | None = None
    used: int | None = None
    reset_at: str | None = None


class Pong(_Event):
    type: Literal["pong"] = "pong"


Event = (
    ConversationLoaded
    | HistoryMessage
    | HistoryEnd
    | ConversationCreated
    | ConversationList
    | AssistantStart
    | TextDelta
    | ToolCallStarted
    | ToolCallCompleted
    | ConfirmationRequired
    | AssistantEnd
    | TitleUpdated
    | ErrorEvent
    | Pong
)

_event_adapter: TypeAdapter[Event] = TypeAdapter(Event)


def encode_text_delta(content: str, seq: int) -> str:
    """The hot path: a `text_delta` frame built without a model round trip."""
    return orjson.dumps({"type": "text_delta", "content": content, "seq": seq}).decode()


def decode_event(frame: str | bytes) -> Event:
    """Parse a server frame back into an event (tests and the replay buffer use it)."""
    return _event_adapter.validate_json(frame)
