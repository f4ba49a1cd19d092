"""The commands of wire protocol v1 (SPEC §3), client to server: one closed union (`Command`),
parsed from a text frame by `parse_command()` with one `TypeAdapter`. Unknown fields are refused."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from uuid import UUID

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)

from vernis.attachments import MAX_ATTACHMENTS
from vernis.exceptions import InvalidMessage, MessageTooLong

__all__ = [
    "MAX_CONTENT_CHARS",
    "AnswerQuestion",
    "Authenticate",
    "ClientToolDeclaration",
    "ClientToolResult",
    "ClientTools",
    "Command",
    "CompactConversation",
    "ConfirmTool",
    "DeleteConversation",
    "EditMessage",
    "Feedback",
    "ListConversations",
    "ListReviews",
    "LoadConversation",
    "NewConversation",
    "PageContext",
    "Ping",
    "Regenerate",
    "RenameConversation",
    "ReviewTool",
    "Stop",
    "UserMessage",
    "parse_command",
]

MAX_CONTENT_CHARS = 8_000


class _Command(BaseModel):
    # Unknown fields are refused: a typo in a field name is a client bug worth reporting.
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


# --- client → server -------------------------------------------------------------------------


MAX_ROUTE_CHARS = 256
# Control characters and line or paragraph separators: the route is quoted to the model, and a line
# break in it could pose as a section of the prompt.
_NOT_IN_ROUTE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _path_only(route: str) -> str:
    if not route.startswith("/") or _NOT_IN_ROUTE.search(route):
        raise ValueError("must be a path starting with /, on one line, without control characters")
    return route


class PageContext(_Command):
    """The page the user is on (SPEC §6): its route (a path, at most 256 characters), and the entity
    it shows if the client knows it."""

    route: Annotated[str, StringConstraints(max_length=MAX_ROUTE_CHARS), AfterValidator(_path_only)]
    entity_type: Annotated[str, StringConstraints(max_length=64)] | None = None
    entity_id: Annotated[str, StringConstraints(max_length=128)] | None = None


class UserMessage(_Command):
    type: Literal["user_message"]
    # Length is checked after parsing so that over-long content gets `message_too_long`.
    content: str
    page_context: PageContext | None = None
    client_message_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    # Ids of the member's own uploads (SPEC §21).
    attachments: Annotated[list[UUID], Field(max_length=MAX_ATTACHMENTS)] | None = None


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


class CompactConversation(_Command):
    """Summarise the conversation's older messages now (SPEC §19), whatever its size."""

    type: Literal["compact_conversation"]
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


MAX_NOTE_CHARS = 2000


class ListReviews(_Command):
    """Reviewers (SPEC §23): the writes waiting for a reviewer holding one of this member's reviewer
    permissions, in their organization, oldest first; answered with `review_list`."""

    type: Literal["list_reviews"]


class ReviewTool(_Command):
    """Reviewers: approve or reject a review request, with an optional `note` the model is told.
    Answered once across tabs and instances (`not_found` afterwards, or once it expired, or for
    another organization's); never by its requester (`forbidden`). Approved, the write runs as the
    requester; either way the requester's conversation gets the outcome and a new answer."""

    type: Literal["review_tool"]
    review_id: UUID
    approved: bool
    note: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_NOTE_CHARS)] | None = None


class ClientToolDeclaration(_Command):
    """One tool of the host page (SPEC §18): `parameters` is a JSON schema of type object (at most
    8 KiB; strings, numbers, booleans, enums, arrays); `write: true` asks the user first."""

    name: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,47}$")]
    description: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    parameters: dict[str, Any]
    write: bool = False


class ClientTools(_Command):
    """The host page's tools (SPEC §18), at most 32, replacing this socket's previous set: offered
    to the model, with the member's server tools, in the answers this socket starts. A name a server
    tool has, or a bad schema, is `invalid_message` (naming it) and leaves the previous set."""

    type: Literal["client_tools"]
    tools: Annotated[list[ClientToolDeclaration], Field(max_length=32)]


class ClientToolResult(_Command):
    """The page's answer to `client_tool_call`: `data` (at most 64 KiB as JSON) when `ok`, else
    `error`, a message the model reads. A call answered already, timed out, or another member's is
    `not_found`."""

    type: Literal["client_tool_result"]
    call_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    ok: bool
    data: Any = None
    error: Annotated[str, StringConstraints(max_length=2000)] | None = None


class AnswerQuestion(_Command):
    """The user's answers to an `ask_user` form (SPEC §17): `answers` maps each question's `id` to
    its value (text, one option, a list of options, a number, a `YYYY-MM-DD` date, a boolean), or
    `cancelled: true` declines them all. Answers that do not fit their questions (type, options,
    a required answer missing) get `invalid_message` with the `question_id` and leave the question
    open; answers pass the guards like a message. Accepted, they become the tool's result and a new
    answer follows in the conversation. Answered already, expired, unknown or another member's:
    `not_found`."""

    type: Literal["answer_question"]
    question_id: UUID
    answers: dict[Annotated[str, StringConstraints(max_length=64)], Any] | None = Field(
        default=None, max_length=16
    )
    cancelled: bool = False


Command = Annotated[
    UserMessage
    | NewConversation
    | ListConversations
    | LoadConversation
    | Stop
    | ConfirmTool
    | RenameConversation
    | DeleteConversation
    | CompactConversation
    | Feedback
    | Regenerate
    | EditMessage
    | Ping
    | Authenticate
    | ListReviews
    | ReviewTool
    | AnswerQuestion
    | ClientTools
    | ClientToolResult,
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
