"""Page context (SPEC §6): which entity the user is looking at, named by the toolkit that owns it.

The client sends the route of the host page it sits on and, when it knows them, the entity type and
id. With only the route, the type and id come from the first route pattern (the configuration's,
then the toolkits') that matches it. The entity is named by its toolkit's resolver, as the member:
their organization and permissions only. An unknown or foreign entity, a type no toolkit resolves,
or a resolver that fails or takes longer than `RESOLVE_TIMEOUT` is left out; the answer goes on.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vernis.tools import EntityResolver, PagePattern, ToolContext

__all__ = ["RESOLVE_TIMEOUT", "CurrentPage", "PageContextResolver", "PageRequest"]

logger = logging.getLogger("vernis.context")

RESOLVE_TIMEOUT = 2.0
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


@dataclass(frozen=True, slots=True)
class PageRequest:
    """The page context a client sent with a message."""

    route: str
    entity_type: str | None = None
    entity_id: str | None = None


@dataclass(frozen=True, slots=True)
class CurrentPage:
    route: str
    entity_type: str | None = None
    entity_id: str | None = None
    # What the resolver said of the entity, in the member's organization; None when unknown.
    entity_name: str | None = None
    entity_summary: str | None = None


class PageContextResolver:
    def __init__(
        self,
        patterns: Sequence[PagePattern],
        resolvers: Mapping[str, tuple[str, EntityResolver]],
        resources: Mapping[str, Any],
        *,
        timeout: float = RESOLVE_TIMEOUT,
    ) -> None:
        self._patterns = list(patterns)
        self._resolvers = dict(resolvers)
        self._resources = resources
        self._timeout = timeout

    def entity_from_route(self, route: str) -> tuple[str, str] | None:
        """`/contacts/abc-123` -> ("contact", "abc-123") by the first matching pattern; else None."""
        path = route.split("?", 1)[0].split("#", 1)[0]
        for pattern in self._patterns:
            entity_id = pattern.match(path)
            if entity_id is not None:
                return pattern.entity_type, entity_id
        return None

    def normalize(self, page: PageRequest) -> CurrentPage:
        """The page with its entity filled in from the route where the client left it out; an entity
        type nobody resolves, or a malformed id, is dropped."""
        entity_type, entity_id = page.entity_type, page.entity_id
        if entity_type is None or entity_id is None:
            found = self.entity_from_route(page.route)
            if found is not None:
                entity_type, entity_id = entity_type or found[0], entity_id or found[1]
        if entity_type not in self._resolvers or entity_id is None or not _ID.match(entity_id):
            entity_type, entity_id = None, None
        return CurrentPage(route=page.route, entity_type=entity_type, entity_id=entity_id)

    async def resolve(self, page: PageRequest, context: ToolContext[Any]) -> CurrentPage:
        """The current page, its entity named when the member's organization has it."""
        current = self.normalize(page)
        if current.entity_type is None or current.entity_id is None:
            return current
        toolkit, resolver = self._resolvers[current.entity_type]
        try:
            async with asyncio.timeout(self._timeout):
                entity = await resolver(
                    replace(context, resources=self._resources.get(toolkit)), current.entity_id
                )
        except TimeoutError:
            logger.warning("resolving a %s took over %.0f s; left out", current.entity_type, self._timeout)
            entity = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # One line, not a traceback per message while a host's API is down.
            logger.warning("resolving a %s failed (%r); left out", current.entity_type, exc)
            entity = None
        if entity is None:
            return CurrentPage(route=current.route)
        return replace(current, entity_name=entity.name, entity_summary=entity.summary or None)
