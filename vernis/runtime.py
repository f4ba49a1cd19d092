"""The shared resources of one running app, created in its lifespan and passed explicitly."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.context.window import WindowCache
from vernis.services.answers import AnswerService
from vernis.services.hub import EventHub
from vernis.services.llm import ChatModel
from vernis.services.persistence import ConversationStore, MemberInfo
from vernis.services.prompt import CurrentPage
from vernis.services.registry import ToolRegistry, ToolResources
from vernis.services.titles import TitleService
from vernis.settings import Settings
from vernis.ws.limits import MemberRateLimiter
from vernis.ws.protocol import PageContext

if TYPE_CHECKING:
    from vernis.ws.connection import Connection

__all__ = ["PageResolver", "Services"]

# Turns the page context a client sent into the "Current page" of the system prompt.
PageResolver = Callable[[PageContext, MemberInfo], Awaitable[CurrentPage | None]]


@dataclass(eq=False)
class Services:
    settings: Settings
    engine: AsyncEngine
    store: ConversationStore
    hub: EventHub
    model: ChatModel
    answers: AnswerService
    titles: TitleService
    windows: WindowCache
    registry: ToolRegistry
    tool_resources: ToolResources
    member_limiter: MemberRateLimiter
    resolve_page: PageResolver
    scripted: bool = False
    # Live sockets per member: the cap on sockets per member, and fan-out to a member's tabs.
    connections: dict[UUID, set[Connection]] = field(default_factory=dict)
    draining: bool = False
