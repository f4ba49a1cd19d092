"""Answers that belong to the conversation, not to the socket that asked.

`AnswerService.start()` runs an answer as a task of the app: the socket that sent the message may
close, the answer still runs to its end and is stored. Its events go through the hub to every socket
that shows the conversation. This module turns the loop's events into the conversation's events
(`vernis.services.events`); the socket layer encodes them.

Storage, per answer: the assistant message's row exists from the start (empty, `streaming`: stored
with the user's message, `ConversationStore.add_exchange`). While answers stream, one flusher writes
every answer that changed, once a second, all of them in one transaction (never per delta, never one
write per answer). At its end an answer is written once more with its final status (`complete`,
`stopped` or `failed`), text, tool calls and token counts; answers ending together share that write
too (a group commit: the first to arrive writes for all that queue behind it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID, uuid4

import orjson

from vernis.context.window import ConversationWindow, WindowEntry
from vernis.db.models import MessageRole, MessageStatus
from vernis.db.transactions import GroupCommit
from vernis.exceptions import LLMError, VernisError
from vernis.logs import conversation_context
from vernis.metrics import Metrics
from vernis.services import events
from vernis.services.assistant import (
    AnswerEvent,
    LoopSettings,
    TextChunk,
    ToolFinished,
    ToolStarted,
    UsageAdded,
    run_loop,
)
from vernis.services.hub import EventHub
from vernis.services.llm import ChatModel
from vernis.services.persistence import ConversationStore, MessageUpdate
from vernis.services.usage import estimate_tokens
from vernis.tools.runner import ToolRunner

__all__ = ["AnswerService", "AnswerSpec", "RunningAnswer"]

logger = logging.getLogger("vernis.answers")

FLUSH_INTERVAL = 1.0


@dataclass(frozen=True, slots=True)
class AnswerSpec:
    conversation_id: UUID
    messages: list[dict[str, Any]]
    runner: ToolRunner | None
    window: ConversationWindow
    loop: LoopSettings
    message_id: UUID = field(default_factory=uuid4)
    # The first user message of the conversation when this answer completes its first exchange
    # (the title is made from it); None otherwise.
    first_user_message: str | None = None
    # Whose tokens these are (usage and quotas, vernis.services.quotas); None: nobody's.
    member_id: UUID | None = None
    organization_id: UUID | None = None


@dataclass(eq=False)
class RunningAnswer:
    spec: AnswerSpec
    message_id: UUID = field(default_factory=uuid4)
    owner: str = field(default_factory=lambda: uuid4().hex)
    parts: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    task: asyncio.Task[None] | None = None
    _dirty: bool = False

    @property
    def conversation_id(self) -> UUID:
        return self.spec.conversation_id

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def tokens(self) -> tuple[int, int]:
        """(input, output) tokens: the provider's figures, or an estimate when it sent none
        (`vernis.services.usage.estimate_tokens`)."""
        if self.prompt_tokens or self.completion_tokens:
            return self.prompt_tokens, self.completion_tokens
        prompt = (m.get("content") for m in self.spec.messages)
        arguments = (orjson.dumps(call["arguments"]).decode() for call in self.tool_calls)
        return (
            estimate_tokens(text for text in prompt if isinstance(text, str)),
            estimate_tokens([self.text, *arguments]),
        )


# Called once an answer is stored: (conversation id, the stored message's position, final status).
AnswerStored = Callable[[RunningAnswer, str], Awaitable[None]]


class AnswerService:
    def __init__(
        self, *, store: ConversationStore, hub: EventHub, model: ChatModel, metrics: Metrics | None = None
    ) -> None:
        self._store = store
        self._hub = hub
        self._model = model
        self._metrics = metrics or Metrics()
        self._running: dict[UUID, RunningAnswer] = {}
        self._stored_hooks: list[AnswerStored] = []
        self._usage_hooks: list[AnswerStored] = []
        self._flusher: asyncio.Task[None] | None = None
        # The group commit of answer rows: rows waiting to be written, and whether a writer is at work.
        # Final rows of answers ending together share one write (a group commit).
        self._final_rows = GroupCommit[MessageUpdate](store.update_messages)

    def on_stored(self, hook: AnswerStored) -> None:
        self._stored_hooks.append(hook)

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

    def stop(self, conversation_id: UUID) -> bool:
        answer = self._running.get(conversation_id)
        if answer is None or answer.task is None or answer.task.done():
            return False
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
        with conversation_context(conversation_id):
            self._hub.publish(
                conversation_id,
                events.AnswerStarted(conversation_id=conversation_id, message_id=answer.message_id),
            )
            try:
                await run_loop(self._model, spec.messages, spec.runner, spec.loop, self._emitter(answer))
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
            elif isinstance(event, UsageAdded):
                answer.prompt_tokens += event.prompt_tokens
                answer.completion_tokens += event.completion_tokens

        return emit

    async def _flush_periodically(self) -> None:
        """Every `FLUSH_INTERVAL`, write every streaming answer that changed, in one transaction;
        ends when no answer runs (the next answer starts it again)."""
        while self._running:
            await asyncio.sleep(FLUSH_INTERVAL)
            dirty = [answer for answer in self._running.values() if answer._dirty]
            if not dirty:
                continue
            for answer in dirty:
                answer._dirty = False
            try:
                await self._store.update_messages(
                    [self._row(answer, MessageStatus.STREAMING) for answer in dirty]
                )
            except Exception:
                # A failed flush is retried by the next one; the final write reports for real.
                for answer in dirty:
                    answer._dirty = True
                logger.exception("flushing %d partial answers failed", len(dirty))

    @staticmethod
    def _row(answer: RunningAnswer, status: MessageStatus, *, final: bool = False) -> MessageUpdate:
        return MessageUpdate(
            answer.message_id,
            answer.text,
            [dict(call) for call in answer.tool_calls] or None,
            status,
            prompt_tokens=(answer.prompt_tokens or None) if final else None,
            completion_tokens=(answer.completion_tokens or None) if final else None,
        )

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
            await self._final_rows.submit([self._row(answer, status, final=True)])
        except Exception:
            logger.exception("storing the answer failed")
            status, error = MessageStatus.FAILED, error or VernisError()
        answer.spec.window.append(WindowEntry(MessageRole.ASSISTANT, answer.text, tuple(answer.tool_calls)))
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
            ),
        )
        self._running.pop(conversation_id, None)
        await self._hub.release(conversation_id, answer.owner)
        ended = time.monotonic()
        self._record(answer, status, error, ended)
        input_tokens, output_tokens = answer.tokens()
        logger.info(
            "answer %s",
            status.value,
            extra={
                "outcome": status.value,
                "model": answer.spec.loop.model,
                "message_id": str(answer.message_id),
                "duration_ms": round((ended - answer.started_at) * 1000),
                "ttft_ms": round((answer.first_token_at - answer.started_at) * 1000)
                if answer.first_token_at is not None
                else None,
                "tool_calls": len(answer.tool_calls),
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                # Estimated from text (vernis.services.usage) when the provider reported none.
                "tokens_estimated": not (answer.prompt_tokens or answer.completion_tokens),
            },
        )
        for hook in self._stored_hooks:
            try:
                await hook(answer, status)
            except Exception:
                logger.exception("an answer hook failed")

    def _record(
        self, answer: RunningAnswer, status: MessageStatus, error: VernisError | None, ended: float
    ) -> None:
        """The answer's metrics (vernis.metrics), once, at its end."""
        metrics = self._metrics
        metrics.answers_in_flight.dec()
        first = answer.first_token_at
        metrics.answer_ended(
            model=answer.spec.loop.model,
            outcome=status.value,
            duration=ended - answer.started_at,
            time_to_first_chunk=None if first is None else first - answer.started_at,
            input_tokens=answer.prompt_tokens,
            output_tokens=answer.completion_tokens,
            tool_outcomes=[(call["tool_name"], call["status"]) for call in answer.tool_calls],
        )
