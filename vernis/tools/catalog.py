"""Everything the loaded toolkits and the configuration bring, put together and checked once.

A `Catalog` is built before the server starts: two toolkits offering the same tool, two resolvers
for one entity type, a quick action or page naming nothing, all stop the start here with a message
naming both sides. Nothing is half-applied: a `Catalog` that was built is consistent.

Then, in the app's lifespan, `start()` runs every toolkit's startup hook (in order; a failure stops
the ones already started), then every `ready` hook at once (remote toolkits connecting to their
servers in parallel), and `stop()` their shutdown hooks, in reverse. A toolkit that changes its
tools while Vernis runs (`Toolkit.set_tools`) changes them in the registry too, checked the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.identity.members import ASSISTANT_USE, RoleTable
from vernis.tools.asking import ASK_USER
from vernis.tools.base import Tool
from vernis.tools.blocks import BlockRules
from vernis.tools.runner import ToolRegistry
from vernis.tools.toolkit import (
    Demo,
    EntityResolver,
    PagePattern,
    QuickAction,
    Toolkit,
    ToolkitEnv,
    ToolkitError,
)

__all__ = ["DEFAULT_PERSONA", "Catalog"]

logger = logging.getLogger("vernis.toolkits")

DEFAULT_PERSONA = """\
You are {name}, the assistant built into this product. You help its users with their work, using \
the tools listed below. Be brief and concrete; use Markdown for lists and tables. Never invent data: \
when you need facts, use a tool; when a tool cannot give them, say so."""


class Catalog:
    def __init__(
        self,
        toolkits: Sequence[Toolkit[Any]] = (),
        *,
        roles: Mapping[str, Iterable[str]] | None = None,
        pages: Iterable[PagePattern] = (),
        quick_actions: Iterable[QuickAction] = (),
        assistant_name: str = "Vernis",
        greeting: str | None = None,
        avatar_url: str | None = None,
        instructions: str | None = None,
        reviews: Mapping[str, str] | None = None,
        ask_user: bool = False,
    ) -> None:
        self.toolkits = list(toolkits)
        # Tool name -> the permission its reviewer needs (SPEC §23): that write, once its member
        # approved it, waits for a second member.
        self.reviews: dict[str, str] = dict(reviews or {})
        self.assistant_name = assistant_name
        # How the panel presents the assistant (`[assistant] greeting`, `avatar_url`): None, its defaults.
        self.greeting = greeting
        self.avatar_url = avatar_url
        self.registry = ToolRegistry()
        self.resolvers: dict[str, tuple[str, EntityResolver]] = {}
        names: set[str] = set()
        for toolkit in self.toolkits:
            if toolkit.name in names:
                raise ToolkitError(f"two toolkits are named {toolkit.name!r}")
            names.add(toolkit.name)
            toolkit.watch_tools(self._tools_changed)
            for declared in toolkit.tools:
                try:
                    self.registry.register(declared)
                except ValueError as exc:
                    raise ToolkitError(str(exc)) from None
            for entity_type, resolver in toolkit.resolvers.items():
                if entity_type in self.resolvers:
                    other = self.resolvers[entity_type][0]
                    raise ToolkitError(
                        f"entity type {entity_type!r} is resolved by two toolkits, "
                        f"{other!r} and {toolkit.name!r}"
                    )
                self.resolvers[entity_type] = (toolkit.name, resolver)
        if ask_user:
            # Questions in a form (SPEC §17), offered to every member.
            try:
                self.registry.add_builtin(ASK_USER)
            except ValueError as exc:
                raise ToolkitError(str(exc)) from None
        # The toolkits' own UI block kinds (SPEC §16), their schemas checked now.
        self.ui_kinds = {
            kind: schema for toolkit in self.toolkits for kind, schema in toolkit.ui_kinds.items()
        }
        try:
            BlockRules(self.ui_kinds)
        except ValueError as exc:
            raise ToolkitError(str(exc)) from None
        self.roles = RoleTable((toolkit.role_grants for toolkit in self.toolkits), roles)
        # The configuration's pages first: a host's own route wins over a toolkit's.
        self.pages = [*pages, *(page for toolkit in self.toolkits for page in toolkit.pages)]
        self.quick_actions = [
            *(action for toolkit in self.toolkits for action in toolkit.quick_actions),
            *quick_actions,
        ]
        persona = next((t.persona for t in self.toolkits if t.persona), None)
        if instructions:
            persona = f"{DEFAULT_PERSONA}\n\n{instructions.strip()}"
        self.persona = (persona or DEFAULT_PERSONA).replace("{name}", assistant_name)
        self._started: list[Toolkit[Any]] = []

    @property
    def migrations(self) -> list[Path]:
        """The version folders of the toolkits' Alembic branches."""
        return [toolkit.migrations for toolkit in self.toolkits if toolkit.migrations is not None]

    @property
    def demos(self) -> list[tuple[str, Demo]]:
        return [(toolkit.name, toolkit.demo) for toolkit in self.toolkits if toolkit.demo is not None]

    def reviewer_permissions(self, permissions: frozenset[str]) -> frozenset[str]:
        """The reviewer permissions among `permissions`: which reviews a member holding them sees."""
        return frozenset(self.reviews.values()) & permissions

    def entity_types(self) -> set[str]:
        return set(self.resolvers)

    def quick_actions_allowed(self, permissions: frozenset[str]) -> list[QuickAction]:
        """The quick actions a member holding `permissions` may use, on any page."""
        if ASSISTANT_USE not in permissions:
            return []
        return [a for a in self.quick_actions if a.permission is None or a.permission in permissions]

    def quick_actions_for(self, permissions: frozenset[str], entity_type: str | None) -> list[QuickAction]:
        """The quick actions a member holding `permissions` sees on a page showing `entity_type`."""
        return [
            action
            for action in self.quick_actions_allowed(permissions)
            if not action.entity_types or entity_type in action.entity_types
        ]

    def tools_by_role(self) -> dict[str, list[str]]:
        """Role -> the names of the tools a member with that role (and no `permissions` claim) gets."""
        return {
            role: [t.name for t in self.registry if t.permission in permissions]
            for role, permissions in sorted(self.roles.roles.items())
        }

    def _tools_changed(self, toolkit: Toolkit[Any], tools: list[Tool]) -> None:
        try:
            self.registry.replace_toolkit(toolkit.name, tools)
        except ValueError as exc:
            raise ToolkitError(str(exc)) from None

    async def start(self, engine: AsyncEngine, options: Mapping[str, Mapping[str, Any]]) -> None:
        """Run every toolkit's startup hook, then all their `ready` hooks at once; their resources
        go to their tools."""
        for toolkit in self.toolkits:
            env = ToolkitEnv(engine=engine, options=options.get(toolkit.name, {}))
            try:
                resources = await toolkit.startup(env) if toolkit.startup is not None else None
            except Exception as exc:
                await self.stop()
                raise _failed(toolkit, exc) from exc
            self.registry.resources[toolkit.name] = resources
            self._started.append(toolkit)
        waiting = [toolkit for toolkit in self.toolkits if toolkit.ready is not None]
        outcomes = await asyncio.gather(
            *(toolkit.ready(self.registry.resources[toolkit.name]) for toolkit in waiting if toolkit.ready),
            return_exceptions=True,
        )
        for toolkit, outcome in zip(waiting, outcomes, strict=True):
            if isinstance(outcome, asyncio.CancelledError):
                await self.stop()
                raise outcome
            if isinstance(outcome, BaseException):
                await self.stop()
                raise _failed(toolkit, outcome) from outcome
        for toolkit in self.toolkits:
            logger.info("toolkit %s started", toolkit.name, extra={"tools": len(toolkit.tools)})

    async def stop(self) -> None:
        while self._started:
            toolkit = self._started.pop()
            resources = self.registry.resources.pop(toolkit.name, None)
            if toolkit.shutdown is None:
                continue
            try:
                await toolkit.shutdown(resources)
            except Exception:
                logger.exception("toolkit %s failed to shut down cleanly", toolkit.name)


def _failed(toolkit: Toolkit[Any], exc: BaseException) -> ToolkitError:
    reason = str(exc) if isinstance(exc, ValueError) and str(exc) else repr(exc)
    return ToolkitError(f"toolkit {toolkit.name!r} failed to start: {reason}")
