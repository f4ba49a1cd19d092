"""An MCP server's tools as Vernis tools: their names, arguments, read or write, and results.

<server>__<tool>      the name the model sees: letters, digits, _ and -, at most 64
arguments             the server's input schema, as it is; checked with jsonschema
read                  readOnlyHint true (if trust_annotations), or listed in read_only
write                 anything else, or listed in always_approve: previewed and approved first;
                      the preview is {"action": <title>, "tool": <name>, "arguments": ...}
member's token        with forward_member_token, one Vernis signs for this server per call
                      (vernis.identity.signing), never the member's own
result                {"text", "data" (structured content), "content" (a line per other
                      part), "note"}, at most about 16 KB; an error result is a ToolFailure

A server's tool metadata is untrusted input: the model reads its name, title, description and
input schema as instructions. A tool whose metadata the injection detector flags (vernis.guards,
the default policy) is left out, with a warning naming the server and the tool, never the text.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from collections.abc import Iterator
from typing import Any

import orjson
from pydantic import BaseModel

from vernis.config import McpServerEntry
from vernis.guards import Action, Category, GuardPolicy, OrganizationPolicy, scan_text
from vernis.identity.signing import SigningKeys
from vernis.tools._mcp_client import McpConnection, RemoteResult, RemoteTool
from vernis.tools.base import Tool, ToolContext, ToolFailure, json_schema_args
from vernis.tools.toolkit import ToolkitError

__all__ = ["MAX_RESULT_BYTES", "is_read", "offered_name", "result_data", "to_tools", "untrusted_metadata"]

logger = logging.getLogger("vernis.tools.mcp")

MAX_RESULT_BYTES = 16 * 1024
MAX_NAME = 64
_MAX_DESCRIPTION = 1024
_MAX_ERROR = 2000
_MAX_PARTS = 20
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def offered_name(server: str, tool: str) -> str:
    """`<server>__<tool>`, made a valid OpenAI function name: other characters become `_`, and a
    name over 64 characters is cut and ends with a hash of the whole, so it stays distinct."""
    whole = f"{server}__{tool}"
    name = _UNSAFE.sub("_", whole)
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(whole.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - 9]}_{digest}"
    return name


def is_read(entry: McpServerEntry, tool: RemoteTool) -> bool:
    """Whether `tool` runs without asking first: the configuration's lists, then the annotation."""
    if tool.name in entry.always_approve:
        return False
    if tool.name in entry.read_only:
        return True
    return entry.trust_annotations and tool.read_only_hint is True


def untrusted_metadata(tool: RemoteTool) -> bool:
    """Whether the injection detector flags what the model would read of `tool`: its name, title,
    description, and every text of its input schema (parameter descriptions, titles, enums...).
    A scan that fails counts as flagged."""
    text = "\n\n".join((tool.name, tool.title, tool.description, *_texts(tool.input_schema)))
    try:
        result = scan_text(text, _metadata_policy(), None, categories=())
    except Exception:
        logger.exception("scanning the metadata of an MCP tool failed; the tool is left out")
        return True
    return any(
        decided.finding.category is Category.INJECTION and decided.action is not Action.ALLOW
        for decided in result.findings
    )


def to_tools(
    entry: McpServerEntry, listed: list[RemoteTool], signing: SigningKeys | None = None
) -> list[Tool]:
    """The server's tools as Vernis offers them (allow / deny applied). A tool whose input schema is
    not a valid object schema, or whose metadata reads as instructions (`untrusted_metadata`), is
    left out, with a warning. `signing` signs the tokens the server receives; required with
    `forward_member_token`. Raises `ToolkitError` when two of its tools come out with the same name."""
    if entry.forward_member_token and signing is None:
        raise ToolkitError(f"MCP server {entry.name!r}: forward_member_token needs Vernis's signing key")
    tools: list[Tool] = []
    named: dict[str, str] = {}
    for remote in listed:
        if (entry.allow and remote.name not in entry.allow) or remote.name in entry.deny:
            continue
        if untrusted_metadata(remote):
            logger.warning(
                "MCP server %s: the tool %r is left out: its description, title or schema reads as "
                "instructions to the assistant",
                entry.name,
                remote.name[:MAX_NAME],
            )
            continue
        name = offered_name(entry.name, remote.name)
        if name in named:
            raise ToolkitError(
                f"MCP server {entry.name!r}: its tools {named[name]!r} and {remote.name!r} are both "
                f"offered as {name!r}; leave one out with deny = [...] in its [[mcp_servers]] table"
            )
        named[name] = remote.name
        try:
            args = json_schema_args(remote.input_schema)
        except ValueError as exc:
            logger.warning("MCP server %s: the tool %s is left out: %s", entry.name, remote.name, exc)
            continue
        tools.append(_tool(entry, remote, name, args, signing))
    return tools


@functools.cache
def _metadata_policy() -> OrganizationPolicy:
    # The built-in defaults: no organization's settings apply to what a server says of its tools.
    return GuardPolicy().for_organization("")


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield key
            yield from _texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item)


def _tool(
    entry: McpServerEntry, remote: RemoteTool, name: str, args: type[BaseModel], signing: SigningKeys | None
) -> Tool:
    read = is_read(entry, remote)

    async def run(ctx: ToolContext[Any], arguments: BaseModel) -> dict[str, Any]:
        connection = _connection(ctx, entry)
        token = None
        if entry.forward_member_token and signing is not None:
            expires = ctx.claims.get("exp")
            token = signing.server_token(
                ctx.member,
                ctx.permissions,
                server=entry.name,
                not_after=expires
                if isinstance(expires, int | float) and not isinstance(expires, bool)
                else None,
            )
        result = await connection.call(remote.name, arguments.model_dump(mode="json"), token=token, read=read)
        return result_data(result)

    async def preview(ctx: ToolContext[Any], arguments: BaseModel) -> dict[str, Any]:
        return {"action": remote.title, "tool": name, "arguments": arguments.model_dump(mode="json")}

    description = " ".join((remote.description or remote.title).split())
    if len(description) > _MAX_DESCRIPTION:
        description = description[: _MAX_DESCRIPTION - 1] + "…"
    return Tool(
        name,
        entry.name,
        description,
        args,
        entry.tool_permission,
        not read,
        run,
        preview=None if read else preview,
        toolkit=entry.name,
    )


def _connection(ctx: ToolContext[Any], entry: McpServerEntry) -> McpConnection:
    if not isinstance(ctx.resources, McpConnection):
        raise ToolFailure("unavailable", f"The {entry.name} service is not connected.", retryable=True)
    return ctx.resources


def result_data(result: RemoteResult) -> dict[str, Any]:
    """What the model reads of a result, at most about `MAX_RESULT_BYTES`. Raises `ToolFailure` for
    a result the server marked as an error."""
    text = "\n".join(result.text)
    if result.is_error:
        raise ToolFailure(
            "tool_error",
            _cut(text, _MAX_ERROR)[0] or "The tool reported an error without saying which.",
            hint="Fix the arguments if the message says how; else tell the user it did not work.",
        )
    data: dict[str, Any] = {}
    notes: list[str] = []
    budget = MAX_RESULT_BYTES
    structured = result.structured
    if isinstance(structured, dict) and len(structured) == 1 and next(iter(structured.values())) == text:
        # A plain answer the server also wrapped as structured content ({"result": text}).
        structured = None
    if structured is not None:
        encoded = orjson.dumps(structured)
        if len(encoded) <= budget:
            data["data"] = structured
            budget -= len(encoded)
            if _same(text, structured):
                text = ""
        else:
            notes.append(f"The structured content ({_kb(len(encoded))}) was too large and is left out.")
    if text:
        data["text"], cut = _cut(text, max(budget, MAX_RESULT_BYTES // 4))
        if cut:
            notes.append(f"The text was cut to its first {_kb(len(data['text'].encode()))} of {cut}.")
    if result.other:
        data["content"] = result.other[:_MAX_PARTS]
        if len(result.other) > _MAX_PARTS:
            notes.append(f"{len(result.other) - _MAX_PARTS} more parts are not listed.")
    if notes:
        data["note"] = " ".join(notes)
    return data


def _cut(text: str, limit: int) -> tuple[str, str | None]:
    """`text` at most `limit` bytes of UTF-8, and its whole size when it was cut."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text, None
    return encoded[:limit].decode(errors="ignore"), _kb(len(encoded))


def _same(text: str, structured: Any) -> bool:
    """Whether the text is only the structured content again, as JSON (as many servers send it)."""
    try:
        return bool(text) and orjson.loads(text) == structured
    except orjson.JSONDecodeError:
        return False


def _kb(size: int) -> str:
    return f"{size} bytes" if size < 1024 else f"{round(size / 1024)} KB"
