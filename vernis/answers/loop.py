"""The assistant loop: ask the model, run the tools it calls, feed the results back, repeat.

`run_loop()` knows nothing of sockets or storage: it emits internal `AnswerEvent`s to a callback and
returns when the model has written its answer. Up to `max_tool_rounds` rounds may call tools; then
one last round without tools forces a written answer (SPEC §4 step 7). A round in which the model
asked the user questions (`ask_user`) is the answer's last: it waits for the user's form.

The model's reasoning (`ReasoningChunk`) goes to the user apart from the text, and never back into
`history`. Upstream faults are retried while no text or reasoning has been emitted yet (tool rounds
before it do not count: a retried request repeats nothing the user saw); once the user has seen
part of the answer, the fault propagates (the caller stores the partial answer as failed).

Fallbacks (SPEC §19, `[[model.fallbacks]]`): a model that fails before the answer's first token
(connection refused, HTTP 5xx or 429, a stall) once its retries are spent hands the answer to the
next one (`ModelSwitched`), which answers the rest of it, tool rounds included. After the first
token there is no switch. When every model failed, the answer fails with one `LLMUnavailable`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from vernis.conversation.window import for_model, within_budget
from vernis.exceptions import LLMError, LLMNotConfigured, LLMStalled, LLMUnavailable
from vernis.model.base import (
    ChatModel,
    ChatRequest,
    Finish,
    ModelRoute,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    Usage,
)
from vernis.tools.runner import ToolOutcome, ToolRunner

__all__ = [
    "AnswerEvent",
    "LoopSettings",
    "ModelSwitched",
    "ReasoningChunk",
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
class ReasoningChunk:
    """Reasoning the model streams (SPEC §19): shown to the user apart from the answer's text."""

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
    # Of `prompt_tokens`, read from the provider's prompt cache.
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ModelSwitched:
    """The model before failed before the answer's first token: `model` (a fallback) answers now."""

    model: str


AnswerEvent = TextChunk | ReasoningChunk | ToolStarted | ToolFinished | UsageAdded | ModelSwitched


@dataclass(frozen=True, slots=True)
class LoopSettings:
    model: str
    max_tool_rounds: int = 8
    # Attempts after the first, before any text was emitted.
    retries: int = 2
    retry_base_delay: float = 0.5
    retry_max_delay: float = 8.0
    max_tokens: int | None = None
    # The tokens the conversation may take in a request beside the system message
    # (VERNIS_CONTEXT_BUDGET_TOKENS): tool results that pass it are sent cut, with a note (SPEC §19).
    budget: int | None = None


async def run_loop(
    model: ChatModel,
    messages: Sequence[dict[str, Any]],
    runner: ToolRunner | None,
    settings: LoopSettings,
    emit: Callable[[AnswerEvent], None],
    *,
    fallbacks: Sequence[ModelRoute] = (),
    history_tokens: int | None = None,
) -> str:
    """Run one answer; returns the last finish reason. `messages` starts with the system prompt.
    `model` is asked for `settings.model`; `fallbacks` are the models to try, in order, when it fails
    before the first token. `history_tokens`: the tokens of what follows the system message, when
    the caller knows them (the conversation window's estimate): the budget is then checked from it
    and the new tool results' size, and the history is only counted again near the budget."""
    routes = [ModelRoute(model, settings.model), *fallbacks]
    current = 0
    history = list(messages)
    # An upper bound of the tokens after the system message (a token is at least a byte); None:
    # unknown, counted when needed.
    bound = history_tokens
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
            route = routes[current]
            try:
                async for event in route.client.stream(
                    request if route.model == request.model else replace(request, model=route.model)
                ):
                    if isinstance(event, TextDelta):
                        if not texts and last_text and not last_text.endswith("\n"):
                            # Text after a tool round starts a new paragraph, not the same line.
                            emit(TextChunk("\n\n"))
                        emitted = True
                        texts.append(event.content)
                        last_text = event.content
                        emit(TextChunk(event.content))
                    elif type(event) is ReasoningDelta:
                        # Shown to the user as it comes: a retry or another model would show it twice.
                        emitted = True
                        emit(ReasoningChunk(event.content))
                    elif isinstance(event, ToolCall):
                        calls.append(event)
                    elif isinstance(event, Usage):
                        emit(UsageAdded(event.prompt_tokens, event.completion_tokens, event.cached_tokens))
                    elif isinstance(event, Finish):
                        finish = event.reason
                break
            except (LLMUnavailable, LLMNotConfigured) as exc:
                if emitted:
                    raise
                # A stalled stream has already used up the time the user is willing to wait.
                if (
                    isinstance(exc, LLMUnavailable)
                    and exc.retryable
                    and not isinstance(exc, LLMStalled)
                    and attempt < settings.retries
                ):
                    attempt += 1
                    delay = _backoff(attempt, exc.retry_after, settings)
                    logger.warning("model request failed (%s), retry %d in %.1fs", exc.detail, attempt, delay)
                    await asyncio.sleep(delay)
                    continue
                if not _switchable(exc) or current + 1 >= len(routes):
                    if current == 0:
                        raise
                    raise LLMUnavailable(
                        "No configured model could answer (the chat model and its [[model.fallbacks]]).",
                        detail=f"{route.model}: {type(exc).__name__}: {getattr(exc, 'detail', '')}"[:300],
                    ) from exc
                current, attempt = current + 1, 0
                logger.warning(
                    "model %s failed before its first token (%s: %s); %s answers instead",
                    route.model,
                    type(exc).__name__,
                    getattr(exc, "detail", ""),
                    routes[current].model,
                )
                emit(ModelSwitched(routes[current].model))
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
        results = [
            {
                "role": "tool",
                "tool_call_id": o.call_id,
                "content": orjson.dumps(for_model(o.envelope)).decode(),
            }
            for o in outcomes
        ]
        history.extend(results)
        if settings.budget is not None:
            if bound is not None:
                bound += len(orjson.dumps(history[-len(results) - 1 :]))
            if bound is None or bound > settings.budget:
                history = _within(history, settings.budget)
                bound = None
        if any(outcome.question is not None for outcome in outcomes):
            # The model asked the user (`ask_user`, SPEC §17): the answer ends here, and the
            # user's answers come back as that call's result in a new answer.
            return finish
    return finish


def _within(history: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """`history` with what follows its system message cut to `budget` tokens (`within_budget`),
    when it may pass it (a token is at least a byte, a character at most four bytes: fewer than a
    quarter of the budget in characters cannot)."""
    chars = sum(len(m["content"]) for m in history[1:] if isinstance(m.get("content"), str))
    if chars * 4 <= budget:
        return history
    return [history[0], *within_budget(history[1:], budget)]


def _switchable(error: LLMError) -> bool:
    """Whether the next model may take over after `error`: the endpoint is unreachable, overloaded,
    rate-limited or silent (SPEC §19), not a request it refused (401, 404, 400: the next model gets
    the same answer, and the operator must see it)."""
    if isinstance(error, LLMNotConfigured):
        return True
    return isinstance(error, LLMUnavailable) and (error.retryable or isinstance(error, LLMStalled))


def _backoff(attempt: int, retry_after: float | None, settings: LoopSettings) -> float:
    if retry_after is not None:
        return min(retry_after, settings.retry_max_delay)
    delay: float = settings.retry_base_delay * 2 ** (attempt - 1)
    return min(delay, settings.retry_max_delay) * random.uniform(0.8, 1.2)
