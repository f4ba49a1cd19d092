"""UI blocks: what a tool result shows the user as components beside the data the model reads (SPEC §16).

A tool returns `Shown(data, ui=[...])` instead of bare data to add blocks:

    return Shown(
        {"contacts": found},
        ui=[table([("name", "Name"), ("email", "E-mail")], rows, total=len(found))],
    )

The model reads `data` only; the browser gets the blocks in `tool_call_completed.ui`, and they are
stored with the call and replayed in `history_message`. Four kinds are built in (`table`, `entity`,
`links`, `metrics`); a toolkit may declare more with a JSON schema (`Toolkit(ui_kinds=...)`, names
like `crm.call_transcript`), which the host page renders with a renderer of its own.

`BlockRules.clean` is the server's gate for blocks, whatever the tool: at most `MAX_BLOCKS` per
result and `MAX_BLOCKS_BYTES` of JSON in all, each of a known kind and valid against its schema
(else dropped with a warning in the log; the result itself still goes to the model), and every
`url` or `href` a relative path or on an origin of `[embed] link_origins` (else that link is
dropped).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import jsonschema  # type: ignore[import-untyped]
import orjson

__all__ = [
    "BUILT_IN_KINDS",
    "DEFAULT_BLOCKS",
    "MAX_BLOCKS",
    "MAX_BLOCKS_BYTES",
    "BlockRules",
    "Shown",
    "block",
    "entity",
    "links",
    "metrics",
    "table",
]

logger = logging.getLogger("vernis.tools")

MAX_BLOCKS = 8
MAX_BLOCKS_BYTES = 64 * 1024
MAX_TABLE_ROWS = 200
# A toolkit's own kind: its name, a dot, the kind (`crm.call_transcript`).
CUSTOM_KIND = re.compile(r"[a-z][a-z0-9_]{0,31}\.[a-z][a-z0-9_]{0,47}")

_SCALAR = {"type": ["string", "number", "boolean", "null"]}
_LABEL = {"type": "string", "minLength": 1, "maxLength": 200}
_URL = {"type": "string", "minLength": 1, "maxLength": 2000}

BUILT_IN_KINDS: dict[str, dict[str, Any]] = {
    "table": {
        "type": "object",
        "required": ["columns", "rows"],
        "additionalProperties": False,
        "properties": {
            "columns": {
                "type": "array",
                "minItems": 1,
                "maxItems": 20,
                "items": {
                    "type": "object",
                    "required": ["key", "label"],
                    "additionalProperties": False,
                    "properties": {
                        "key": {"type": "string", "minLength": 1, "maxLength": 100},
                        "label": _LABEL,
                    },
                },
            },
            "rows": {
                "type": "array",
                "maxItems": MAX_TABLE_ROWS,
                "items": {"type": "object", "additionalProperties": _SCALAR},
            },
            "total": {"type": "integer", "minimum": 0},
        },
    },
    "entity": {
        "type": "object",
        "required": ["entity_type", "entity_id", "title", "fields"],
        "additionalProperties": False,
        "properties": {
            "entity_type": {"type": "string", "minLength": 1, "maxLength": 100},
            "entity_id": {"type": "string", "minLength": 1, "maxLength": 200},
            "title": _LABEL,
            "fields": {
                "type": "array",
                "maxItems": 50,
                "items": {
                    "type": "object",
                    "required": ["label", "value"],
                    "additionalProperties": False,
                    "properties": {"label": _LABEL, "value": _SCALAR},
                },
            },
            "url": _URL,
        },
    },
    "links": {
        "type": "object",
        "required": ["links"],
        "additionalProperties": False,
        "properties": {
            "links": {
                "type": "array",
                "minItems": 1,
                "maxItems": 20,
                "items": {
                    "type": "object",
                    "required": ["label", "url"],
                    "additionalProperties": False,
                    "properties": {"label": _LABEL, "url": _URL},
                },
            }
        },
    },
    "metrics": {
        "type": "object",
        "required": ["items"],
        "additionalProperties": False,
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 12,
                "items": {
                    "type": "object",
                    "required": ["label", "value"],
                    "additionalProperties": False,
                    "properties": {
                        "label": _LABEL,
                        "value": {"type": ["string", "number"]},
                        "delta": {"type": ["string", "number"]},
                    },
                },
            }
        },
    },
}


@dataclass(frozen=True, slots=True)
class Shown:
    """A tool's result with UI blocks: the model reads `data`, the user also sees `ui`.

    `summary`: one sentence saying what the call did ("Created contact Rowan Tanaka"), for the host
    page's `vernis:tool-completed` event (cut to `MAX_SUMMARY` characters); without one the panel
    says the tool's name and how the call ended."""

    data: Any
    ui: Sequence[Mapping[str, Any]] = ()
    summary: str | None = None


def block(kind: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """A block of any kind, built-in or a toolkit's own (`crm.call_transcript`)."""
    return {"kind": kind, "data": dict(data)}


def table(
    columns: Iterable[tuple[str, str]], rows: Iterable[Mapping[str, Any]], *, total: int | None = None
) -> dict[str, Any]:
    """A `table` block: `columns` as (key, label) pairs, `rows` as mappings of those keys."""
    data: dict[str, Any] = {
        "columns": [{"key": key, "label": label} for key, label in columns],
        "rows": [dict(row) for row in rows],
    }
    if total is not None:
        data["total"] = total
    return block("table", data)


def entity(
    entity_type: str,
    entity_id: str,
    title: str,
    fields: Iterable[tuple[str, Any]],
    *,
    url: str | None = None,
) -> dict[str, Any]:
    """An `entity` card: a record's title, its fields as (label, value) pairs, and where it lives."""
    data: dict[str, Any] = {
        "entity_type": entity_type,
        "entity_id": entity_id,
        "title": title,
        "fields": [{"label": label, "value": value} for label, value in fields if value not in (None, "")],
    }
    if url is not None:
        data["url"] = url
    return block("entity", data)


def links(items: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """A `links` block: (label, url) pairs, for navigation and calls to action."""
    return block("links", {"links": [{"label": label, "url": url} for label, url in items]})


def metrics(items: Iterable[tuple[str, Any] | tuple[str, Any, Any]]) -> dict[str, Any]:
    """A `metrics` strip: (label, value) or (label, value, delta) figures."""
    figures = []
    for item in items:
        figure = {"label": item[0], "value": item[1]}
        if len(item) > 2 and item[2] is not None:
            figure["delta"] = item[2]
        figures.append(figure)
    return block("metrics", {"items": figures})


def _checker(schema: Mapping[str, Any]) -> Any:
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@dataclass
class BlockRules:
    """The kinds a result's blocks may have, and the origins their links may point to."""

    # Toolkit-declared kinds: name -> JSON schema of the block's data.
    kinds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # `[embed] link_origins`: absolute links may point here (relative paths always may).
    link_origins: Sequence[str] = ()
    _checkers: dict[str, Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._checkers = {}
        for kind, schema in {**BUILT_IN_KINDS, **self.kinds}.items():
            if kind not in BUILT_IN_KINDS and not CUSTOM_KIND.fullmatch(kind):
                raise ValueError(f"UI block kind {kind!r}: name it toolkit.kind, e.g. crm.call_transcript")
            try:
                self._checkers[kind] = _checker(schema)
            except jsonschema.SchemaError as exc:
                raise ValueError(f"UI block kind {kind!r}: its schema is not valid: {exc.message}") from None

    def link_allowed(self, url: object) -> bool:
        """A relative path (`/contacts/7`, `tickets?open=1`), or an http(s) URL on a listed origin."""
        if not isinstance(url, str) or not url.strip() or any(c in url for c in "\\\r\n\t\x00"):
            return False
        parts = urlsplit(url.strip())
        if not parts.scheme and not parts.netloc:
            return not url.strip().startswith("//")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False
        origin = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1].lower()}"
        return origin in self.link_origins

    def clean(self, tool_name: str, blocks: object) -> list[dict[str, Any]]:
        """The blocks the browser may get: valid, of known kinds, links allowed, within the limits."""
        if not isinstance(blocks, Sequence) or isinstance(blocks, str | bytes):
            logger.warning("tool %s: its UI blocks are not a list; none are shown", tool_name)
            return []
        kept: list[dict[str, Any]] = []
        size = 0
        for index, raw in enumerate(blocks):
            if len(kept) == MAX_BLOCKS:
                logger.warning("tool %s: UI blocks past the first %d are dropped", tool_name, MAX_BLOCKS)
                break
            problem, cleaned = self._one(raw)
            if cleaned is None:
                logger.warning("tool %s: UI block %d is dropped: %s", tool_name, index, problem)
                continue
            encoded = len(orjson.dumps(cleaned))
            if size + encoded > MAX_BLOCKS_BYTES:
                logger.warning(
                    "tool %s: UI block %d is dropped: the blocks exceed %d bytes",
                    tool_name,
                    index,
                    MAX_BLOCKS_BYTES,
                )
                continue
            size += encoded
            kept.append(cleaned)
        return kept

    def _one(self, raw: object) -> tuple[str, dict[str, Any] | None]:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("kind"), str):
            return "it is not a {kind, data} object", None
        kind = raw["kind"]
        checker = self._checkers.get(kind)
        if checker is None:
            return f"unknown kind {kind[:60]!r}", None
        try:
            data = orjson.loads(orjson.dumps(raw.get("data")))
        except (TypeError, orjson.JSONEncodeError):
            return f"{kind}: its data is not JSON", None
        data = self._links_only_allowed(data)
        if kind == "links" and isinstance(data, dict) and isinstance(data.get("links"), list):
            data["links"] = [link for link in data["links"] if not isinstance(link, dict) or "url" in link]
        error = jsonschema.exceptions.best_match(checker.iter_errors(data))
        if error is not None:
            where = "/".join(map(str, error.absolute_path)) or "data"
            return f"{kind}: {where}: {error.message[:200]}", None
        return "", {"kind": kind, "data": data}

    def _links_only_allowed(self, value: Any) -> Any:
        """`value` without the `url`/`href` entries that point where the panel must not go."""
        if isinstance(value, dict):
            return {
                key: self._links_only_allowed(item)
                for key, item in value.items()
                if key not in ("url", "href") or self.link_allowed(item)
            }
        if isinstance(value, list):
            return [self._links_only_allowed(item) for item in value]
        return value


# The rules without configuration: the built-in kinds, relative links only.
DEFAULT_BLOCKS = BlockRules()
