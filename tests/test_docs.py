"""The documentation site's generated tables (docs/hooks/) list everything the code defines."""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import TypeAdapter

from vernis.settings import Settings
from vernis.ws import protocol

DOCS = Path(__file__).resolve().parent.parent / "docs"


def load_hook(name: str) -> ModuleType:
    """A hook module as MkDocs loads it: by its path (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", DOCS / "hooks" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wire_messages(union: Any) -> dict[str, set[str]]:
    """Each message of a wire union, read from the JSON schema pydantic makes of it: its `type`, and
    the names of its other fields."""
    schema = TypeAdapter(union).json_schema()
    options = schema.get("oneOf") or schema["anyOf"]
    messages = {}
    for option in options:
        properties = schema["$defs"][option["$ref"].rsplit("/", 1)[-1]]["properties"]
        messages[properties["type"]["const"]] = properties.keys() - {"type", "seq"}
    return messages


def rows(markdown: str) -> dict[str, str]:
    """The rows of the generated message tables (headed `| `type` |`), by the message type in their
    first cell."""
    found = {}
    for table in re.findall(r"^\| `type` \|.*\n(?:\|.*\n?)+", markdown, re.MULTILINE):
        for row in table.splitlines()[2:]:  # below the header and its rule
            kind = re.match(r"\| `([a-z_]+)` \|", row)
            assert kind is not None, row
            found[kind[1]] = row
    return found


def built(page: str, hook: str, caplog: pytest.LogCaptureFixture) -> str:
    """A page's Markdown after the hook ran, failing on any warning (what `--strict` would abort on)."""
    with caplog.at_level(logging.WARNING):
        markdown: str = load_hook(hook).on_page_markdown((DOCS / page).read_text())
    assert not caplog.records, [record.getMessage() for record in caplog.records]
    return markdown


def test_the_protocol_page_lists_every_command_of_the_wire_union(caplog: pytest.LogCaptureFixture) -> None:
    """Every command type the server parses has a row on the protocol page, and no row names another."""
    page = built("protocol.md", "protocol", caplog)
    section = page.split("## Commands")[1].split("\n## ")[0]
    commands = wire_messages(protocol.Command)
    assert len(commands) >= 13
    assert rows(section).keys() == commands.keys()


def test_the_protocol_page_lists_every_event_of_the_wire_union(caplog: pytest.LogCaptureFixture) -> None:
    """Every event type the server sends has a row on the protocol page, and no row names another."""
    page = built("protocol.md", "protocol", caplog)
    section = page.split("## Events")[1].split("\n## ")[0]
    events = wire_messages(protocol.Event)
    assert len(events) >= 14
    assert rows(section).keys() == events.keys()


def test_each_row_names_every_field_of_its_message(caplog: pytest.LogCaptureFixture) -> None:
    """A field added to a wire model shows in its message's row of the protocol page."""
    found = rows(built("protocol.md", "protocol", caplog))
    for kind, fields in (wire_messages(protocol.Command) | wire_messages(protocol.Event)).items():
        for name in fields:
            assert f"`{name}`:" in found[kind], (kind, name)


def test_the_configuration_page_lists_every_setting(caplog: pytest.LogCaptureFixture) -> None:
    """Every field of Settings has a row under the environment variable that sets it, with a meaning."""
    page = built("configuration.md", "settings", caplog)
    found = dict(re.findall(r"^\| `([A-Z0-9_]+)` \| [^|]+ \| (.*) \|$", page, re.MULTILINE))
    expected = {
        info.validation_alias if isinstance(info.validation_alias, str) else f"VERNIS_{name.upper()}"
        for name, info in Settings.model_fields.items()
    }
    assert found.keys() == expected
    assert all(meaning.strip() for meaning in found.values())
