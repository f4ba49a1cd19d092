"""The starlette application: routes, and the lifespan that owns every shared resource.

`create_app()` connects to nothing; the lifespan opens the database engine and the model client,
recovers answers a previous process left half-written, and on shutdown stops taking sockets, lets
running answers finish for `VERNIS_SHUTDOWN_GRACE` seconds and stores whatever is left as stopped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from vernis.api import api_routes
from vernis.context.page import page_resolver
from vernis.context.window import WindowCache
from vernis.db.engine import create_engine
from vernis.runtime import PageResolver, Services
from vernis.services.answers import AnswerService, RunningAnswer
from vernis.services.approvals import ApprovalService
from vernis.services.hub import EventHub, MemoryHub
from vernis.services.llm import ChatModel
from vernis.services.openai_model import OpenAIChatModel
from vernis.services.persistence import ConversationStore
from vernis.services.registry import ToolRegistry, ToolResources
from vernis.services.titles import TitleService
from vernis.settings import Settings, load_settings
from vernis.tools import default_registry
from vernis.web import web_routes
from vernis.web.security import SecurityHeaders
from vernis.ws.endpoint import assistant_socket
from vernis.ws.limits import MemberRateLimiter

__all__ = ["create_app"]

logger = logging.getLogger("vernis.app")

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"


def create_app(
    settings: Settings | None = None,
    *,
    model: ChatModel | None = None,
    registry: ToolRegistry | None = None,
    hub: EventHub | None = None,
    resolve_page: PageResolver | None = None,
    scripted: bool = False,
) -> Starlette:
    """Build the app. Arguments left out are made from `settings` when the app starts."""
    settings = settings or load_settings()
    if settings.redis_url and hub is None:
        # Several instances need the shared hub, lease and limits of SPEC §10; in-memory state
        # would silently break one-answer-per-conversation and resume across instances.
        raise RuntimeError(
            "VERNIS_REDIS_URL is set, but this version keeps conversation events, the answer lease and "
            "rate limits in memory, for one instance only. Unset VERNIS_REDIS_URL and run one instance."
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        engine = create_engine(settings.database_url)
        store = ConversationStore(engine)
        recovered = await store.recover_interrupted()
        if recovered:
            logger.warning("%d answers were interrupted by the last shutdown; marked failed", recovered)
        chat_model = model or _model_from(settings)
        event_hub = hub or MemoryHub()
        answers = AnswerService(store=store, hub=event_hub, model=chat_model)
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
            registry=registry if registry is not None else default_registry(),
            tool_resources=ToolResources(
                engine=engine, approvals=ApprovalService(engine, settings.approval_ttl)
            ),
            member_limiter=MemberRateLimiter(settings.member_rate_limit),
            resolve_page=resolve_page or page_resolver(engine),
            scripted=scripted,
        )
        logger.info(
            "vernis started", extra={"model": settings.chat_model, "llm_base_url": settings.llm_base_url}
        )
        try:
            yield {"services": services}
        finally:
            services.draining = True
            await answers.shutdown(settings.shutdown_grace)
            await titles.aclose()
            if model is None:
                await chat_model.aclose()
            await engine.dispose()
            logger.info("vernis stopped")

    routes: list[BaseRoute] = [
        WebSocketRoute("/api/assistant/ws", assistant_socket),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        *api_routes(),
        *web_routes(),
    ]
    if STATIC_DIR.is_dir():
        routes.append(Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"))
    # Every HTTP response carries the security headers (CSP, nosniff, ...); sockets pass through.
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(SecurityHeaders)])


async def _sweep(hub: MemoryHub) -> None:
    """Forget replay windows of conversations nobody has used for a while."""
    while True:
        await asyncio.sleep(60)
        hub.sweep()


def _model_from(settings: Settings) -> ChatModel:
    assert settings.llm_base_url is not None
    return OpenAIChatModel(
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key,
        stall_timeout=settings.llm_stall_timeout,
        connect_timeout=settings.llm_connect_timeout,
        max_retries=settings.llm_max_retries,
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
