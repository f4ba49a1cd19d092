"""Answers that belong to the conversation, not to the socket that asked.

`AnswerService.start()` runs an answer as a task of the app: the socket that sent the message may
close, the answer still runs to its end and is stored. Its events go through the hub to every socket
that shows the conversation. This module is the one translator from the loop's internal events to
wire frames.

Storage, per answer: the assistant message is inserted (status `streaming`) by the first flush,
updated at most once a second while the answer streams (never per delta), and written once more
with its final status (`complete`, `stopped` or `failed`), text, tool calls and token counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID, uuid4

from vernis.context.window import ConversationWindow, WindowEntry
from vernis.db.models import MessageRole, MessageStatus
from vernis.exceptions import LLMError, VernisError
from vernis.logs import conversation_context
from vernis.services.assistant import (
    AnswerEvent,
    LoopSettings,
    TextChunk,
    ToolFinished,
    ToolStarted,
    UsageAdded,
    run_loop,
)
from vernis.services.hub import EventHub, publish_event
from vernis.services.llm import ChatModel
from vernis.services.persistence import ConversationStore
from vernis.services.registry import ToolRunner
from vernis.ws import protocol

__all__ = ["AnswerService", "AnswerSpec", "RunningAnswer"]

logger = logging.getLogger("vernis.answers")

FLUSH_INTERVAL = 1.0


@dataclass(frozen=True, slots=True)
class AnswerSpec:
    conversation_id: UUID
    member_id: UUID
    messages: list[dict[str, Any]]
    runner: ToolRunner | None
    window: ConversationWindow
    loop: LoopSettings
    message_id: UUID = field(default_factory=uuid4)
    # The first user message of the conversation when this answer completes its first exchange
    # (the title is made from it); None otherwise.
    first_user_message: str | None = None


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
    _inserted: bool = False
    _dirty: bool = False
    _done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def conversation_id(self) -> UUID:
        return self.spec.conversation_id

    @property
    def text(self) -> str:
        return "".join(self.parts)


# Called once an answer is stored: (conversation id, the stored message's position, final status).
AnswerStored = Callable[[RunningAnswer, str], Awaitable[None]]


class AnswerService:
    def __init__(self, *, store: ConversationStore, hub: EventHub, model: ChatModel) -> None:
        self._store = store
        self._hub = hub
        self._model = model
        self._running: dict[UUID, RunningAnswer] = {}
        self._stored_hooks: list[AnswerStored] = []

    def on_stored(self, hook: AnswerStored) -> None:
        self._stored_hooks.append(hook)

    def running(self, conversation_id: UUID) -> RunningAnswer | None:
        return self._running.get(conversation_id)

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def start(self, spec: AnswerSpec, owner: str) -> RunningAnswer:
        """Run an answer; the caller already holds the conversation's lease as `owner`."""
        answer = RunningAnswer(spec, message_id=spec.message_id, owner=owner)
        self._running[spec.conversation_id] = answer
        answer.task = asyncio.create_task(self._run(answer), name=f"answer {spec.conversation_id}")
        return answer

    def stop(self, conversation_id: UUID) -> bool:
        answer = self._running.get(conversation_id)
        if answer is None or answer.task is None or answer.task.done():
            return False
        answer.task.cancel()
        return True

    async def shutdown(self, grace: float) -> None:
        """Let answers finish for `grace` seconds, then stop the rest (their partial text is stored)."""
        tasks = [a.task for a in self._running.values() if a.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # --- the run ------------------------------------------------------------------------------

    async def _run(self, answer: RunningAnswer) -> None:
        spec = answer.spec
        conversation_id = spec.conversation_id
        status = MessageStatus.COMPLETE
        error: VernisError | None = None
        with conversation_context(conversation_id):
            self._publish(
                conversation_id,
                protocol.AssistantStart(conversation_id=conversation_id, message_id=answer.message_id),
            )
            flusher = asyncio.create_task(self._flush_periodically(answer))
            try:
                await run_loop(self._model, spec.messages, spec.runner, spec.loop, self._emitter(answer))
            except asyncio.CancelledError:
                status = MessageStatus.STOPPED
                raise
            except LLMError as exc:
                status, error = MessageStatus.FAILED, exc
                logger.warning("answer failed: %s %s", type(exc).__name__, getattr(exc, "detail", ""))
            except Exception:
                status, error = MessageStatus.FAILED, VernisError()
                logger.exception("answer failed")
            finally:
                # Shielded: a second cancellation (shutdown) must not lose what was written.
                await asyncio.shield(self._finish(answer, flusher, status, error))

    def _emitter(self, answer: RunningAnswer) -> Callable[[AnswerEvent], None]:
        hub, conversation_id = self._hub, answer.spec.conversation_id
        parts = answer.parts
        encode_text = protocol.encode_text_delta

        def emit(event: AnswerEvent) -> None:
            if type(event) is TextChunk:
                # The hot path: no model objects, no storage, one small orjson encode.
                parts.append(event.content)
                answer._dirty = True
                if answer.first_token_at is None:
                    answer.first_token_at = time.monotonic()
                content = event.content
                hub.publish(
                    conversation_id, lambda seq: encode_text(content, seq), "text_delta", text=content
                )
            elif isinstance(event, ToolStarted):
                answer.tool_calls.append(
                    {
                        "call_id": event.call_id,
                        "tool_name": event.tool_name,
                        "arguments": event.arguments,
                        "status": "running",
                        "result": None,
                    }
                )
                answer._dirty = True
                self._publish(
                    conversation_id,
                    protocol.ToolCallStarted(
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
                    self._publish(
                        conversation_id,
                        protocol.ToolCallCompleted(
                            call_id=call_id,
                            tool_name=outcome.tool_name,
                            status=outcome.status,
                            result=outcome.envelope,
                        ),
                    )
                if outcome.confirmation_id is not None:
                    self._publish(
                        conversation_id,
                        protocol.ConfirmationRequired(
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

    def _publish(self, conversation_id: UUID, event: protocol.Event) -> None:
        publish_event(self._hub, conversation_id, event)

    async def _flush_periodically(self, answer: RunningAnswer) -> None:
        while not answer._done.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_INTERVAL):
                    await answer._done.wait()
            if answer._dirty and not answer._done.is_set():
                try:
                    await self._write(answer, MessageStatus.STREAMING)
                except Exception:
                    # A failed flush is retried by the next one; the final write reports for real.
                    logger.exception("flushing a partial answer failed")

    async def _write(self, answer: RunningAnswer, status: MessageStatus, **extra: Any) -> None:
        answer._dirty = False
        content = answer.text
        calls = [dict(call) for call in answer.tool_calls] or None
        if not answer._inserted:
            await self._store.add_message(
                answer.spec.conversation_id,
                MessageRole.ASSISTANT,
                content,
                message_id=answer.message_id,
                status=status,
                tool_calls=calls,
                model=answer.spec.loop.model,
            )
            answer._inserted = True
            if extra:
                await self._store.update_message(answer.message_id, **extra)
        else:
            await self._store.update_message(
                answer.message_id, content=content, tool_calls=calls, status=status, **extra
            )

    async def _finish(
        self,
        answer: RunningAnswer,
        flusher: asyncio.Task[None],
        status: MessageStatus,
        error: VernisError | None,
    ) -> None:
        conversation_id = answer.spec.conversation_id
        answer._done.set()
        await asyncio.gather(flusher, return_exceptions=True)
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
            await self._write(
                answer,
                status,
                prompt_tokens=answer.prompt_tokens or None,
                completion_tokens=answer.completion_tokens or None,
            )
        except Exception:
            logger.exception("storing the answer failed")
            status, error = MessageStatus.FAILED, error or VernisError()
        answer.spec.window.append(WindowEntry(MessageRole.ASSISTANT, answer.text, tuple(answer.tool_calls)))
        if error is not None:
            self._publish(conversation_id, protocol.ErrorEvent(code=error.code, message=error.public_message))
        self._publish(
            conversation_id,
            protocol.AssistantEnd(
                conversation_id=conversation_id,
                message_id=answer.message_id,
                stopped=status == MessageStatus.STOPPED,
            ),
        )
        self._running.pop(conversation_id, None)
        await self._hub.release(conversation_id, answer.owner)
        ended = time.monotonic()
        logger.info(
            "answer %s",
            status.value,
            extra={
                "message_id": str(answer.message_id),
                "duration_ms": round((ended - answer.started_at) * 1000),
                "ttft_ms": round((answer.first_token_at - answer.started_at) * 1000)
                if answer.first_token_at is not None
                else None,
                "tool_calls": len(answer.tool_calls),
                "prompt_tokens": answer.prompt_tokens,
                "completion_tokens": answer.completion_tokens,
            },
        )
        for hook in self._stored_hooks:
            try:
                await hook(answer, status)
            except Exception:
                logger.exception("an answer hook failed")
