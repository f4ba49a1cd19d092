"""MCP servers as toolkits (SPEC §14 item 4): a product's tools without Python.

Each `[[mcp_servers]]` entry of the configuration becomes an `McpToolkit` named after the server.
At start it connects over streamable HTTP (all servers at once, each within `connect_timeout`),
lists the server's tools and offers them as `<server>__<tool>`, with the server's input schema as
the arguments. A tool annotated `readOnlyHint: true` is a read (unless `trust_annotations = false`,
the default for a server marked `external = true`; the `read_only` / `always_approve` lists decide
tool by tool); every other tool is a write, which Vernis previews and runs only after the member
approved it, once. A tool whose name, title, description or schema the injection detector flags is
not offered at all.

Every tool of a server needs one permission, `permission` or `mcp:<name>`, which no role holds by
default: the host grants it in `[roles.<role>]` or in a token's `permissions` claim.

A server out of reach, at start or later, only leaves its tools out (a warning; reconnection with
backoff); when it answers again its tools come back, and a `tools/list_changed` notification makes
Vernis read its list again. Sockets that connect afterwards see the new list. A call that fails or
passes `timeout` is a tool error the model reads, and the answer goes on; a stop cancels a call in
flight. With `forward_member_token = true`, each call carries a token Vernis signs for this server
in the header `X-Vernis-Member-Token` (`vernis.identity.signing`: the member's `sub`, `org` and
permissions, audience `vernis-mcp:<name>`, five minutes at most), so the server acts as that user;
the member's own token, which would open a Vernis socket, never leaves Vernis.

A page's entity can be named by one of these tools (`[[pages]]` with `resolve = {tool, arg,
name_field}`): `page_resolver` calls the read tool as the member, with `{arg: entity id}`.

The SDK itself is used only in `vernis.tools._mcp_client`.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from pydantic import ValidationError

from vernis.config import McpServerEntry, PageResolve
from vernis.identity.signing import SigningKeys
from vernis.tools._mcp_client import (
    MEMBER_TOKEN_HEADER,
    McpConnection,
    RemoteTool,
    describe_failure,
    safe_url,
    stop_if_cancelled,
)
from vernis.tools._mcp_tools import (
    MAX_RESULT_BYTES,
    is_read,
    offered_name,
    result_data,
    to_tools,
    untrusted_metadata,
)
from vernis.tools.base import ToolContext, ToolFailure
from vernis.tools.toolkit import Entity, EntityResolver, Toolkit, ToolkitEnv, ToolkitError

__all__ = [
    "MAX_RESULT_BYTES",
    "MEMBER_TOKEN_HEADER",
    "McpToolkit",
    "RemoteTool",
    "is_read",
    "offered_name",
    "page_resolver",
    "result_data",
    "to_tools",
    "untrusted_metadata",
]

logger = logging.getLogger("vernis.tools.mcp")

_MAX_NAME = 200
_MAX_SUMMARY = 300


class McpToolkit(Toolkit[McpConnection]):
    """A configured MCP server as a toolkit. Its tools are those the server lists while connected.
    `signing` signs the tokens the server receives: required with `forward_member_token`."""

    def __init__(self, entry: McpServerEntry, signing: SigningKeys | None = None) -> None:
        if entry.forward_member_token and signing is None:
            raise ToolkitError(f"MCP server {entry.name!r}: forward_member_token needs Vernis's signing key")
        super().__init__(
            entry.name,
            description=f"The tools of the MCP server at {safe_url(entry.url)}",
            permissions={entry.tool_permission: f"Use the tools of the MCP server {entry.name!r}"},
            startup=self._startup,
            ready=self._ready,
            shutdown=self._shutdown,
        )
        self.entry = entry
        self.signing = signing

    async def probe(self, wait: float = 5.0) -> str | None:
        """Connect once (within `wait` seconds) and take the server's tools (`vernis check-config`):
        None, or why it cannot be reached. Raises `ToolkitError` when its tools cannot be offered."""
        try:
            listed = await McpConnection(self.entry, self._listed).probe(wait)
        except Exception as exc:
            stop_if_cancelled()
            return describe_failure(exc)
        self._listed(listed)
        return None

    async def _startup(self, env: ToolkitEnv) -> McpConnection:
        connection = McpConnection(self.entry, self._listed)
        connection.start()
        return connection

    async def _ready(self, connection: McpConnection) -> None:
        await connection.ready()

    async def _shutdown(self, connection: McpConnection) -> None:
        await connection.aclose()
        self.set_tools([])

    def _listed(self, listed: list[RemoteTool] | None) -> None:
        self.set_tools(to_tools(self.entry, listed, self.signing) if listed is not None else [])


def page_resolver(toolkit: McpToolkit, resolve: PageResolve) -> EntityResolver:
    """Names a page's entity by calling `resolve.tool` as the member, with `{resolve.arg: id}`, and
    reading `resolve.name_field` (and `summary_field`) of its structured content, or of its text
    when that is a JSON object. Nothing when the tool is not offered now, is not a read, is not
    the member's to use, or finds nothing."""

    async def resolve_entity(ctx: ToolContext[Any], entity_id: str) -> Entity | None:
        tool = toolkit.get(resolve.tool)
        if tool is None or tool.permission not in ctx.permissions:
            return None
        if tool.writes:
            logger.warning("pages are not resolved with %s: it is not a read tool", resolve.tool)
            return None
        try:
            args = tool.args.model_validate({resolve.arg: entity_id})
        except ValidationError:
            if not entity_id.isdigit():
                return None
            try:
                args = tool.args.model_validate({resolve.arg: int(entity_id)})
            except ValidationError:
                return None
        try:
            data = await tool.run(ctx, args)
        except ToolFailure as failure:
            logger.debug("resolving a page with %s: %s", resolve.tool, failure.code)
            return None
        record = _record(data)
        name = record.get(resolve.name_field)
        if not isinstance(name, str | int) or isinstance(name, bool) or not str(name).strip():
            return None
        summary = record.get(resolve.summary_field) if resolve.summary_field else None
        return Entity(
            str(name).strip()[:_MAX_NAME],
            str(summary).strip()[:_MAX_SUMMARY] if isinstance(summary, str | int | float) else "",
        )

    return resolve_entity


def _record(data: dict[str, Any]) -> dict[str, Any]:
    structured = data.get("data")
    if isinstance(structured, dict):
        return structured
    try:
        parsed = orjson.loads(data.get("text") or "null")
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
