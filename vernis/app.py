"""The starlette application: routes, and the lifespan that owns every shared resource.

`build_catalog()` reads the configuration and loads the toolkits it names (plus the CRM in demo
mode) and its MCP servers, each a toolkit; `create_app()` checks everything it can before serving
(tokens can be verified, toolkits fit together) and connects to nothing. The lifespan opens the
database engine and the model client, starts the toolkits (connecting to the MCP servers), recovers
answers a previous process left half-written, and on shutdown stops taking sockets, lets running
answers finish for `VERNIS_SHUTDOWN_GRACE` seconds and stores whatever is left as stopped.

Product mode serves the socket, the API and the embeddable UI, nothing else. Demo mode adds the demo
toolkits' host pages and login.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from vernis.api import api_routes
from vernis.config import ConfigError, HostConfig, load_config
from vernis.context.page import PageContextResolver
from vernis.context.window import WindowCache
from vernis.db.engine import create_engine
from vernis.db.transactions import transactions_for
from vernis.guards import GuardPolicy, GuardService
from vernis.identity.service import IdentityService
from vernis.identity.tokens import TokenVerifier
from vernis.metrics import Metrics
from vernis.ops import ops_routes
from vernis.services.answers import AnswerService, RunningAnswer
from vernis.services.hub import EventHub, MemoryHub
from vernis.services.limits import MemberRateLimiter, MemorySocketCap, RateLimiter, SocketCap
from vernis.services.llm import ChatModel
from vernis.services.openai_model import OpenAIChatModel
from vernis.services.persistence import ConversationStore
from vernis.services.quotas import MemoryQuotaCounter, QuotaPolicy, QuotaService, RedisQuotaCounter
from vernis.services.redis_hub import RedisHub, RedisRateLimiter, RedisSocketCap, redis_client
from vernis.services.revocations import MemoryRevocations, RedisRevocations, Revocations
from vernis.services.runtime import Services
from vernis.services.titles import TitleService
from vernis.services.usage import UsageStore
from vernis.settings import Settings, load_settings
from vernis.tools import PagePattern, QuickAction, Toolkit, load_toolkits
from vernis.tools.approvals import ApprovalService
from vernis.tools.catalog import Catalog
from vernis.web import web_routes
from vernis.web.security import SecurityHeaders
from vernis.ws.encoder import encode
from vernis.ws.endpoint import Sockets, assistant_socket

if TYPE_CHECKING:
    from vernis.tools.mcp import McpToolkit

__all__ = [
    "DEMO_TOOLKIT",
    "SOCKET_PATH",
    "SocketFirst",
    "build_catalog",
    "create_app",
    "toolkit_names",
    "verifier_from",
]

logger = logging.getLogger("vernis.app")

SOCKET_PATH = "/api/assistant/ws"
# The toolkit demo mode adds (SPEC §13).
DEMO_TOOLKIT = "crm"


def toolkit_names(settings: Settings, config: HostConfig) -> list[str]:
    """The toolkits to load: the configuration's, `VERNIS_TOOLKITS`, and the CRM in demo mode."""
    names = [entry.name for entry in config.toolkits] + list(settings.toolkits)
    if settings.demo:
        names.append(DEMO_TOOLKIT)
    return list(dict.fromkeys(names))


def build_catalog(settings: Settings, config: HostConfig | None = None) -> Catalog:
    """Everything the toolkits and the configuration bring, checked. Raises `ConfigError` or
    `ToolkitError` with a message naming the file, key or toolkit at fault."""
    if config is None:
        config = load_config(settings.config)
    where = config.path or "the configuration"
    toolkits: list[Toolkit[Any]] = load_toolkits(toolkit_names(settings, config))
    taken = {toolkit.name for toolkit in toolkits}
    servers: dict[str, McpToolkit] = {}
    if config.mcp_servers:
        # Here, not at the top: the MCP SDK takes half a second to import, for products without any.
        from vernis.tools.mcp import McpToolkit, page_resolver
    for index, server in enumerate(config.mcp_servers):
        if server.name in taken:
            raise ConfigError(
                f"{where}: mcp_servers.{index}.name: {server.name!r} is already a toolkit's name"
            )
        servers[server.name] = McpToolkit(server)
    pages = []
    for index, entry in enumerate(config.pages):
        try:
            pages.append(PagePattern(entry.route, entry.entity_type))
        except ValueError as exc:
            raise ConfigError(f"{where}: pages.{index}.route: {exc}") from None
        if entry.resolve is not None:
            owner = config.mcp_server_of(entry.resolve.tool)
            assert owner is not None, "load_config checked it"
            servers[owner.name].resolvers[entry.entity_type] = page_resolver(
                servers[owner.name], entry.resolve
            )
    actions = [
        QuickAction(entry.label, entry.prompt, tuple(entry.entity_types), entry.permission)
        for entry in config.quick_actions
    ]
    catalog = Catalog(
        [*toolkits, *servers.values()],
        roles={role: section.permissions for role, section in config.roles.items()},
        pages=pages,
        quick_actions=actions,
        assistant_name=config.assistant.name,
        instructions=config.assistant.instructions,
    )
    for page in pages:
        if page.entity_type not in catalog.entity_types():
            logger.warning(
                "%s: the page %s names the entity type %r, which no toolkit resolves",
                where,
                page.route,
                page.entity_type,
            )
    return catalog


def verifier_from(settings: Settings) -> TokenVerifier:
    """The verifier of the host's tokens; raises `ConfigError` naming the settings when none is set."""
    return TokenVerifier(
        secret=settings.jwt_secret,
        public_key=settings.jwt_public_key,
        jwks_url=settings.jwks_url,
        issuer=settings.jwt_issuer,
        audience=settings.jwt_audience,
        org_claim=settings.jwt_org_claim,
    )


# In a serving process (`freeze_gc`): collections of the middle generation between two full
# collections (Python's default: 10).
FULL_COLLECTION_EVERY = 100


def create_app(
    settings: Settings | None = None,
    *,
    model: ChatModel | None = None,
    hub: EventHub | None = None,
    catalog: Catalog | None = None,
    scripted: bool = False,
    freeze_gc: bool = False,
) -> SocketFirst:
    """Build the app. Arguments left out are made from `settings`; a configuration that cannot work
    raises here (`ConfigError`, `ToolkitError`), before anything is served.

    `freeze_gc`: the process serves this one app for its whole life (`vernis serve`), so what its
    start made is moved out of the collector's reach (`gc.freeze()`); not for a process that starts
    and stops many apps, such as the test suite."""
    settings = settings or load_settings()
    config = load_config(settings.config)
    catalog = catalog if catalog is not None else build_catalog(settings, config)
    verifier = verifier_from(settings)
    demo_routes: list[BaseRoute] = []
    if settings.demo:
        assert settings.jwt_secret is not None, "load_settings() makes a secret in demo mode"
        for _, demo in catalog.demos:
            demo_routes.extend(demo.routes(settings.jwt_secret))
    options = {entry.name: entry.options for entry in config.toolkits}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        engine = create_engine(
            settings.database_url,
            pool_size=settings.database_pool_size,
            statement_timeout=settings.database_statement_timeout,
        )
        transactions = transactions_for(engine, statement_timeout=settings.database_statement_timeout)
        store = ConversationStore(engine, transactions=transactions)
        await catalog.start(engine, options)
        metrics = Metrics()
        chat_model = model or _model_from(settings, metrics)
        member_limiter: RateLimiter
        socket_cap: SocketCap
        redis = None
        if settings.redis_url:
            # Several instances (SPEC §10): events, leases and limits shared through Redis.
            redis = redis_client(settings.redis_url)
            prefix = settings.redis_prefix
            redis_hub = RedisHub(redis, encode, prefix=prefix)
            event_hub = hub or redis_hub
            member_limiter = RedisRateLimiter(redis, settings.member_rate_limit, prefix=prefix)
            socket_cap = RedisSocketCap(
                redis, settings.max_sockets_per_member, prefix=prefix, ttl=3 * settings.auth_check_interval
            )
        else:
            event_hub = hub or MemoryHub(encode)
            member_limiter = MemberRateLimiter(settings.member_rate_limit)
            socket_cap = MemorySocketCap(settings.max_sockets_per_member)
        recovered = await _recover(store, event_hub, shared=redis is not None)
        if recovered:
            logger.warning("%d answers were interrupted by the last shutdown; marked failed", recovered)
        hub_upkeep = asyncio.create_task(event_hub.run(), name="hub upkeep")
        answers = AnswerService(store=store, hub=event_hub, model=chat_model, metrics=metrics)
        quotas = QuotaService(
            QuotaPolicy(
                config.quotas,
                member_daily_tokens=settings.member_daily_tokens,
                org_monthly_tokens=settings.org_monthly_tokens,
            ),
            RedisQuotaCounter(redis) if redis is not None else MemoryQuotaCounter(),
            UsageStore(engine, transactions),
            prefix=settings.redis_prefix,
        )

        async def count_usage(answer: RunningAnswer, status: str) -> None:
            spec = answer.spec
            if spec.member_id is not None and spec.organization_id is not None:
                input_tokens, output_tokens = answer.tokens()
                await quotas.record(
                    organization_id=spec.organization_id,
                    member_id=spec.member_id,
                    model=spec.loop.model,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                )

        answers.on_usage(count_usage)
        revocations: Revocations = MemoryRevocations()
        if redis is not None:
            revocations = RedisRevocations(redis, prefix=settings.redis_prefix)
        event_hub.on_stop(answers.stop)
        if isinstance(event_hub, RedisHub):
            event_hub.on_orphan(answers.end_orphan)
        titles = TitleService(
            model=chat_model, model_name=settings.title_model_name, store=store, hub=event_hub
        )

        async def title_after_first_exchange(answer: RunningAnswer, status: str) -> None:
            if answer.spec.first_user_message is not None:
                titles.schedule(answer.conversation_id, answer.spec.first_user_message, answer.text)

        answers.on_stored(title_after_first_exchange)
        services = Services(
            settings=settings,
            engine=engine,
            store=store,
            hub=event_hub,
            model=chat_model,
            answers=answers,
            titles=titles,
            windows=WindowCache(settings.window_messages),
            catalog=catalog,
            identity=IdentityService(verifier, engine, catalog.roles, transactions),
            approvals=ApprovalService(engine, settings.approval_ttl),
            member_limiter=member_limiter,
            socket_cap=socket_cap,
            pages=PageContextResolver(catalog.pages, catalog.resolvers, catalog.registry.resources),
            guards=GuardService(GuardPolicy(config.guards), engine, on_finding=metrics.guard_finding),
            scripted=scripted,
            metrics=metrics,
            quotas=quotas,
            revocations=revocations,
        )
        logger.info(
            "vernis started",
            extra={
                "model": settings.chat_model,
                "llm_base_url": settings.llm_base_url,
                "toolkits": [toolkit.name for toolkit in catalog.toolkits],
                "demo": settings.demo,
            },
        )
        if freeze_gc:
            # Everything made at start (modules, the catalog, clients) lives as long as the process:
            # kept out of the collector's full passes, which otherwise walk it all again and again,
            # each pass a pause of every stream (p99 of a delta's latency).
            gc.collect()
            gc.freeze()
            # A full collection walks every live object (sockets, tasks, windows: about 60,000 at
            # 200 streams, 40-80 ms here, longer as the process grows); by default one runs after
            # every 10 collections of the middle generation, every 4-5 s under load: those pauses
            # were the paced p99 (61 ms, 36.7 ms without them). After 100, about once a minute, at
            # the price of cyclic garbage living that long.
            young, middle, _ = gc.get_threshold()
            gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
        sockets = Sockets()
        revocations.on_revoke(sockets.revoke)
        revocations_task = asyncio.create_task(revocations.run(), name="revocations")
        watch = asyncio.create_task(
            sockets.watch(services.identity, settings.auth_check_interval, socket_cap),
            name="socket members watch",
        )
        try:
            yield {"services": services, "sockets": sockets}
        finally:
            watch.cancel()
            revocations_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await revocations_task
            services.draining = True
            await answers.shutdown(settings.shutdown_grace)
            await titles.aclose()
            await event_hub.aclose()
            hub_upkeep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await hub_upkeep
            if redis is not None:
                await redis.aclose()
            if model is None:
                await chat_model.aclose()
            await catalog.stop()
            await verifier.aclose()
            await transactions.aclose()
            await engine.dispose()
            logger.info("vernis stopped")

    routes: list[BaseRoute] = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        *api_routes(),
        *ops_routes(),
        *demo_routes,
        *web_routes(),
    ]
    # Every HTTP response carries the security headers (CSP, nosniff, ...); sockets pass through.
    return SocketFirst(Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(SecurityHeaders)]))


def app_from_environment() -> SocketFirst:
    """The app of one worker of `vernis serve --workers N`, from the environment the supervisor set."""
    from vernis.logs import configure_logging

    settings = load_settings()
    configure_logging(settings.log_level, settings.log_format)
    return create_app(settings, scripted=os.environ.get("VERNIS_SCRIPTED_MODEL") == "1", freeze_gc=True)


class SocketFirst:
    """The app as the server runs it: the assistant's socket straight from the server, everything
    else (HTTP, lifespan) through Starlette and its middleware.

    A socket lives for hours: through the middleware stack it would keep a coroutine frame per layer
    (about 4.5 KB a socket) and pass every frame it sends through each layer's wrapper. The socket
    needs none of them (the security headers are for HTTP responses).
    """

    def __init__(self, app: Starlette) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and scope["path"] == SOCKET_PATH:
            await assistant_socket(WebSocket(scope, receive, send))
            return
        await self.app(scope, receive, send)


async def _recover(store: ConversationStore, hub: EventHub, *, shared: bool) -> int:
    """Answers left `streaming` by a process that died: alone, every one of them; with several
    instances, only those whose conversation no live instance holds (no lease)."""
    if not shared:
        return await store.recover_interrupted()
    orphans = [
        message_id
        for message_id, conversation_id in await store.streaming_answers()
        if await hub.holder(conversation_id) is None
    ]
    return await store.fail_answers(orphans)


def _model_from(settings: Settings, metrics: Metrics) -> ChatModel:
    assert settings.llm_base_url is not None
    return OpenAIChatModel(
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key,
        stall_timeout=settings.llm_stall_timeout,
        connect_timeout=settings.llm_connect_timeout,
        max_retries=settings.llm_max_retries,
        on_fault=metrics.llm_fault,
    )


async def healthz(request: Request) -> Response:
    """Liveness: the process answers."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Readiness: the database answers and the server is not shutting down."""
    services: Services = request.state.services
    if services.draining:
        return JSONResponse({"status": "shutting down"}, status_code=503)
    try:
        async with services.engine.connect() as connection:
            await connection.execute(sa.text("SELECT 1"))
    except Exception:
        logger.exception("readiness check: database unreachable")
        return JSONResponse({"status": "database unavailable"}, status_code=503)
    return JSONResponse({"status": "ready", "answers_in_flight": services.answers.in_flight})
