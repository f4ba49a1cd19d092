"""Toolkits: how a product brings its tools, pages and quick actions to Vernis (SPEC §14 item 3).

A toolkit is a `Toolkit` object registered under the entry-point group `vernis.toolkits` (the
object, or a function returning it), loaded by name from the configuration's `[[toolkits]]`,
`VERNIS_TOOLKITS` or `--demo`. Vernis never imports a toolkit any other way.

    toolkit = Toolkit(
        "helpdesk",
        permissions={"ticket:view": "Read tickets", "ticket:update": "Change tickets"},
        role_grants={"agent": ["ticket:view", "ticket:update"], "viewer": ["ticket:view"]},
        pages=[PagePattern("/tickets/{id}", "ticket")],
        quick_actions=[QuickAction("My open tickets", "List my open tickets.", permission="ticket:view")],
        startup=open_api_client,      # async (ToolkitEnv) -> resources, handed to every tool
        shutdown=close_api_client,    # async (resources) -> None
    )

    @toolkit.tool(permission="ticket:view", category="Tickets")
    async def find_tickets(ctx: ToolContext[ApiClient], args: FindArgs) -> dict[str, Any]:
        \"\"\"Find tickets by subject.\"\"\"

    @toolkit.resolver("ticket")
    async def ticket(ctx: ToolContext[ApiClient], entity_id: str) -> Entity | None: ...

A toolkit may also bring its persona (the system prompt's opening, when the configuration gives
none), its own tables through an Alembic branch (`migrations`: the folder of its version scripts),
and a `Demo` (demo data, demo host pages, scripted answers) used only in demo mode.

A remote toolkit (an MCP server, `vernis.tools.mcp`) learns its tools only once connected, and they
may change while Vernis runs: it swaps its whole set with `set_tools()`, and the catalog's registry
follows (sockets that connect afterwards see the new set). Its `ready` hook, awaited for every
toolkit at once after all have started, is where it waits (bounded) for its first connection.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.exceptions import ConfigError
from vernis.tools.base import Tool, ToolContext, ToolFunc, tool

__all__ = [
    "ENTRY_POINT_GROUP",
    "Demo",
    "Entity",
    "EntityResolver",
    "PagePattern",
    "QuickAction",
    "Toolkit",
    "ToolkitEnv",
    "ToolkitError",
    "available_toolkits",
    "load_toolkits",
]

ENTRY_POINT_GROUP = "vernis.toolkits"

R = TypeVar("R")


class ToolkitError(ConfigError):
    """A toolkit cannot be loaded or does not fit with the others; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Entity:
    """What a resolver says of the entity on the user's page: its name and a one-line summary."""

    name: str
    summary: str = ""


EntityResolver = Callable[[ToolContext[Any], str], Awaitable[Entity | None]]


@dataclass(frozen=True, slots=True)
class QuickAction:
    label: str
    prompt: str
    # Empty: shown everywhere; else only on pages showing one of these entity types.
    entity_types: tuple[str, ...] = ()
    # Shown only to members holding it (None: to everyone who may use the assistant).
    permission: str | None = None


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class PagePattern:
    """A host route naming an entity: `/contacts/{id}` -> entity type `contact`, id from `{id}`."""

    route: str
    entity_type: str
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = _PLACEHOLDER.findall(self.route)
        if not self.route.startswith("/") or names.count("id") != 1:
            raise ValueError(f"page route {self.route!r} must start with / and hold {{id}} exactly once")
        pattern = ""
        last = 0
        for match in _PLACEHOLDER.finditer(self.route):
            pattern += re.escape(self.route[last : match.start()])
            pattern += "(?P<id>[A-Za-z0-9][A-Za-z0-9_.:-]{0,127})" if match[1] == "id" else "[^/]+"
            last = match.end()
        pattern += re.escape(self.route[last:].rstrip("/"))
        object.__setattr__(self, "_regex", re.compile(f"^{pattern}/?$", re.IGNORECASE))

    def match(self, path: str) -> str | None:
        """The entity id when `path` (no query, no fragment) is this route; else None."""
        found = self._regex.match(path)
        return found["id"] if found else None


@dataclass(frozen=True, slots=True)
class ToolkitEnv:
    """What a toolkit's startup hook receives."""

    # Vernis's own database (a toolkit with an Alembic branch keeps its tables there).
    engine: AsyncEngine
    # The toolkit's own keys from its `[[toolkits]]` table in the configuration (name left out).
    options: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Demo:
    """What a toolkit adds in demo mode only (`vernis serve --demo`)."""

    # Loads the demo data when the database has none; returns one line saying what is there.
    seed: Callable[[AsyncEngine], Awaitable[str]]
    # The demo host pages and the demo login (starlette routes), given the token signing secret.
    routes: Callable[[str], Sequence[Any]] = lambda secret: ()
    # Scripted-model scenarios that answer the demo's quick actions offline (`--scripted-model`).
    scenarios: Callable[[], Sequence[Any]] = lambda: ()
    # Where the demo's host app starts ("/" when it mounts nothing of its own).
    home: str = "/"
    # Writes that wait for a reviewer in demo mode (SPEC §23): tool name -> the reviewer's
    # permission; a `[[reviews]]` entry of the configuration naming the tool wins.
    reviews: Mapping[str, str] = field(default_factory=dict)


class Toolkit(Generic[R]):
    def __init__(
        self,
        name: str,
        *,
        description: str = "",
        tools: Iterable[Tool] = (),
        permissions: Mapping[str, str] | None = None,
        role_grants: Mapping[str, Iterable[str]] | None = None,
        resolvers: Mapping[str, EntityResolver] | None = None,
        pages: Iterable[PagePattern] = (),
        quick_actions: Iterable[QuickAction] = (),
        persona: str | None = None,
        migrations: Path | None = None,
        startup: Callable[[ToolkitEnv], Awaitable[R]] | None = None,
        ready: Callable[[R], Awaitable[None]] | None = None,
        shutdown: Callable[[R], Awaitable[None]] | None = None,
        demo: Demo | None = None,
        ui_kinds: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", name):
            raise ToolkitError(f"toolkit name {name!r}: lowercase letters, digits and _, at most 32")
        self.name = name
        self.description = description
        self.permissions: dict[str, str] = dict(permissions or {})
        self.role_grants = {role: frozenset(perms) for role, perms in (role_grants or {}).items()}
        self.resolvers: dict[str, EntityResolver] = dict(resolvers or {})
        self.pages = list(pages)
        self.quick_actions = list(quick_actions)
        self.persona = persona
        self.migrations = migrations
        self.startup = startup
        self.ready = ready
        self.shutdown = shutdown
        self.demo = demo
        # UI block kinds of its own (SPEC §16): `name.kind` -> the JSON schema of the block's data.
        self.ui_kinds: dict[str, Mapping[str, Any]] = dict(ui_kinds or {})
        for kind in self.ui_kinds:
            if not kind.startswith(f"{name}."):
                raise ToolkitError(f"toolkit {name}: UI block kind {kind!r} must be named {name}.<kind>")
        self._tools: dict[str, Tool] = {}
        self._watchers: list[weakref.WeakMethod[Callable[[Toolkit[R], list[Tool]], None]]] = []
        for declared in tools:
            self.add(declared)

    def __repr__(self) -> str:
        return f"Toolkit({self.name!r}, {len(self._tools)} tools)"

    @property
    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def add(self, declared: Tool) -> Tool:
        """Add a tool; it is this toolkit's from now on (it receives this toolkit's resources)."""
        if declared.name in self._tools:
            raise ToolkitError(f"toolkit {self.name!r} declares the tool {declared.name!r} twice")
        owned = self._own(declared)
        self._tools[owned.name] = owned
        return owned

    def set_tools(self, tools: Iterable[Tool]) -> None:
        """Replace every tool of this toolkit at once, while Vernis runs (a remote toolkit whose
        list changed). Raises `ToolkitError` naming both sides when a name is taken twice, here or
        by another toolkit of the catalog; then nothing changes."""
        owned: dict[str, Tool] = {}
        for declared in tools:
            if declared.name in owned:
                raise ToolkitError(f"toolkit {self.name!r} offers the tool {declared.name!r} twice")
            owned[declared.name] = self._own(declared)
        self._watchers = [ref for ref in self._watchers if ref() is not None]
        for ref in self._watchers:
            watcher = ref()
            if watcher is not None:
                watcher(self, list(owned.values()))
        self._tools = owned

    def watch_tools(self, watcher: Callable[[Toolkit[R], list[Tool]], None]) -> None:
        """Call the bound method `watcher(toolkit, tools)` before `set_tools` applies a new set;
        raising refuses it. Held weakly: a toolkit loaded once serves many catalogs (tests, checks)
        and keeps none of them alive."""
        self._watchers.append(weakref.WeakMethod(watcher))

    def _own(self, declared: Tool) -> Tool:
        if declared.toolkit == self.name:
            return declared
        return Tool(
            declared.name,
            declared.category,
            declared.description,
            declared.args,
            declared.permission,
            declared.writes,
            declared.run,
            preview=declared.preview,
            toolkit=self.name,
        )

    def tool(
        self,
        *,
        permission: str,
        category: str | None = None,
        writes: bool = False,
        preview: ToolFunc | None = None,
        name: str | None = None,
        description: str | None = None,
    ) -> Callable[[ToolFunc], Tool]:
        """Decorator: declare a tool of this toolkit (see `vernis.tools.base.tool`)."""

        def declare(func: ToolFunc) -> Tool:
            made = tool(
                permission=permission,
                category=category or self.name.replace("_", " ").title(),
                writes=writes,
                preview=preview,
                name=name,
                description=description,
            )(func)
            return self.add(made)

        return declare

    def resolver(self, entity_type: str) -> Callable[[EntityResolver], EntityResolver]:
        """Decorator: this toolkit names entities of `entity_type` for page context."""

        def register(func: EntityResolver) -> EntityResolver:
            self.resolvers[entity_type] = func
            return func

        return register


def available_toolkits() -> dict[str, str]:
    """Entry-point name -> what it points at, for every installed toolkit."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_toolkits(names: Iterable[str]) -> list[Toolkit[Any]]:
    """Load toolkits by entry-point name, in order, each once. Raises `ToolkitError`."""
    installed = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    loaded: list[Toolkit[Any]] = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        point = installed.get(name)
        if point is None:
            known = ", ".join(sorted(installed)) or "none"
            raise ToolkitError(
                f"no toolkit named {name!r} is installed (entry-point group {ENTRY_POINT_GROUP!r}; "
                f"installed: {known})"
            )
        try:
            found = point.load()
            made = found() if callable(found) and not isinstance(found, Toolkit) else found
        except Exception as exc:
            raise ToolkitError(f"toolkit {name!r} ({point.value}) failed to load: {exc!r}") from exc
        if not isinstance(made, Toolkit):
            raise ToolkitError(f"toolkit {name!r} ({point.value}) is not a vernis.tools.Toolkit")
        loaded.append(made)
    return loaded
