"""The shared resources of one running app: `Services`, and `open_services`, which opens them all
(in the app's lifespan, or in a test) and closes them in the reverse order."""

from __future__ import annotations

import asyncio
import io
import logging
import os
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import sqlalchemy as sa
from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.answers.admission import Gate
from vernis.answers.compaction import Compactor
from vernis.answers.registry import AnswerService
from vernis.answers.running import RunningAnswer
from vernis.answers.titles import TitleService
from vernis.attachments import AttachmentService, open_blob_store
from vernis.config import ConfigError, EmbedSection, HostConfig
from vernis.conversation import tokens
from vernis.conversation.feedback import FeedbackStore
from vernis.conversation.store import ConversationStore
from vernis.conversation.summaries import SummaryStore
from vernis.conversation.window import WindowCache
from vernis.guards import GuardPolicy, GuardService
from vernis.hub.base import Encoder, EventHub
from vernis.hub.memory import MemoryHub
from vernis.hub.redis import RedisHub
from vernis.identity.revocations import MemoryRevocations, RedisRevocations, Revocations
from vernis.identity.service import IdentityService
from vernis.identity.tokens import TokenVerifier
from vernis.limits.quotas import MemoryQuotaCounter, QuotaPolicy, QuotaService, RedisQuotaCounter
from vernis.limits.rate import MemberRateLimiter, MemorySocketCap, RateLimiter, SocketCap
from vernis.limits.redis import RedisRateLimiter, RedisSocketCap
from vernis.limits.usage import Spent, UsageStore
from vernis.metrics import Metrics
from vernis.model.base import ChatModel, ModelRoute
from vernis.model.openai import OpenAIChatModel
from vernis.pages import PageContextResolver
from vernis.settings import Settings
from vernis.store.engine import create_engine
from vernis.store.redis import redis_client
from vernis.store.transactions import transactions_for
from vernis.tools.approvals import ApprovalService
from vernis.tools.blocks import BlockRules
from vernis.tools.catalog import Catalog
from vernis.tools.client import ClientToolBroker
from vernis.tools.questions import QuestionService
from vernis.tools.reviews import ReviewService
from vernis.tracing.spans import Tracing
from vernis.webhooks.delivery import Deliverer
from vernis.webhooks.outbox import Outbox

__all__ = ["Services", "open_services", "recover_interrupted", "running", "verifier_from"]

logger = logging.getLogger("vernis.app")

# How long the start waits for Redis to answer.
REDIS_START_TIMEOUT = 5.0


@dataclass(eq=False)
class Services:
    settings: Settings
    engine: AsyncEngine
    store: ConversationStore
    # Members' ratings of answers, with their `feedback.created` webhook (SPEC §22).
    feedback: FeedbackStore
    hub: EventHub
    model: ChatModel
    answers: AnswerService
    titles: TitleService
    windows: WindowCache
    # Summary checkpoints of long conversations (SPEC §19).
    summaries: SummaryStore
    # Summarises a window that passed its budget; None: such a window drops its older messages.
    compactor: Compactor | None
    catalog: Catalog
    identity: IdentityService
    approvals: ApprovalService
    member_limiter: RateLimiter
    socket_cap: SocketCap
    pages: PageContextResolver
    # The one admission path of every answer (limits, quotas, the lease).
    gate: Gate
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
    # What the panel shows from other origins (the configuration's `[embed]`).
    embed: EmbedSection = field(default_factory=EmbedSection)
    # Writes a second member approves (SPEC §23); none unless the app sets it.
    reviews: ReviewService | None = None
    # What tool results' UI blocks may hold (SPEC §16): the toolkits' kinds, `[embed] link_origins`.
    blocks: BlockRules = field(default_factory=BlockRules)
    # The questions `ask_user` asked, waiting for the user's form (SPEC §17); none unless the app sets it.
    questions: QuestionService | None = None
    # The host pages' own tools (SPEC §18): the sockets that declared some, and the calls in flight.
    client_tools: ClientToolBroker = field(default_factory=ClientToolBroker)
    # Uploaded files (SPEC §21); none unless the app sets it.
    attachments: AttachmentService | None = None


@asynccontextmanager
async def open_services(
    settings: Settings,
    config: HostConfig,
    catalog: Catalog,
    *,
    verifier: TokenVerifier | None = None,
    encode: Encoder,
    model: ChatModel | None = None,
    hub: EventHub | None = None,
    scripted: bool = False,
) -> AsyncIterator[Services]:
    """Every shared resource of one app, opened in order on one `AsyncExitStack` and closed in the
    reverse order on the way out, whatever happens: a start that fails half-way (Redis unreachable
    after the database opened, a toolkit's start-up hook raising) closes what it had opened, then
    raises. `verifier` checks the host's tokens (made from `settings` when left out); it is closed
    with the rest. `encode` turns an event into its wire frame (the hub stores frames); a `model` or `hub`
    passed in is the caller's: used, not closed.

    On the way out the answers still running get `settings.shutdown_grace` seconds to finish; what
    is left is stored as stopped."""
    async with AsyncExitStack() as stack:
        engine = create_engine(
            settings.database_url,
            pool_size=settings.database_pool_size,
            statement_timeout=settings.database_statement_timeout,
        )
        stack.push_async_callback(engine.dispose)
        transactions = transactions_for(engine, statement_timeout=settings.database_statement_timeout)
        stack.push_async_callback(transactions.aclose)
        store = ConversationStore(engine, transactions=transactions)
        verifier = verifier or verifier_from(settings)
        stack.push_async_callback(verifier.aclose)
        metrics = Metrics(is_tool=lambda name: catalog.registry.get(name) is not None)
        chat_model = model
        if chat_model is None:
            chat_model = _model_from(settings, metrics)
            stack.push_async_callback(chat_model.aclose)
        options = {entry.name: entry.options for entry in config.toolkits}
        # `start` stops the toolkits it started when one of them fails; `stop` is for the way out.
        await catalog.start(engine, options)
        stack.push_async_callback(catalog.stop)

        member_limiter: RateLimiter
        socket_cap: SocketCap
        redis = None
        if settings.redis_url:
            # Several instances (SPEC §10): events, leases and limits shared through Redis.
            redis = redis_client(settings.redis_url)
            stack.push_async_callback(redis.aclose)
            await _reach(redis)
            prefix = settings.redis_prefix
            event_hub = hub or RedisHub(redis, encode, prefix=prefix)
            member_limiter = RedisRateLimiter(redis, settings.member_rate_limit, prefix=prefix)
            socket_cap = RedisSocketCap(
                redis, settings.max_sockets_per_member, prefix=prefix, ttl=3 * settings.auth_check_interval
            )
        else:
            event_hub = hub or MemoryHub(encode)
            member_limiter = MemberRateLimiter(settings.member_rate_limit)
            socket_cap = MemorySocketCap(settings.max_sockets_per_member)

        recovered = await recover_interrupted(store, event_hub, shared=redis is not None)
        if recovered:
            logger.warning("%d answers were interrupted by the last shutdown; marked failed", recovered)
        await stack.enter_async_context(running(event_hub.run(), "hub upkeep"))
        # Closed before its upkeep stops: what is waiting to be sent still goes out.
        stack.push_async_callback(event_hub.aclose)

        # Webhooks (SPEC §22): events go to the outbox with their change; one loop sends them.
        outbox = Outbox(config.webhooks)
        if config.webhooks:
            deliverer = Deliverer(
                engine,
                config.webhooks,
                backoff=settings.webhook_backoff,
                retry_for=settings.webhook_retry_for,
                poll_interval=settings.webhook_poll_interval,
            )
            outbox.on_written(deliverer.wake)
            await stack.enter_async_context(running(deliverer.run(), "webhook delivery"))
        # Traces (SPEC §22): on when an OTLP endpoint is set; what is queued is sent on the way out.
        tracing = Tracing.from_environ(
            content=settings.trace_content, on_dropped=metrics.trace_spans_dropped.inc
        )
        stack.push_async_callback(tracing.shutdown)
        fallbacks = _fallbacks_from(config, settings, metrics)
        for route in fallbacks:
            stack.push_async_callback(route.client.aclose)
        answers = AnswerService(
            store=store,
            hub=event_hub,
            model=chat_model,
            metrics=metrics,
            outbox=outbox,
            tracing=tracing,
            fallbacks=fallbacks,
            store_reasoning=settings.store_reasoning,
        )
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

        def spent(answer: RunningAnswer) -> Spent | None:
            spec = answer.spec
            if spec.member_id is None or spec.organization_id is None:
                return None
            input_tokens, output_tokens = answer.tokens()
            return quotas.spent(
                organization_id=spec.organization_id,
                member_id=spec.member_id,
                model=answer.model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cached_tokens=answer.cached_tokens,
            )

        # An ending answer's tokens as its usage row holds them, from that row's transaction to the
        # counters: they add what the row got (its day too, should midnight pass between the two),
        # reckoned once. Should that transaction fail, the counters still add them: the tokens were
        # spent, and the quota holds until the counter lapses and is seeded again from the table.
        written: WeakKeyDictionary[RunningAnswer, Spent] = WeakKeyDictionary()

        def usage_rows(ended: Sequence[RunningAnswer]) -> tuple[sa.Executable, list[dict[str, Any]]] | None:
            # The usage table first, in the answers' own transaction; the counters after it.
            found: list[Spent] = []
            for answer in ended:
                item = spent(answer)
                if item is not None:
                    written[answer] = item
                    found.append(item)
            return quotas.usage.rows(found) if found else None

        async def count_usage(answer: RunningAnswer, status: str) -> None:
            found = written.pop(answer, None)
            if found is not None:
                await quotas.count(found)

        answers.with_final_rows(usage_rows)
        answers.on_usage(count_usage)
        revocations: Revocations = MemoryRevocations()
        if redis is not None:
            revocations = RedisRevocations(redis, prefix=settings.redis_prefix)
        await stack.enter_async_context(running(revocations.run(), "revocations"))
        event_hub.on_stop(answers.stop)
        if isinstance(event_hub, RedisHub):
            event_hub.on_orphan(answers.end_orphan)
        guards = GuardService(GuardPolicy(config.guards), engine, on_finding=metrics.guard_finding)
        titles = TitleService(
            model=chat_model,
            model_name=settings.title_model_name,
            store=store,
            hub=event_hub,
            guards=guards,
            fallbacks=fallbacks,
        )
        stack.push_async_callback(titles.aclose)
        summaries = SummaryStore(engine, transactions)
        compactor = Compactor(
            model=chat_model,
            model_name=settings.title_model_name,
            summaries=summaries,
            hub=event_hub,
            guards=guards,
            fallbacks=fallbacks,
        )
        # The token table takes half a second to read: off the event loop, once per process.
        await asyncio.to_thread(tokens.load)

        async def title_after_first_exchange(answer: RunningAnswer, status: str) -> None:
            if answer.spec.first_user_message is not None:
                titles.schedule(
                    answer.conversation_id, answer.spec.first_user_message, answer.text, answer.spec.member
                )

        answers.on_stored(title_after_first_exchange)
        attachments = AttachmentService(
            engine,
            await stack.enter_async_context(open_blob_store(settings)),
            quota_bytes=settings.attachment_quota_bytes,
            text_tokens=settings.attachment_text_tokens,
            vision=config.model.vision,
        )
        identity = IdentityService(
            verifier, engine, catalog.roles, transactions, recent_seconds=settings.auth_check_interval
        )
        # A revoked member's identities kept for HTTP requests go at once, on every instance.
        revocations.on_revoke(lambda member_id, _: identity.forget(member_id))
        services = Services(
            settings=settings,
            engine=engine,
            store=store,
            feedback=FeedbackStore(engine, outbox=outbox),
            hub=event_hub,
            model=chat_model,
            answers=answers,
            titles=titles,
            summaries=summaries,
            compactor=compactor,
            windows=WindowCache(
                settings.window_messages,
                keep=settings.context_keep_recent,
                budget=settings.context_budget_tokens,
            ),
            catalog=catalog,
            identity=identity,
            approvals=ApprovalService(
                engine, settings.approval_ttl, outbox=outbox, transactions=transactions
            ),
            member_limiter=member_limiter,
            socket_cap=socket_cap,
            pages=PageContextResolver(catalog.pages, catalog.resolvers, catalog.registry.resources),
            gate=Gate(member_limiter=member_limiter, hub=event_hub, metrics=metrics, quotas=quotas),
            guards=guards,
            scripted=scripted,
            metrics=metrics,
            quotas=quotas,
            revocations=revocations,
            embed=config.embed,
            blocks=BlockRules(kinds=catalog.ui_kinds, link_origins=config.embed.link_origins),
            reviews=ReviewService(engine, settings.review_ttl, outbox=outbox),
            questions=QuestionService(engine, settings.approval_ttl, outbox=outbox),
            client_tools=ClientToolBroker(timeout=settings.client_tool_timeout),
            attachments=attachments,
        )

        async def drain() -> None:
            services.draining = True
            await answers.shutdown(settings.shutdown_grace)

        stack.push_async_callback(drain)
        yield services


async def _reach(redis: Redis) -> None:
    """Redis answers, or the start stops here with a message naming the setting: an instance that
    cannot share its state must not take sockets. (Once running, an outage is survived: SPEC §10.)"""
    where = "{host}:{port}".format_map({"host": "?", "port": "?"} | redis.connection_pool.connection_kwargs)
    try:
        async with asyncio.timeout(REDIS_START_TIMEOUT):
            await redis.ping()
    except (RedisError, OSError, TimeoutError) as exc:
        raise ConfigError(
            f"VERNIS_REDIS_URL: Redis at {where} cannot be reached ({type(exc).__name__}); "
            "start it, or fix the setting"
        ) from exc


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


# How long a background task may take to end once cancelled, before shutdown goes on without it.
STOP_SECONDS = 5.0


@asynccontextmanager
async def running(
    work: Coroutine[Any, Any, None], name: str, *, stop_seconds: float = STOP_SECONDS
) -> AsyncIterator[None]:
    """`work` runs as a task while the block runs; cancelled and awaited on the way out.

    The wait is bounded: a task that has not ended `stop_seconds` after its cancellation (a library
    that swallowed it, say, waiting on a lock inside a Redis client whose server is gone) is logged
    with its stack and left behind, so a server's shutdown never hangs on one of its helpers. An
    error the task ended with is raised, as `await task` would.
    """
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=stop_seconds)
        if not done:
            stack = io.StringIO()
            task.print_stack(file=stack)
            logger.error(
                "%s did not end within %g s of its cancellation; shutdown goes on\n%s",
                name,
                stop_seconds,
                stack.getvalue(),
            )
        elif not task.cancelled() and (error := task.exception()) is not None:
            raise error


async def recover_interrupted(store: ConversationStore, hub: EventHub, *, shared: bool) -> int:
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


def _fallbacks_from(config: HostConfig, settings: Settings, metrics: Metrics) -> list[ModelRoute]:
    """The models of `[[model.fallbacks]]` (SPEC §19), with the chat model's timeouts and retries."""
    return [
        ModelRoute(
            OpenAIChatModel(
                base_url=entry.base_url,
                api_key=os.environ.get(entry.api_key_env) if entry.api_key_env else None,
                stall_timeout=settings.llm_stall_timeout,
                connect_timeout=settings.llm_connect_timeout,
                max_retries=settings.llm_max_retries,
                on_fault=metrics.llm_fault,
            ),
            entry.model,
        )
        for entry in config.model.fallbacks
    ]


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
