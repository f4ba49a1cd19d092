"""The assistant loop: ask the model, run the tools it calls, feed the results back, repeat.

`run_loop()` knows nothing of sockets or storage: it emits internal `AnswerEvent`s to a callback and
returns when the model has written its answer. Up to `max_tool_rounds` rounds may call tools; then
one last round without tools forces a written answer (SPEC §4 step 7).

Upstream faults are retried while no text has been emitted yet (tool rounds before it do not count:
a retried request repeats nothing the user saw); once the user has seen part of the answer's text,
the fault propagates (the caller stores the partial answer as failed).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from vernis.exceptions import LLMStalled, LLMUnavailable
from vernis.services.llm import ChatModel, ChatRequest, Finish, TextDelta, ToolCall, Usage
from vernis.tools.runner import ToolOutcome, ToolRunner

__all__ = [
    "AnswerEvent",
    "LoopSettings",
    "TextChunk",
    "ToolFinished",
    "ToolStarted",
    "UsageAdded",
    "run_loop",
]

logger = logging.getLogger("vernis.assistant")


@dataclass(frozen=True, slots=True)
class TextChunk:
    content: str


@dataclass(frozen=True, slots=True)
class ToolStarted:
    call_id: str
    tool_name: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class ToolFinished:
    outcome: ToolOutcome


@dataclass(frozen=True, slots=True)
class UsageAdded:
    prompt_tokens: int
    completion_tokens: int


AnswerEvent = TextChunk | ToolStarted | ToolFinished | UsageAdded


@dataclass(frozen=True, slots=True)
class LoopSettings:
    model: str
    max_tool_rounds: int = 8
    # Attempts after the first, before any text was emitted.
    retries: int = 2
    retry_base_delay: float = 0.5
    retry_max_delay: float = 8.0
    max_tokens: int | None = None


async def run_loop(
    model: ChatModel,
    messages: Sequence[dict[str, Any]],
    runner: ToolRunner | None,
    settings: LoopSettings,
    emit: Callable[[AnswerEvent], None],
) -> str:
    """Run one answer; returns the last finish reason. `messages` starts with the system prompt."""
    history = list(messages)
    tools = runner.toolset.definitions() if runner is not None else []
    tools_json = runner.toolset.definitions_json() if runner is not None and tools else None
    emitted = False
    last_text = ""
    finish = "stop"
    for round_number in range(settings.max_tool_rounds + 1):
        final = not tools or round_number == settings.max_tool_rounds
        request = ChatRequest(
            model=settings.model,
            messages=history,
            tools=() if final else tools,
            tools_json=None if final else tools_json,
            max_tokens=settings.max_tokens,
        )
        attempt = 0
        while True:
            texts: list[str] = []
            calls: list[ToolCall] = []
            try:
                async for event in model.stream(request):
                    if isinstance(event, TextDelta):
                        if not texts and last_text and not last_text.endswith("\n"):
                            # Text after a tool round starts a new paragraph, not the same line.
                            emit(TextChunk("\n\n"))
                        emitted = True
                        texts.append(event.content)
                        last_text = event.content
                        emit(TextChunk(event.content))
                    elif isinstance(event, ToolCall):
                        calls.append(event)
                    elif isinstance(event, Usage):
                        emit(UsageAdded(event.prompt_tokens, event.completion_tokens))
                    elif isinstance(event, Finish):
                        finish = event.reason
                break
            except LLMUnavailable as exc:
                # A stalled stream has already used up the time the user is willing to wait.
                if emitted or not exc.retryable or isinstance(exc, LLMStalled) or attempt >= settings.retries:
                    raise
                attempt += 1
                delay = _backoff(attempt, exc.retry_after, settings)
                logger.warning("model request failed (%s), retry %d in %.1fs", exc.detail, attempt, delay)
                await asyncio.sleep(delay)
        if not calls or runner is None:
            return finish
        if final:
            # The model was offered no tools and called some anyway; its text is the answer.
            logger.warning("model called tools in the tool-less final round; ignored")
            return finish
        # Not `emitted`: a retry of the next round repeats no text, and the tools that ran are already
        # in `history`, so a fault before its first token is still retried (SPEC §9).
        history.append(
            {
                "role": "assistant",
                "content": "".join(texts) or None,
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in calls
                ],
            }
        )
        outcomes = await runner.run_round(
            calls,
            lambda call, arguments: emit(ToolStarted(call.call_id, call.name, arguments)),
            lambda outcome: emit(ToolFinished(outcome)),
        )
        history.extend(
            {"role": "tool", "tool_call_id": o.call_id, "content": orjson.dumps(o.envelope).decode()}
            for o in outcomes
        )
    return finish


def _backoff(attempt: int, retry_after: float | None, settings: LoopSettings) -> float:
    if retry_after is not None:
        return min(retry_after, settings.retry_max_delay)
    delay: float = settings.retry_base_delay * 2 ** (attempt - 1)
    return min(delay, settings.retry_max_delay) * random.uniform(0.8, 1.2)
