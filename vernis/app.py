"""The starlette application: routes, and the lifespan that owns every shared resource.

`build_catalog()` reads the configuration and loads the toolkits it names (plus the CRM in demo
mode) and its MCP servers, each a toolkit; `create_app()` checks everything it can before serving
(tokens can be verified, toolkits fit together) and connects to nothing. The lifespan enters the
shared resources (`vernis.runtime.open_services`: the database, the model client, the toolkits and
their MCP servers, Redis, the hub) and the socket registry on one `AsyncExitStack`: a start that fails
half-way closes what it had opened; on shutdown it stops taking sockets, lets running answers finish
for `VERNIS_SHUTDOWN_GRACE` seconds, stores whatever is left as stopped, and closes the rest in
reverse order.

Product mode serves the socket, the API and the embeddable UI, nothing else. Demo mode adds the demo
toolkits' host pages and login.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from vernis.agui.run import Pages
from vernis.config import ConfigError, HostConfig, load_config
from vernis.hub.base import EventHub
from vernis.identity.signing import SigningKeys
from vernis.model.base import ChatModel
from vernis.runtime import Services, open_services, running, verifier_from
from vernis.session.questions import expire_questions
from vernis.session.reviews import expire_reviews
from vernis.settings import Settings, load_settings
from vernis.tools import PagePattern, QuickAction, Toolkit, load_toolkits
from vernis.tools.catalog import Catalog
from vernis.web.agui import agui_routes
from vernis.web.api import api_routes
from vernis.web.assets import web_routes
from vernis.web.attachments import attachment_routes
from vernis.web.jwks import jwks_routes
from vernis.web.ops import ops_routes
from vernis.web.security import SecurityHeaders, security_headers
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


def build_catalog(
    settings: Settings, config: HostConfig | None = None, *, signing: SigningKeys | None = None
) -> Catalog:
    """Everything the toolkits and the configuration bring, checked. Raises `ConfigError` or
    `ToolkitError` with a message naming the file, key or toolkit at fault. `signing` signs the
    tokens MCP servers receive (made from `settings` when left out; nothing is read or made yet)."""
    if config is None:
        config = load_config(settings.config)
    if signing is None:
        signing = signing_keys(settings)
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
        servers[server.name] = McpToolkit(server, signing if server.forward_member_token else None)
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
        greeting=config.assistant.greeting,
        avatar_url=config.assistant.avatar_url,
        instructions=config.assistant.instructions,
        reviews=_reviews(settings, config, toolkits, where),
        ask_user=config.assistant.ask_user,
    )
    for index, reviewed in enumerate(config.reviews):
        for name in reviewed.tools:
            # An MCP server's tools are listed once it answers: its prefix is what can be checked.
            if catalog.registry.get(name) is None and config.mcp_server_of(name) is None:
                raise ConfigError(
                    f"{where}: reviews.{index}.tools: {name!r} is no tool of the loaded toolkits"
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


def _reviews(
    settings: Settings, config: HostConfig, toolkits: list[Toolkit[Any]], where: object
) -> dict[str, str]:
    """Tool name -> its reviewer's permission (SPEC §23): the configuration's `[[reviews]]`, and in
    demo mode the demo's for tools the configuration does not name."""
    reviews: dict[str, str] = {}
    for index, entry in enumerate(config.reviews):
        for name in entry.tools:
            if name in reviews:
                raise ConfigError(f"{where}: reviews.{index}.tools: {name!r} is reviewed twice")
            reviews[name] = entry.reviewer_permission
    if settings.demo:
        for toolkit in toolkits:
            if toolkit.demo is not None:
                for name, permission in toolkit.demo.reviews.items():
                    reviews.setdefault(name, permission)
    return reviews


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
    signing = signing_keys(settings)
    catalog = catalog if catalog is not None else build_catalog(settings, config, signing=signing)
    verifier = verifier_from(settings)
    # Read (or made) now, so that a key that cannot be read or kept stops the start.
    forwarding = any(server.forward_member_token for server in config.mcp_servers)
    jwks = jwks_routes(signing if forwarding or signing.configured else None)
    if forwarding and settings.redis_url and not signing.configured:
        logger.warning(
            "VERNIS_SIGNING_KEY is not set: the tokens MCP servers receive are signed with a key kept "
            "in this data directory; instances that do not share it must all set the same key"
        )
    demo_routes: list[BaseRoute] = []
    if settings.demo:
        assert settings.jwt_secret is not None, "load_settings() makes a secret in demo mode"
        for _, demo in catalog.demos:
            demo_routes.extend(demo.routes(settings.jwt_secret))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            services = await stack.enter_async_context(
                open_services(
                    settings,
                    config,
                    catalog,
                    verifier=verifier,
                    encode=encode,
                    model=model,
                    hub=hub,
                    scripted=scripted,
                )
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
                _freeze_gc()
            sockets = Sockets()
            services.revocations.on_revoke(sockets.revoke)
            await stack.enter_async_context(
                running(
                    sockets.watch(services.identity, settings.auth_check_interval, services.socket_cap),
                    "socket members watch",
                )
            )
            if catalog.reviews:
                await stack.enter_async_context(running(expire_reviews(services), "review expiry"))
            if config.assistant.ask_user:
                await stack.enter_async_context(running(expire_questions(services), "question expiry"))
            agui = Pages(settings.client_tool_timeout)
            stack.callback(agui.close)
            yield {"services": services, "sockets": sockets, "agui": agui}
        logger.info("vernis stopped")

    routes: list[BaseRoute] = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        *api_routes(),
        *agui_routes(),
        *attachment_routes(),
        *jwks,
        *ops_routes(),
        *demo_routes,
        *web_routes(),
    ]
    # Every HTTP response carries the security headers (CSP, nosniff, ...); sockets pass through.
    headers = security_headers(config.embed.image_origins)
    return SocketFirst(
        Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(SecurityHeaders, headers=headers)])
    )


def signing_keys(settings: Settings) -> SigningKeys:
    """Vernis's signing key: `VERNIS_SIGNING_KEY`, else the data directory's (see
    `vernis.identity.signing`). Raises `ConfigError` for a configured key that is unusable."""
    return SigningKeys(settings.signing_key, settings.data_dir)


def _freeze_gc() -> None:
    """Everything made at start (modules, the catalog, clients) lives as long as the process: kept
    out of the collector's full passes, which would otherwise walk it all again and again, each pass
    a pause of every stream. Full collections run after `FULL_COLLECTION_EVERY` collections of the
    middle generation instead of Python's 10, at the price of cyclic garbage living that long
    (`bench/results/` has the measurements behind this choice)."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


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
