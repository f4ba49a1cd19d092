"""The chat-model seam: what the assistant loop needs from a language model, and nothing more.

Only the OpenAI-compatible adapter (`vernis.model.openai`) imports `openai`; the loop sees
a `ChatModel` that streams `ModelEvent`s for a `ChatRequest`.

Contract of `ChatModel.stream()`:
- yields `TextDelta`s as text arrives (never empty, never repeated), `ReasoningDelta`s for reasoning
  text some providers send (the loop does not show them as the answer), then, once the stream has
  ended, every assembled `ToolCall` (deduplicated: a provider that repeats a chunk yields one call),
  at most one `Usage`, and exactly one `Finish` as the last event;
- raises `LLMNotConfigured` when the endpoint cannot be reached at all (connection refused, DNS),
  `LLMUnavailable` for an upstream fault (HTTP 429/5xx after the client's own retries, an error
  object mid-stream, a cut connection), `LLMStalled` when no chunk arrives within the stall timeout,
  `LLMTruncated` when the stream ends without a `finish_reason`;
- is cancelled by the caller to stop: cancelling the iteration closes the upstream request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeVar

__all__ = [
    "ChatModel",
    "ChatRequest",
    "Finish",
    "ModelEvent",
    "ModelRoute",
    "ReasoningDelta",
    "TextDelta",
    "ToolCall",
    "Usage",
    "first_reply",
]

# OpenAI chat-completions message dicts ({"role": ..., "content": ..., "tool_calls": ...}).
Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: Sequence[Message]
    # OpenAI tool definitions ({"type": "function", "function": {name, description, parameters}}).
    tools: Sequence[dict[str, Any]] = ()
    # The same definitions as a JSON array, when the caller has them encoded already (an adapter that
    # sends JSON uses them instead of encoding `tools` again).
    tools_json: bytes | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    # Free-form tag the adapter forwards as the request's `user` field (for provider abuse tracking).
    user: str | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    content: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    content: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    # The raw JSON text the model produced; the loop parses and validates it.
    arguments: str


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    # Of `prompt_tokens`, those the provider read from its prompt cache
    # (`usage.prompt_tokens_details.cached_tokens`); 0 when it does not say.
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Finish:
    # "stop", "tool_calls", "length", "content_filter", ... as the provider said.
    reason: str
    # The model that answered, as the provider names it (a trace's `gen_ai.response.model`); None: unsaid.
    # Not compared: two finishes are equal by their reason.
    model: str | None = field(default=None, compare=False)


ModelEvent = TextDelta | ReasoningDelta | ToolCall | Usage | Finish


class ChatModel(Protocol):
    def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        """Stream one completion; see the module docstring for the contract."""
        ...

    async def aclose(self) -> None:
        """Release connections; called once from the app's lifespan."""
        ...


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """One model to ask: the client of its endpoint and the model name to request there (the chat
    model, or one of `[[model.fallbacks]]`)."""

    client: ChatModel
    model: str


@dataclass(slots=True)
class CollectedReply:
    """A whole reply gathered from a stream, for callers that do not stream (titles)."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: Literal["stop", "tool_calls", "length"] | str = "stop"


async def collect(model: ChatModel, request: ChatRequest) -> CollectedReply:
    reply = CollectedReply()
    parts: list[str] = []
    async for event in model.stream(request):
        if isinstance(event, TextDelta):
            parts.append(event.content)
        elif isinstance(event, ToolCall):
            reply.tool_calls.append(event)
        elif isinstance(event, Usage):
            reply.usage = event
        elif isinstance(event, Finish):
            reply.finish_reason = event.reason
    reply.text = "".join(parts)
    return reply


T = TypeVar("T")

logger = logging.getLogger("vernis.model")


async def first_reply(
    routes: Sequence[ModelRoute],
    request: ChatRequest,
    *,
    seconds_each: float,
    clean: Callable[[str], T | None],
    what: str,
) -> tuple[T, str] | None:
    """The first usable reply to `request` (a short one: a title, a summary) and the model that
    wrote it: each of `routes` in turn (the model, then its fallbacks), for `seconds_each` seconds;
    a reply is usable when `clean` makes something of its text. A route that fails, is slow or
    replies nothing usable is logged (`what` names the request) and the next is asked; None when
    none gave one."""
    for route in routes:
        try:
            async with asyncio.timeout(seconds_each):
                reply = await collect(route.client, replace(request, model=route.model))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("%s by %s failed (%s)", what, route.model, type(exc).__name__)
            continue
        cleaned = clean(reply.text)
        if cleaned is None:
            logger.warning("%s by %s was not usable", what, route.model)
            continue
        return cleaned, route.model
    return None
