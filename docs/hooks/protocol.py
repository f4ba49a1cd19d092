"""MkDocs hook: the protocol page's tables, generated from the wire models (`vernis.ws.protocol`).

Each placeholder in a page is replaced by a table built from the code, so the documented protocol
cannot drift from the one the server speaks:

- `<!-- protocol:commands -->`: every member of the `Command` union (client to server);
- `<!-- protocol:events -->`: every member of the `Event` union (server to client);
- `<!-- protocol:close-codes -->`: the `CloseCode` enum;
- `<!-- protocol:max-content -->`: `MAX_CONTENT_CHARS`, written as a number.

A row's description is the model's docstring (its first line) or, while the model has none, the
entry of `SUMMARIES` here. A message with neither, or an entry naming no message, is a warning, and
`mkdocs build --strict` fails on it.
"""

from __future__ import annotations

import enum
import json
import logging
import types
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from uuid import UUID

import annotated_types
from pydantic import BaseModel, StringConstraints
from pydantic.fields import FieldInfo

from vernis.ws import protocol
from vernis.ws.closecodes import CloseCode

log = logging.getLogger("mkdocs.hooks.protocol")

# What each message means, for the wire models that have no docstring yet.
SUMMARIES = {
    "user_message": "Chat: a message to the assistant. A repeated `client_message_id` is answered once.",
    "new_conversation": "Show a pending conversation; nothing is stored until the next message.",
    "list_conversations": "The 20 most recently updated conversations; `next_before` is the cursor for more.",
    "load_conversation": "Switch to a conversation: `conversation_loaded`, its history, `history_end`. "
    "With `after_seq`: resume.",
    "stop": "Stop the answer in flight (from any tab that shows the conversation).",
    "confirm_tool": "Answer a previewed write; its card gets `tool_call_completed`.",
    "rename_conversation": "Rename a conversation; every tab showing it gets `title_updated`.",
    "delete_conversation": "Delete a conversation; the reply is a fresh `conversation_list`.",
    "feedback": "Rate an answer, with an optional comment.",
    "regenerate": "Answer the last message again; the earlier answer is kept as a previous version.",
    "edit_message": "Replace the last user message (named by its id or its answer's) and answer it again; "
    "the earlier exchange is kept, `superseded`.",
    "ping": "Answered with `pong`.",
    "authenticate": "A new token for the same member: new expiry, role and permissions. Another member, "
    "or a bad token, closes the socket with 4401.",
    "conversation_loaded": "The socket shows this conversation now (a null id: a pending one); "
    "its history follows.",
    "history_message": "One stored message of the conversation's history.",
    "history_end": "The history is complete, current to this `seq`.",
    "conversation_created": "A pending conversation was stored, with its first message.",
    "conversation_list": "The reply to `list_conversations` (and to `delete_conversation`).",
    "assistant_start": "An answer begins. `resumed`: this socket joined it mid-answer, and the text so far "
    "follows in one `text_delta`.",
    "text_delta": "The next piece of the answer's text.",
    "reasoning_delta": "The next piece of the model's reasoning, apart from the answer's text "
    "([the model layer](model.md#reasoning)).",
    "tool_call_started": "The assistant calls a tool, with these arguments.",
    "tool_call_completed": "A tool call ended: its status and the result envelope.",
    "confirmation_required": "A write waits for the user's approval: what it would change.",
    "assistant_end": "The answer ended; `stopped` when `stop` ended it; `model`: the model that answered "
    "(a fallback's when one took over).",
    "title_updated": "The conversation's title changed.",
    "error": "A command was refused or an answer failed; `code` says which.",
    "pong": "The reply to `ping`.",
}

# What each close code means; the enum's comments are not readable at build time.
CLOSE_CODES = {
    CloseCode.NORMAL: "normal closure",
    CloseCode.GOING_AWAY: "the other end is going away (a closed tab)",
    CloseCode.POLICY_VIOLATION: "command flood (`VERNIS_FLOOD_LIMIT`)",
    CloseCode.MESSAGE_TOO_BIG: "frame over `VERNIS_MAX_FRAME_BYTES` (64 KiB)",
    CloseCode.INTERNAL_ERROR: "internal error; uvicorn also closes with it when its own keepalive times out",
    CloseCode.SERVICE_RESTART: "the server is shutting down or restarting: reconnect",
    CloseCode.TRY_AGAIN_LATER: "the client reads too slowly to keep up: reconnect and resume",
    CloseCode.AUTH_EXPIRED: "token expired, replaced by an invalid one, member removed, "
    "or their tokens revoked (admin API)",
    CloseCode.KEEPALIVE_TIMEOUT: "no pong to a keepalive ping",
}

_SIMPLE = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    UUID: "UUID",
    datetime: "date-time (ISO 8601)",
    Any: "any JSON value",
}


def members(union: Any) -> list[type[BaseModel]]:
    """The models of a closed union, `Annotated[..., Field(discriminator=...)]` or bare."""
    if get_origin(union) is Annotated:
        union = get_args(union)[0]
    return list(get_args(union))


def wire_type(model: type[BaseModel]) -> str:
    """The value of a model's `type` field on the wire."""
    (value,) = get_args(model.model_fields["type"].annotation)
    return str(value)


def commands_table() -> str:
    return _table(members(protocol.Command), commands=True)


def events_table() -> str:
    return _table(members(protocol.Event), commands=False)


def close_codes_table() -> str:
    rows = ["| code | name | meaning |", "|---|---|---|"]
    for code in CloseCode:
        meaning = CLOSE_CODES.get(code)
        if meaning is None:
            log.warning("close code %s (%d) has no meaning in docs/hooks/protocol.py", code.name, code)
        rows.append(f"| {int(code)} | `{code.name}` | {meaning or ''} |")
    return "\n".join(rows)


def check_summaries() -> None:
    """Warn about summaries that name no message (left behind when one was renamed or removed)."""
    known = {wire_type(model) for model in members(protocol.Command) + members(protocol.Event)}
    for name in sorted(SUMMARIES.keys() - known):
        log.warning("docs/hooks/protocol.py describes %r, which is not a message of vernis.ws.protocol", name)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if "<!-- protocol:" not in markdown:
        return markdown
    check_summaries()
    replacements = {
        "<!-- protocol:commands -->": commands_table,
        "<!-- protocol:events -->": events_table,
        "<!-- protocol:close-codes -->": close_codes_table,
        "<!-- protocol:max-content -->": lambda: f"{protocol.MAX_CONTENT_CHARS:,}",
    }
    for placeholder, make in replacements.items():
        if placeholder in markdown:
            markdown = markdown.replace(placeholder, make())
    return markdown


# --- rendering ---------------------------------------------------------------------------------


def _table(models: Sequence[type[BaseModel]], *, commands: bool) -> str:
    nested: dict[str, type[BaseModel]] = {}
    if commands:
        rows = ["| `type` | fields | |", "|---|---|---|"]
    else:
        rows = ["| `type` | fields | `seq` | |", "|---|---|---|---|"]
    for model in models:
        fields = [
            _field(name, info, commands=commands, nested=nested)
            for name, info in model.model_fields.items()
            if name not in ("type", "seq")
        ]
        cells = [f"`{wire_type(model)}`", "<br>".join(fields) or "none"]
        if not commands:
            cells.append("yes" if "seq" in model.model_fields else "no")
        cells.append(_summary(model))
        rows.append("| " + " | ".join(cells) + " |")
    parts = ["\n".join(rows)]
    for name, model in nested.items():
        parts.append(_nested(name, model, commands=commands))
    return "\n\n".join(parts)


def _nested(name: str, model: type[BaseModel], *, commands: bool) -> str:
    inner: dict[str, type[BaseModel]] = {}
    rows = [
        f"**`{name}`**, an object:\n{{ #{_anchor(name)} }}",
        "",
        "| field | |",
        "|---|---|",
    ]
    for field_name, info in model.model_fields.items():
        line = _field(field_name, info, commands=commands, nested=inner)
        head, _, rest = line.partition(": ")
        rows.append(f"| {head} | {rest} |")
    return "\n".join(rows)


def _summary(model: type[BaseModel]) -> str:
    doc = (model.__doc__ or "").strip()
    if doc:
        return doc.splitlines()[0]
    summary = SUMMARIES.get(wire_type(model))
    if summary is None:
        log.warning(
            "%s (%r) has no docstring and no entry in SUMMARIES (docs/hooks/protocol.py)",
            model.__name__,
            wire_type(model),
        )
        return ""
    return summary


def _field(name: str, info: FieldInfo, *, commands: bool, nested: dict[str, type[BaseModel]]) -> str:
    kind, nullable, constraints = _describe(info.annotation, info.metadata, nested)
    if info.is_required():
        presence = "required" if commands else "always"
        if nullable:
            presence += ", may be null"
    else:
        presence = "optional" if commands else "when set"
    return f"`{name}`: " + ", ".join([kind, presence, *constraints])


def _describe(
    annotation: Any, metadata: Sequence[Any], nested: dict[str, type[BaseModel]]
) -> tuple[str, bool, list[str]]:
    """A field's type in words, whether it may be null, and its constraints."""
    constraints = list(_constraints(metadata))
    nullable = False
    if get_origin(annotation) in (Union, types.UnionType):
        options = [arg for arg in get_args(annotation) if arg is not type(None)]
        nullable = len(options) < len(get_args(annotation))
        if len(options) > 1:
            return " or ".join(_describe(arg, (), nested)[0] for arg in options), nullable, constraints
        annotation = options[0]
    if get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        constraints.extend(_constraints(extra))
    return _name(annotation, nested), nullable, constraints


def _name(annotation: Any, nested: dict[str, type[BaseModel]]) -> str:
    if annotation in _SIMPLE:
        return _SIMPLE[annotation]
    origin = get_origin(annotation)
    if origin is Literal:
        return " or ".join(f"`{json.dumps(value)}`" for value in get_args(annotation))
    if origin is list:
        (item,) = get_args(annotation)
        return f"array of {_plural(_describe(item, (), nested)[0])}"
    if origin is dict:
        return "object"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        nested[annotation.__name__] = annotation
        return f"[`{annotation.__name__}`](#{_anchor(annotation.__name__)})"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " or ".join(f"`{json.dumps(member.value)}`" for member in annotation)
    raise TypeError(f"docs/hooks/protocol.py cannot describe the type {annotation!r}")


def _plural(kind: str) -> str:
    return {"object": "objects", "string": "strings", "integer": "integers"}.get(kind, kind)


def _anchor(name: str) -> str:
    return f"wire-{name.lower()}"


def _constraints(metadata: Sequence[Any]) -> Iterator[str]:
    for item in metadata:
        if isinstance(item, FieldInfo):
            yield from _constraints(item.metadata)
        elif isinstance(item, StringConstraints):
            yield from _string_constraints(item)
        elif isinstance(item, annotated_types.Ge):
            yield f"at least {item.ge}"
        elif isinstance(item, annotated_types.Gt):
            yield f"more than {item.gt}"
        elif isinstance(item, annotated_types.Le):
            yield f"at most {item.le}"
        elif isinstance(item, annotated_types.Lt):
            yield f"less than {item.lt}"
        elif isinstance(item, annotated_types.MinLen):
            yield f"at least {item.min_length:,} long"
        elif isinstance(item, annotated_types.MaxLen):
            yield f"at most {item.max_length:,} long"


def _string_constraints(item: StringConstraints) -> Iterator[str]:
    low, high = item.min_length, item.max_length
    if low is not None and high is not None:
        yield f"{low:,} to {high:,} characters"
    elif high is not None:
        yield f"at most {high:,} characters"
    elif low is not None:
        yield f"at least {low:,} characters"
    if item.pattern is not None:
        yield f"matches `{item.pattern}`"
    if item.strip_whitespace:
        yield "surrounding whitespace removed"
