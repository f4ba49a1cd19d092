"""Answers that belong to the conversation, not to the socket that asked.

`AnswerService.start()` runs an answer as a task of the app: the socket that sent the message may
close, the answer still runs to its end and is stored. Its events go through the hub to every socket
that shows the conversation. This module turns the loop's events into the conversation's events
(`vernis.conversation.events`); the socket layer encodes them.

Storage, per answer: the assistant message's row exists from the start (empty, `streaming`: stored
with the user's message, `ConversationStore.add_exchange`). While answers stream, one flusher writes
every answer that changed, once a second, many to a transaction (never per delta, never one write
per answer). At its end an answer is written once more with its final status (`complete`,
`stopped` or `failed`), text, tool calls and token counts; answers ending together share that write
too (a group commit: the first to arrive writes for all that queue behind it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any
from uuid import UUID

from vernis.answers.loop import (
    AnswerEvent,
    ModelSwitched,
    ReasoningChunk,
    TextChunk,
    ToolFinished,
    ToolStarted,
    UsageAdded,
    run_loop,
)
from vernis.answers.running import AnswerSpec, AnswerStored, FinalRows, RunningAnswer
from vernis.conversation import events
from vernis.conversation.store import ConversationStore, MessageUpdate
from vernis.conversation.window import WindowEntry
from vernis.exceptions import LLMError, VernisError
from vernis.hub.base import EventHub
from vernis.logs import conversation_context
from vernis.metrics import Metrics
from vernis.model.base import ChatModel, ModelRoute
from vernis.model.traced import traced_model
from vernis.store.models import MessageRole, MessageStatus
from vernis.store.transactions import GroupCommit
from vernis.tools.reviews import ReviewInfo
from vernis.tracing.spans import Tracing
from vernis.webhooks.outbox import Outbox, ids

__all__ = ["AnswerService", "announce_review"]

logger = logging.getLogger("vernis.answers")

FLUSH_INTERVAL = 1.0
# The flush writes at most this many answers a transaction, and lets the event loop run between
# two: however many answers stream, no delta waits behind more than one such write (what one holds
# the loop for: bench/results/2026-11-server.md).
FLUSH_ROWS = 50


def announce_review(hub: EventHub, review: ReviewInfo) -> None:
    """A write waits for a reviewer (SPEC §23): its card says so in the requester's conversation, and
    every reviewer's socket hears of it (their review channel), on every instance."""
    hub.publish(
        review.conversation_id,
        events.ReviewRequested(
            review_id=review.id,
            call_id=review.call_id,
            tool_name=review.tool_name,
            expires_at=review.expires_at,
        ),
    )
    hub.publish(review.channel, events.ReviewRequired(review=review))


class AnswerService:
    def __init__(
        self,
        *,
        store: ConversationStore,
        hub: EventHub,
        model: ChatModel,
        metrics: Metrics | None = None,
        outbox: Outbox | None = None,
        tracing: Tracing | None = None,
        fallbacks: Sequence[ModelRoute] = (),
        store_reasoning: bool = True,
    ) -> None:
        self._store = store
        # VERNIS_STORE_REASONING: whether the model's reasoning is stored with the answer (SPEC §19).
        self._store_reasoning = store_reasoning
        self._hub = hub
        self._model = model
        # `[[model.fallbacks]]` (SPEC §19): asked in order when the chat model fails before the first token.
        self._fallbacks = tuple(fallbacks)
        self._metrics = metrics or Metrics()
        self._running: dict[UUID, RunningAnswer] = {}
        # Approved writes being carried out, per conversation (`carry_out`).
        self._writes: dict[UUID, set[asyncio.Task[None]]] = {}
        self._stored_hooks: list[AnswerStored] = []
        self._usage_hooks: list[AnswerStored] = []
        self._flusher: asyncio.Task[None] | None = None
        # The group commit of answer rows: rows waiting to be written, and whether a writer is at work.
        # Final rows of answers ending together share one write (a group commit).
        # Each with its `answer.completed` webhook rows (SPEC §22), written in the same transaction,
        # and what `with_final_rows` adds.
        self._final_rows = GroupCommit[tuple[MessageUpdate, list[dict[str, Any]], RunningAnswer]](
            self._write_final
        )
        self._final_extras: list[FinalRows] = []
        self._outbox = outbox
        # Traces (SPEC §22): a span per answer when an OTLP endpoint is set.
        self._tracing = tracing or Tracing()

    def on_stored(self, hook: AnswerStored) -> None:
        self._stored_hooks.append(hook)

    def with_final_rows(self, rows: FinalRows) -> None:
        """What `rows` gives for the answers ending together is written in the transaction of their
        final rows, and fails with them: an answer's usage costs no commit of its own."""
        self._final_extras.append(rows)

    async def _write_final(
        self, items: list[tuple[MessageUpdate, list[dict[str, Any]], RunningAnswer]]
    ) -> None:
        ended = [answer for _, _, answer in items]
        also = [found for extra in self._final_extras if (found := extra(ended)) is not None]
        await self._store.update_messages(
            [update for update, _, _ in items], [row for _, rows, _ in items for row in rows], also
        )

    def on_usage(self, hook: AnswerStored) -> None:
        """`hook` runs once the answer is stored and before its end is published (the next
        message's quota check sees its tokens)."""
        self._usage_hooks.append(hook)

    def running(self, conversation_id: UUID) -> RunningAnswer | None:
        return self._running.get(conversation_id)

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def start(self, spec: AnswerSpec, owner: str) -> RunningAnswer:
        """Run an answer; the caller already holds the conversation's lease as `owner`."""
        answer = RunningAnswer(spec, message_id=spec.message_id, owner=owner)
        self._running[spec.conversation_id] = answer
        self._metrics.answers_in_flight.inc()
        answer.task = asyncio.create_task(self._run(answer), name=f"answer {spec.conversation_id}")
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_periodically(), name="answer flusher")
        return answer

    def carry_out(self, conversation_id: UUID, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run `work` (an approved write and what follows it) as a task of the conversation: the
        socket that approved it goes on answering meanwhile, `stop` cancels it like an answer, and
        shutdown lets it finish within the grace period."""
        task = asyncio.create_task(work, name=f"write {conversation_id}")
        tasks = self._writes.setdefault(conversation_id, set())
        tasks.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            tasks.discard(finished)
            if not tasks and self._writes.get(conversation_id) is tasks:
                del self._writes[conversation_id]

        task.add_done_callback(done)
        return task

    def stop(self, conversation_id: UUID) -> bool:
        """Cancel the conversation's answer and the writes being carried out in it; whether there
        was anything to stop."""
        stopped = False
        for task in self._writes.get(conversation_id, ()):
            stopped = task.cancel() or stopped
        answer = self._running.get(conversation_id)
        if answer is None or answer.task is None or answer.task.done():
            return stopped
        answer.task.cancel()
        return True

    async def end_orphan(self, conversation_id: UUID, message_id: UUID) -> None:
        """An answer whose instance died mid-answer (SPEC §10): its stored partial text is kept and
        marked failed, and every socket that shows the conversation sees it end."""
        await self._store.fail_answers([message_id])
        self._hub.publish(
            conversation_id,
            events.ErrorOccurred(
                code="llm_unavailable",
                message="The answer was interrupted: the server writing it stopped. Send your message again.",
            ),
        )
        self._hub.publish(
            conversation_id,
            events.AnswerEnded(conversation_id=conversation_id, message_id=message_id, stopped=False),
        )

    async def shutdown(self, grace: float) -> None:
        """Let answers finish for `grace` seconds, then stop the rest (their partial text is stored)."""
        tasks = [a.task for a in self._running.values() if a.task is not None]
        tasks += [task for writes in self._writes.values() for task in writes]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)

    # --- the run ------------------------------------------------------------------------------

    async def _run(self, answer: RunningAnswer) -> None:
        spec = answer.spec
        conversation_id = spec.conversation_id
        status = MessageStatus.COMPLETE
        error: VernisError | None = None
        traced = self._tracing.answer(
            conversation_id=conversation_id,
            message_id=answer.message_id,
            model=spec.loop.model,
            org=spec.member.organization_external_id if spec.member else None,
            parent=spec.trace_parent,
        )
        with conversation_context(conversation_id), traced as answer_trace:
            self._hub.publish(
                conversation_id,
                events.AnswerStarted(
                    conversation_id=conversation_id,
                    message_id=answer.message_id,
                    continues=True if spec.continues else None,
                ),
            )
            try:
                model = traced_model(self._model)
                fallbacks = [ModelRoute(traced_model(route.client), route.model) for route in self._fallbacks]
                await run_loop(
                    model,
                    spec.messages,
                    spec.runner,
                    spec.loop,
                    self._emitter(answer),
                    fallbacks=fallbacks,
                    history_tokens=spec.history_tokens,
                )
            except asyncio.CancelledError:
                status = MessageStatus.STOPPED
                raise
            except LLMError as exc:
                status, error = MessageStatus.FAILED, exc
                # The operator's text (which setting to check) and the detail: the logs only.
                logger.warning(
                    "answer failed: %s: %s %s",
                    type(exc).__name__,
                    exc.public_message,
                    getattr(exc, "detail", ""),
                )
            except Exception:
                status, error = MessageStatus.FAILED, VernisError()
                logger.exception("answer failed")
            finally:
                answer_trace.ended(
                    status.value,
                    error,
                    input_tokens=answer.prompt_tokens,
                    output_tokens=answer.completion_tokens,
                    text=answer.text,
                )
                # Shielded: a second cancellation (shutdown) must not lose what was written.
                await asyncio.shield(self._finish(answer, status, error))

    def _emitter(self, answer: RunningAnswer) -> Callable[[AnswerEvent], None]:
        hub, conversation_id = self._hub, answer.spec.conversation_id
        publish = hub.publish
        parts = answer.parts
        text_delta = events.TextDelta

        def emit(event: AnswerEvent) -> None:
            if type(event) is TextChunk:
                # The hot path: no model objects, no storage, one small orjson encode.
                parts.append(event.content)
                answer._dirty = True
                if answer.first_token_at is None:
                    answer.first_token_at = time.monotonic()
                publish(conversation_id, text_delta(event.content))
            elif type(event) is ReasoningChunk:
                answer.reasoning.append(event.content)
                answer._dirty = True
                publish(conversation_id, events.ReasoningDelta(event.content))
            elif isinstance(event, ToolStarted):
                answer.tool_calls.append(
                    {
                        "call_id": event.call_id,
                        "tool_name": event.tool_name,
                        "arguments": event.arguments,
                        "status": "running",
                        "result": None,
                        # Where in the answer's text the call came (history puts its card there).
                        "text_offset": sum(map(len, parts)),
                    }
                )
                answer._dirty = True
                publish(
                    conversation_id,
                    events.ToolCallStarted(
                        call_id=event.call_id, tool_name=event.tool_name, arguments=event.arguments
                    ),
                )
            elif isinstance(event, ToolFinished):
                outcome = event.outcome
                for stored in reversed(answer.tool_calls):
                    if stored["call_id"] == outcome.call_id and stored["status"] == "running":
                        stored.update(outcome.stored())
                        break
                answer._dirty = True
                # A call that carried out an earlier preview (approved in the chat) also ends that
                # preview's card.
                cards = (
                    [outcome.call_id]
                    if outcome.resolved_call is None
                    else [outcome.call_id, outcome.resolved_call]
                )
                for call_id in cards:
                    publish(
                        conversation_id,
                        events.ToolCallCompleted(
                            call_id=call_id,
                            tool_name=outcome.tool_name,
                            status=outcome.status,
                            result=outcome.envelope,
                        ),
                    )
                review = outcome.review
                if review is not None:
                    # Approved in the chat, sent to review (SPEC §23): the card waits, reviewers hear.
                    announce_review(hub, review)
                if outcome.confirmation_id is not None:
                    publish(
                        conversation_id,
                        events.ConfirmationRequired(
                            confirmation_id=outcome.confirmation_id,
                            call_id=outcome.call_id,
                            tool_name=outcome.tool_name,
                            preview=outcome.preview,
                        ),
                    )
                question = outcome.question
                if question is not None:
                    # The model asked (SPEC §17): the form, after its card.
                    publish(
                        conversation_id,
                        events.QuestionRequired(
                            question_id=question.id,
                            call_id=outcome.call_id,
                            title=question.title,
                            questions=question.wire_questions(),
                            expires_at=question.expires_at,
                        ),
                    )
            elif isinstance(event, UsageAdded):
                answer.prompt_tokens += event.prompt_tokens
                answer.first_prompt_tokens = answer.first_prompt_tokens or event.prompt_tokens
                answer.completion_tokens += event.completion_tokens
                answer.cached_tokens += event.cached_tokens
            elif isinstance(event, ModelSwitched):
                answer.model = event.model

        return emit

    async def _flush_periodically(self) -> None:
        """Every `FLUSH_INTERVAL`, write every streaming answer that changed, `FLUSH_ROWS` to a
        transaction, the loop running between two; ends when no answer runs (the next answer starts
        it again). An answer that ended meanwhile is not written back to `streaming`: its final row
        is, and the update writes only rows still streaming (`UPDATE_ANSWER`)."""
        while self._running:
            await asyncio.sleep(FLUSH_INTERVAL)
            dirty = [answer for answer in self._running.values() if answer._dirty]
            for start in range(0, len(dirty), FLUSH_ROWS):
                if start:
                    await asyncio.sleep(0)
                batch = [answer for answer in dirty[start : start + FLUSH_ROWS] if answer._dirty]
                for answer in batch:
                    answer._dirty = False
                try:
                    await self._store.update_messages(
                        [self._row(answer, MessageStatus.STREAMING) for answer in batch]
                    )
                except Exception:
                    # A failed flush is retried by the next one; the final write reports for real.
                    for answer in batch:
                        answer._dirty = True
                    logger.exception("flushing %d partial answers failed", len(batch))

    def _row(self, answer: RunningAnswer, status: MessageStatus, *, final: bool = False) -> MessageUpdate:
        return MessageUpdate(
            answer.message_id,
            answer.text,
            [dict(call) for call in answer.tool_calls] or None,
            status,
            prompt_tokens=(answer.prompt_tokens or None) if final else None,
            completion_tokens=(answer.completion_tokens or None) if final else None,
            reasoning="".join(answer.reasoning) or None if self._store_reasoning else None,
            # A fallback answered (SPEC §19): the row names it, as the usage, logs and metrics do.
            model=answer.model if final and answer.model != answer.spec.loop.model else None,
        )

    def _completed(self, answer: RunningAnswer, status: MessageStatus) -> list[dict[str, Any]]:
        """The outbox rows of `answer.completed`, if a webhook asks for it."""
        if (
            self._outbox is None
            or status != MessageStatus.COMPLETE
            or not self._outbox.wants("answer.completed")
        ):
            return []
        member = answer.spec.member
        data = ids(
            conversation_id=answer.conversation_id,
            message_id=answer.message_id,
            org=member.organization_external_id if member else None,
            sub=member.external_id if member else None,
            model=answer.model,
        )
        data["tools"] = [call["tool_name"] for call in answer.tool_calls]
        return self._outbox.rows("answer.completed", data, text={"text": answer.text})

    async def _finish(self, answer: RunningAnswer, status: MessageStatus, error: VernisError | None) -> None:
        conversation_id = answer.spec.conversation_id
        answer._dirty = False
        for call in answer.tool_calls:
            if call["status"] == "running":
                call["status"] = "error"
                call["result"] = {
                    "ok": False,
                    "error": {
                        "code": "interrupted",
                        "message": "The answer ended before this call finished.",
                    },
                }
        try:
            await self._final_rows.submit(
                [(self._row(answer, status, final=True), self._completed(answer, status), answer)]
            )
            if self._outbox is not None and status == MessageStatus.COMPLETE:
                self._outbox.written()
        except Exception:
            logger.exception("storing the answer failed")
            status, error = MessageStatus.FAILED, error or VernisError()
        window = answer.spec.window
        if answer.first_prompt_tokens:
            # Before the answer joins it: the request counted the window as it was.
            window.observe(answer.first_prompt_tokens - answer.spec.overhead_tokens)
        window.append(
            WindowEntry(MessageRole.ASSISTANT, answer.text, tuple(answer.tool_calls), answer.message_id)
        )
        for hook in self._usage_hooks:
            try:
                await hook(answer, status)
            except Exception:
                logger.exception("counting the answer's tokens failed")
        if error is not None:
            self._hub.publish(
                conversation_id,
                events.ErrorOccurred(
                    code=error.code,
                    message=error.user_message if isinstance(error, LLMError) else error.public_message,
                ),
            )
        self._hub.publish(
            conversation_id,
            events.AnswerEnded(
                conversation_id=conversation_id,
                message_id=answer.message_id,
                stopped=status == MessageStatus.STOPPED,
                model=answer.model,
            ),
        )
        self._running.pop(conversation_id, None)
        await self._hub.release(conversation_id, answer.owner)
        ended = time.monotonic()
        self._record(answer, status, error, ended)
        if logger.isEnabledFor(logging.INFO):
            self._log(answer, status, ended)
        for hook in self._stored_hooks:
            try:
                await hook(answer, status)
            except Exception:
                logger.exception("an answer hook failed")

    def _log(self, answer: RunningAnswer, status: MessageStatus, ended: float) -> None:
        """The answer's log line (its figures, never its text)."""
        input_tokens, output_tokens = answer.tokens()
        logger.info(
            "answer %s",
            status.value,
            extra={
                "outcome": status.value,
                "model": answer.model,
                "message_id": str(answer.message_id),
                "duration_ms": round((ended - answer.started_at) * 1000),
                "ttft_ms": round((answer.first_token_at - answer.started_at) * 1000)
                if answer.first_token_at is not None
                else None,
                "tool_calls": len(answer.tool_calls),
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cached_tokens": answer.cached_tokens,
                # Estimated from text (vernis.limits.usage) when the provider reported none.
                "tokens_estimated": not (answer.prompt_tokens or answer.completion_tokens),
            },
        )

    def _record(
        self, answer: RunningAnswer, status: MessageStatus, error: VernisError | None, ended: float
    ) -> None:
        """The answer's metrics (vernis.metrics), once, at its end."""
        metrics = self._metrics
        metrics.answers_in_flight.dec()
        first = answer.first_token_at
        metrics.answer_ended(
            model=answer.model,
            outcome=status.value,
            duration=ended - answer.started_at,
            time_to_first_chunk=None if first is None else first - answer.started_at,
            input_tokens=answer.prompt_tokens,
            output_tokens=answer.completion_tokens,
            cached_tokens=answer.cached_tokens,
            tool_outcomes=[(call["tool_name"], call["status"]) for call in answer.tool_calls],
        )
