"""The shared resources of one running app, created in its lifespan and passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.context.page import PageContextResolver
from vernis.context.window import WindowCache
from vernis.guards import GuardService
from vernis.identity.service import IdentityService
from vernis.metrics import Metrics
from vernis.services.answers import AnswerService
from vernis.services.hub import EventHub
from vernis.services.limits import RateLimiter, SocketCap
from vernis.services.llm import ChatModel
from vernis.services.persistence import ConversationStore
from vernis.services.quotas import QuotaService
from vernis.services.revocations import MemoryRevocations, Revocations
from vernis.services.titles import TitleService
from vernis.settings import Settings
from vernis.tools.approvals import ApprovalService
from vernis.tools.catalog import Catalog

__all__ = ["Services"]


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
    catalog: Catalog
    identity: IdentityService
    approvals: ApprovalService
    member_limiter: RateLimiter
    socket_cap: SocketCap
    pages: PageContextResolver
    scripted: bool = False
    draining: bool = False
    # Personal data and prompt injection (vernis.guards); the defaults unless the app sets it.
    guards: GuardService = field(default_factory=GuardService)
    # What /metrics shows (vernis.metrics).
    metrics: Metrics = field(default_factory=Metrics)
    # Token quotas and usage (SPEC §15); no quota unless the app sets one.
    quotas: QuotaService | None = None
    # The admin API's revocations, told to every instance (SPEC §15).
    revocations: Revocations = field(default_factory=MemoryRevocations)
