"""The span `chat <model>` of each model call of a traced answer (SPEC §22, `vernis.tracing`): a
`ChatModel` wrapped around the answer's model (`traced_model`), only while an answer is traced.

A streamed delta passes through with one type check and no span work; the call's usage, finish
reason and response model are read from the events that end the stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
from opentelemetry.trace import SpanKind, Status, StatusCode

from vernis.model.base import ChatModel, ChatRequest, Finish, ModelEvent, TextDelta, ToolCall, Usage
from vernis.tracing.spans import current

__all__ = ["traced_model"]


def traced_model(model: ChatModel) -> ChatModel:
    """`model`, each of its calls a span `chat <model>` under the answer traced here; `model` itself
    when no answer is traced (call it in the answer's task)."""
    answer = current()
    if answer is None:
        return model
    return _TracedModel(model)


class _TracedModel:
    __slots__ = ("_model",)

    def __init__(self, model: ChatModel) -> None:
        self._model = model

    async def aclose(self) -> None:
        """The model is the app's, closed by it."""

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        answer = current()
        if answer is None:
            async for event in self._model.stream(request):
                yield event
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": request.model,
        }
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        content = answer.content
        if content:
            attributes["gen_ai.input.messages"] = orjson.dumps(list(request.messages), default=str).decode()
        span = answer.tracer.start_span(f"chat {request.model}", kind=SpanKind.CLIENT, attributes=attributes)
        texts: list[str] = []
        calls: list[ToolCall] = []
        try:
            async for event in self._model.stream(request):
                if type(event) is TextDelta:
                    if content:
                        texts.append(event.content)
                elif type(event) is ToolCall:
                    calls.append(event)
                elif type(event) is Usage:
                    span.set_attribute("gen_ai.usage.input_tokens", event.prompt_tokens)
                    span.set_attribute("gen_ai.usage.output_tokens", event.completion_tokens)
                elif type(event) is Finish:
                    span.set_attribute("gen_ai.response.finish_reasons", [event.reason])
                    if event.model:
                        span.set_attribute("gen_ai.response.model", event.model)
                        answer.response_model = event.model
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR))
            raise
        finally:
            if calls:
                span.set_attribute("vernis.tool_calls", [call.name for call in calls])
            if content:
                parts: list[dict[str, Any]] = [{"type": "text", "content": "".join(texts)}] if texts else []
                parts += [
                    {"type": "tool_call", "id": call.call_id, "name": call.name, "arguments": call.arguments}
                    for call in calls
                ]
                span.set_attribute(
                    "gen_ai.output.messages", orjson.dumps([{"role": "assistant", "parts": parts}]).decode()
                )
            span.end()
