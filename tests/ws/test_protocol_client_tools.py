"""The wire side of the host page's tools (SPEC §18): `client_tools` and `client_tool_result` parse
and bound what they carry; `client_tool_call` encodes to its model's frame, without `seq`."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from vernis.conversation import events
from vernis.exceptions import InvalidMessage
from vernis.ws import protocol
from vernis.ws.encoder import encode

TOOL = {"name": "selected_rows", "description": "The rows selected.", "parameters": {"type": "object"}}


def parse(frame: dict[str, Any]) -> protocol.Command:
    return protocol.parse_command(orjson.dumps(frame))


def test_client_tools_parse_with_write_false_by_default() -> None:
    """A declaration parses; `write` is false unless given, and an empty list is a valid set (none)."""
    command = parse({"type": "client_tools", "tools": [TOOL, {**TOOL, "name": "fill_form", "write": True}]})
    assert isinstance(command, protocol.ClientTools)
    assert [(tool.name, tool.write) for tool in command.tools] == [
        ("selected_rows", False),
        ("fill_form", True),
    ]
    assert isinstance(parse({"type": "client_tools", "tools": []}), protocol.ClientTools)


@pytest.mark.parametrize(
    ("frame", "fragment"),
    [
        ({"type": "client_tools", "tools": [TOOL] * 33}, "tools: List should have at most 32 items"),
        ({"type": "client_tools", "tools": [{**TOOL, "name": "9lives"}]}, "tools.0.name"),
        ({"type": "client_tools", "tools": [{**TOOL, "name": "a" * 49}]}, "tools.0.name"),
        ({"type": "client_tools", "tools": [{**TOOL, "description": ""}]}, "tools.0.description"),
        ({"type": "client_tools", "tools": [{**TOOL, "parameters": []}]}, "tools.0.parameters"),
        ({"type": "client_tools", "tools": [{**TOOL, "handler": "x"}]}, "tools.0.handler"),
        ({"type": "client_tool_result", "call_id": "", "ok": True}, "call_id"),
        ({"type": "client_tool_result", "call_id": "c", "ok": False, "error": "x" * 2001}, "error"),
        ({"type": "client_tool_result", "call_id": "c"}, "ok"),
    ],
    ids=[
        "33-tools",
        "digit-first",
        "49-chars",
        "no-description",
        "array-schema",
        "extra-field",
        "no-call",
        "long-error",
        "no-ok",
    ],
)
def test_bad_frames_are_invalid_message(frame: dict[str, Any], fragment: str) -> None:
    """Too many tools, a bad name, an empty description, a schema that is not an object, unknown fields, an empty call id, a long error or no `ok` are invalid_message naming the field."""
    with pytest.raises(InvalidMessage) as refused:
        parse(frame)
    assert fragment in refused.value.public_message


def test_a_result_carries_any_json_data() -> None:
    """`data` is any JSON value (left out: null); `error` a message."""
    command = parse({"type": "client_tool_result", "call_id": "ct_1", "ok": True, "data": [1, {"a": None}]})
    assert isinstance(command, protocol.ClientToolResult)
    assert (command.ok, command.data, command.error) == (True, [1, {"a": None}], None)


def test_client_tool_call_encodes_without_seq() -> None:
    """`client_tool_call` goes to one socket, outside the conversation's numbering: no `seq`."""
    frame = orjson.loads(encode(events.ClientToolCall("ct_1", "navigate", {"path": "/contacts/1"}), 7))
    assert frame == {
        "type": "client_tool_call",
        "call_id": "ct_1",
        "tool_name": "navigate",
        "arguments": {"path": "/contacts/1"},
    }
