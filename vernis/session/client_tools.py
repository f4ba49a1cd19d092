"""The host page's tools on a socket (SPEC §18): `client_tools` declares them, `client_tool_result`
answers a call of one (`vernis.tools.client` runs them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vernis.exceptions import InvalidMessage, NotFound
from vernis.tools.base import Tool
from vernis.tools.client import MAX_RESULT_BYTES, ClientToolSpec, as_tool, check_parameters, with_client_tools

if TYPE_CHECKING:
    from vernis.session.state import Session

__all__ = ["client_tool_result", "declare_client_tools"]


def declare_client_tools(session: Session, specs: Sequence[ClientToolSpec]) -> None:
    """Replace the socket's page tools with `specs`. Raises `InvalidMessage` naming the first tool
    that is refused (a server tool's name, a name given twice, a bad schema); the previous set then
    stays."""
    services = session.services
    broker = services.client_tools
    tools: dict[str, Tool] = {}
    for spec in specs:
        if spec.name in tools:
            raise InvalidMessage(f"Invalid `client_tools` command: {spec.name!r} is declared twice.")
        if services.catalog.registry.get(spec.name) is not None:
            raise InvalidMessage(
                f"Invalid `client_tools` command: {spec.name!r} is the name of a server tool; "
                "give the page's tool another name."
            )
        try:
            check_parameters(spec.name, spec.parameters)
        except ValueError as exc:
            raise InvalidMessage(f"Invalid `client_tools` command: {exc}.") from None
        tools[spec.name] = as_tool(spec, session, broker)
    session.client_tools = tools
    session.toolset = with_client_tools(services.catalog.registry.for_member(session.permissions), tools)
    if tools:
        broker.attach(session)
    else:
        broker.detach(session)


def client_tool_result(session: Session, call_id: str, ok: bool, data: Any, error: str | None) -> None:
    """The page's answer to a `client_tool_call`. Raises `NotFound` for a call that does not wait
    for this member, `InvalidMessage` for data over `MAX_RESULT_BYTES` (the call then ends as an error the
    model reads)."""
    taken = session.services.client_tools.resolve(session.member.id, call_id, ok, data, error)
    if taken is None:
        raise NotFound("No such page tool call: it was answered already, it timed out, or it is not yours.")
    if taken == "too_large":
        raise InvalidMessage(
            f"Invalid `client_tool_result` command: data is larger than {MAX_RESULT_BYTES // 1024} KiB."
        )
