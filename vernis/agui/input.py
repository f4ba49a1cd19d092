"""A `RunAgentInput` body (camelCase, `ag-ui-protocol`'s model) as the `RunRequest` Vernis acts on.

Sans-I/O: bytes in, a `RunRequest` or a `BadInput` naming the status and the field out.
- `threadId` must be a UUID (a Vernis conversation id): else 400.
- The new user message's image and document parts name the member's uploads (SPEC §21): a `file`
  source whose `value` is an `attachment_id` from `POST /api/assistant/attachments`, at most
  `MAX_ATTACHMENTS`; inline data and URLs are refused (422: upload the file first).
- The new user message is the last `user` message of `messages` (Vernis keeps the history, so the
  others are ignored); its text parts joined, at most `MAX_CONTENT_CHARS`; its `id` (1-128
  characters) makes the request idempotent.
- `resume` entries name interrupts by id (a UUID: an approval or a question).
- `context` entries are page context: at most `MAX_CONTEXT_ENTRIES`, each cut to
  `MAX_CONTEXT_CHARS`, the rest dropped (and counted); one whose description is `route` (or `page`)
  and whose value is a path names the page the user is on.
- The `tool` messages that end `messages` are the page's results of the calls the previous run
  handed it; `tools` are the page's tools for this run (`metadata.write: true`: approved first).
- A body that is not a `RunAgentInput` is 422, naming the first field at fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import orjson
from ag_ui.core import DocumentPart, ImagePart, RunAgentInput, TextPart, ToolMessage, UserMessage
from pydantic import ValidationError

from vernis.agui.run import Resume, RunRequest, ToolResult, UserTurn
from vernis.attachments import MAX_ATTACHMENTS
from vernis.tools.client import ClientToolSpec

__all__ = [
    "MAX_CONTENT_CHARS",
    "MAX_CONTEXT_CHARS",
    "MAX_CONTEXT_ENTRIES",
    "MAX_MESSAGE_ID_CHARS",
    "BadInput",
    "parse_run_input",
]

MAX_CONTENT_CHARS = 8_000
MAX_MESSAGE_ID_CHARS = 128
# The page context a run may bring (`context`): this many entries, each cut to this many characters
# (its description to a tenth of it); the rest is dropped, and the answer is told so.
MAX_CONTEXT_ENTRIES = 20
MAX_CONTEXT_CHARS = 2_000
# A context entry with one of these descriptions and a path as its value names the page the user is
# on: Vernis resolves it to an entity as it does the panel's page context (SPEC §6).
ROUTE_DESCRIPTIONS = frozenset({"route", "page", "current page", "path"})


@dataclass(frozen=True, slots=True)
class BadInput(Exception):
    """The body cannot be run: the HTTP status, the Vernis error code, and a message naming the field."""

    status: int
    code: str
    message: str


def parse_run_input(body: bytes) -> tuple[RunAgentInput, RunRequest]:
    """The validated input and what it asks; raises `BadInput`."""
    try:
        parsed = RunAgentInput.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise BadInput(422, "invalid_message", f"Not a RunAgentInput: {field}: {first['msg']}.") from None
    try:
        thread_id = UUID(parsed.thread_id)
    except ValueError:
        raise BadInput(
            400, "invalid_message", "threadId must be a UUID (a Vernis conversation id)."
        ) from None
    message = _last_user_message(parsed)
    resume: list[Resume] = []
    for index, entry in enumerate(parsed.resume or ()):
        try:
            interrupt_id = UUID(entry.interrupt_id)
        except ValueError:
            raise BadInput(404, "not_found", f"resume.{index}.interruptId: no such interrupt.") from None
        resume.append(Resume(interrupt_id, entry.status == "resolved", entry.payload))
    results = _tool_results(parsed)
    if message is None and not resume and not results:
        raise BadInput(
            400,
            "invalid_message",
            "messages holds no user message and no tool result, and there is no resume.",
        )
    tools = None
    if parsed.tools is not None:
        tools = [
            ClientToolSpec(
                tool.name,
                tool.description,
                tool.parameters
                if isinstance(tool.parameters, dict)
                else {"type": "object", "properties": {}},
                writes=bool((tool.metadata or {}).get("write")),
            )
            for tool in parsed.tools
        ]
    context, route, dropped = _context(parsed)
    return parsed, RunRequest(
        thread_id=thread_id,
        run_id=parsed.run_id,
        message=message,
        resume=resume,
        results=results,
        tools=tools,
        context=context,
        context_dropped=dropped,
        route=route,
        versioned=parsed.protocol_version is not None,
    )


def _context(parsed: RunAgentInput) -> tuple[list[tuple[str, str]], str | None, int]:
    """The run's page context, bounded: (description, value) pairs, the page's route if one names
    it, and how many entries or characters were dropped."""
    entries = list(parsed.context or ())
    kept: list[tuple[str, str]] = []
    route = None
    dropped = max(0, len(entries) - MAX_CONTEXT_ENTRIES)
    for entry in entries[:MAX_CONTEXT_ENTRIES]:
        description = entry.description[: MAX_CONTEXT_CHARS // 10]
        value = entry.value
        if description.strip().lower() in ROUTE_DESCRIPTIONS and value.startswith("/") and len(value) <= 512:
            route = value
            continue
        if len(value) > MAX_CONTEXT_CHARS:
            value = value[:MAX_CONTEXT_CHARS]
            dropped += 1
        kept.append((description, value))
    return kept, route, dropped


def _tool_results(parsed: RunAgentInput) -> list[ToolResult]:
    """The `tool` messages at the end of `messages`: the page's results of the calls the previous run
    handed it (earlier ones are history, kept by Vernis)."""
    results: list[ToolResult] = []
    for message in reversed(parsed.messages):
        if not isinstance(message, ToolMessage):
            break
        text = (
            message.content
            if isinstance(message.content, str)
            else "\n".join(part.text for part in message.content if isinstance(part, TextPart))
        )
        data: Any
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            data = text
        results.append(ToolResult(message.tool_call_id, message.error is None, data, message.error))
    return results[::-1]


def _last_user_message(parsed: RunAgentInput) -> UserTurn | None:
    for index in range(len(parsed.messages) - 1, -1, -1):
        message = parsed.messages[index]
        if not isinstance(message, UserMessage):
            continue
        if isinstance(message.content, str):
            content = message.content
        else:
            content = "\n".join(part.text for part in message.content if isinstance(part, TextPart))
        where = f"messages.{index}"
        if not 1 <= len(message.id) <= MAX_MESSAGE_ID_CHARS:
            raise BadInput(422, "invalid_message", f"{where}.id must be 1-{MAX_MESSAGE_ID_CHARS} characters.")
        if not content.strip():
            raise BadInput(422, "invalid_message", f"{where}.content holds no text.")
        if len(content) > MAX_CONTENT_CHARS:
            raise BadInput(
                400, "message_too_long", f"{where}.content is longer than {MAX_CONTENT_CHARS} characters."
            )
        return UserTurn(message.id, content, _attachments(message, where))
    return None


def _attachments(message: UserMessage, where: str) -> tuple[UUID, ...]:
    """The uploads an image or document part names by a `file` source."""
    if isinstance(message.content, str):
        return ()
    ids: list[UUID] = []
    for index, part in enumerate(message.content):
        if not isinstance(part, ImagePart | DocumentPart):
            continue
        source = part.source
        try:
            if source.type != "file":
                raise ValueError
            ids.append(UUID(source.value))
        except ValueError:
            raise BadInput(
                422,
                "invalid_message",
                f"{where}.content.{index}.source: name an upload of POST /api/assistant/attachments "
                '({"type": "file", "value": "<attachment_id>"}); inline data and URLs are not accepted.',
            ) from None
    if len(ids) > MAX_ATTACHMENTS:
        raise BadInput(
            422, "invalid_message", f"{where}.content: at most {MAX_ATTACHMENTS} files per message."
        )
    return tuple(ids)
