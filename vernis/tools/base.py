"""A tool, declared once: what the model sees, who may use it, and what it runs (SPEC §5, §14).

Declare one with the `tool` decorator on a typed async function, or build a `Tool` directly:

    class FindTicketArgs(BaseModel):
        query: str = Field(description="Words from the subject.")

    @toolkit.tool(permission="ticket:view", category="Tickets")
    async def find_tickets(ctx: ToolContext[Api], args: FindTicketArgs) -> dict[str, Any]:
        \"\"\"Find tickets by subject.\"\"\"
        ...

The name is the function's, the description the docstring's first paragraph, the argument model
the annotation of the second parameter. A write (`writes=True`) needs a `preview`: it validates the
arguments against the data and returns exactly what would change, changing nothing. Permission
checks, argument validation, the result envelope, approvals, audit, dedup and loop refusal are the
framework's (`vernis.tools.runner`); a tool never does them itself.

A tool whose arguments are described by a JSON schema rather than a pydantic model (the tools of an
MCP server) takes `args=json_schema_args(schema)`: the model sees that schema as it is, and the
arguments are checked against it (with `jsonschema`) and kept as given.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from uuid import UUID, uuid4

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from vernis.identity.members import MemberInfo
from vernis.store.models import utcnow

__all__ = [
    "CONFIRMED",
    "JsonSchemaArgs",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolFunc",
    "error_envelope",
    "json_schema_args",
    "tool",
]

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

CONFIRMED = "confirmed"


class ToolFailure(Exception):
    """Raised by a tool for an error the model can recover from (unknown id, bad argument, ...)."""

    def __init__(self, code: str, message: str, *, retryable: bool = False, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.hint = hint


@dataclass(frozen=True, slots=True)
class ToolContext(Generic[R_co]):
    """What a running tool may know: who asks (the member, with the host's `sub` and `org`), with
    which permissions and token, in which conversation, and its toolkit's resources (what the
    toolkit's startup hook made: a database engine, an HTTP client to the host's API...)."""

    member: MemberInfo
    permissions: frozenset[str]
    conversation_id: UUID
    resources: R_co
    # The member's own token, to call the host's API as that user; the verified claims.
    token: str = field(default="", repr=False)
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # The assistant message the calls belong to, and when the user sent the message it answers.
    message_id: UUID = field(default_factory=uuid4)
    asked_at: datetime = field(default_factory=utcnow)
    # The text of that message (as the guards passed it): a write confirmed in the chat runs only
    # when it approves the change (`vernis.tools.consent`).
    user_message: str = field(default="", repr=False)

    @property
    def organization_id(self) -> UUID:
        return self.member.organization_id


ToolFunc = Callable[[ToolContext[Any], Any], Awaitable[Any]]


def error_envelope(
    code: str, message: str, *, retryable: bool = False, hint: str | None = None
) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message, "retryable": retryable, "hint": hint}}


_MAX_SCHEMA_PROBLEMS = 3


class JsonSchemaArgs(BaseModel):
    """Arguments checked against a raw JSON schema instead of declared fields: any keys, kept as
    given (`model_dump()` returns them). Made per schema by `json_schema_args`."""

    model_config = ConfigDict(extra="allow", frozen=True)

    json_schema: typing.ClassVar[dict[str, Any]] = {"type": "object"}
    _validator: typing.ClassVar[Any] = None

    @model_validator(mode="before")
    @classmethod
    def _against_schema(cls, data: Any) -> Any:
        if cls._validator is None:
            raise TypeError("make argument models with json_schema_args(schema)")
        errors = sorted(cls._validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
        if errors:
            problems = "; ".join(
                f"{'.'.join(map(str, e.absolute_path)) or 'arguments'}: {e.message}"
                for e in errors[:_MAX_SCHEMA_PROBLEMS]
            )
            raise PydanticCustomError("json_schema", "{problems}", {"problems": problems})
        return data


def json_schema_args(schema: Mapping[str, Any]) -> type[JsonSchemaArgs]:
    """An argument model for `schema` (an object schema). Raises `ValueError` if it is not a valid
    JSON schema."""
    # Here, not at the top: only tools with a raw schema need it, and it is slow to import.
    import jsonschema  # type: ignore[import-untyped]

    schema = dict(schema)
    checker = jsonschema.validators.validator_for(schema)
    try:
        checker.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"invalid JSON schema: {exc.message}") from None
    if schema.get("type") != "object":
        raise ValueError("the arguments' JSON schema must be of type object")
    return type(
        "JsonArguments",
        (JsonSchemaArgs,),
        {"__module__": __name__, "json_schema": schema, "_validator": checker(schema)},
    )


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool, declared once. A write tool (`writes=True`) must have a `preview`."""

    name: str
    category: str
    description: str
    args: type[BaseModel]
    permission: str
    writes: bool
    run: ToolFunc
    # For writes: validates against the data and returns exactly what would change. Changes nothing.
    preview: ToolFunc | None = None
    # The toolkit that brought it (set when a toolkit adds it): whose resources it receives.
    toolkit: str = ""
    # Built once: generating a JSON schema costs about half a millisecond a tool, every answer.
    _definition: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.writes and self.preview is None:
            raise ValueError(f"write tool {self.name!r} needs a preview")
        if not self.name.replace("_", "").replace("-", "").isalnum() or len(self.name) > 64:
            raise ValueError(f"tool name {self.name!r}: letters, digits, _ and - only, at most 64")

    def definition(self) -> dict[str, Any]:
        """The OpenAI function definition the model sees (shared: do not modify it)."""
        if self._definition is None:
            object.__setattr__(self, "_definition", self._build_definition())
        assert self._definition is not None
        return self._definition

    def _build_definition(self) -> dict[str, Any]:
        if issubclass(self.args, JsonSchemaArgs):
            schema = {k: v for k, v in self.args.json_schema.items() if k != "$schema"}
        else:
            schema = self.args.model_json_schema()
        schema.pop("title", None)
        description = self.description
        if self.writes:
            properties = dict(schema.get("properties", {}))
            properties[CONFIRMED] = {
                "type": "boolean",
                "description": "Leave out to get a preview. True only after the user approved that preview.",
            }
            schema["properties"] = properties
            description += (
                " Changes data: call once to preview, then again with confirmed=true after the user agrees."
            )
        return {
            "type": "function",
            "function": {"name": self.name, "description": description, "parameters": schema},
        }


def tool(
    *,
    permission: str,
    category: str = "General",
    writes: bool = False,
    preview: ToolFunc | None = None,
    name: str | None = None,
    description: str | None = None,
) -> Callable[[ToolFunc], Tool]:
    """Declare a tool from a typed async function `(ctx, args: SomeModel) -> result`."""

    def declare(func: ToolFunc) -> Tool:
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"tool {func.__name__!r} must be an async function")
        parameters = list(inspect.signature(func).parameters)
        hints = typing.get_type_hints(func)
        args = hints.get(parameters[1]) if len(parameters) == 2 else None
        if not (isinstance(args, type) and issubclass(args, BaseModel)):
            raise TypeError(
                f"tool {func.__name__!r} must take (ctx, args) with args annotated by a pydantic model"
            )
        text = description or inspect.getdoc(func) or ""
        summary = " ".join(text.split("\n\n", 1)[0].split())
        if not summary:
            raise TypeError(f"tool {func.__name__!r} needs a description (a docstring)")
        return Tool(name or func.__name__, category, summary, args, permission, writes, func, preview=preview)

    return declare
