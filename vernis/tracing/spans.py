"""The tracer of one app (`Tracing`), the answer's span and its tools' spans, and the W3C trace
context for outgoing HTTP requests.

The answer's trace lives in a context variable of the answer's task, set by `Tracing.answer`: what
runs within the answer (the model calls, the tools, the HTTP requests a tool makes, in tasks the
answer starts too) finds it there, and finds nothing when the answer is not traced. The OpenTelemetry
SDK is kept in this app's own `TracerProvider`, never the global one: several apps in one process
(the tests) each send their own spans.

The spans are sent by the SDK's `BatchSpanProcessor` from a thread of its own, with its exporter's
timeout and retries: a collector that is down or slow costs the answers nothing. The spans of an
export that failed are counted (`on_dropped`: `vernis_trace_spans_dropped_total`); those of a full
queue are dropped by the SDK, which logs it. Its schedule and queue follow `OTEL_BSP_*`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, Protocol
from uuid import UUID

import orjson
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

__all__ = [
    "ENDPOINT_VARIABLES",
    "AnswerTrace",
    "ToolResult",
    "ToolTrace",
    "Tracing",
    "current",
    "inject",
    "tool_span",
    "trace_headers",
]

# Either turns tracing on (the second for traces alone), as the OpenTelemetry specification says.
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
SERVICE_NAME = "vernis"

# The answer being traced, in the answer's task and the tasks it starts.
_answer: ContextVar[_Answer | None] = ContextVar("vernis_trace_answer", default=None)


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


class AnswerTrace(Protocol):
    def ended(
        self, status: str, error: BaseException | None, *, input_tokens: int, output_tokens: int, text: str
    ) -> None:
        """The answer ended with `status` (`complete`, `stopped`, `failed`: `error` says why)."""


class ToolTrace(Protocol):
    def ended(self, outcome: ToolResult) -> None:
        """The tool call ended with `outcome`."""


class _Identified(Protocol):
    @property
    def id(self) -> UUID: ...


class ToolResult(Protocol):
    """What a tool span reads of `vernis.tools.runner.ToolOutcome`."""

    @property
    def status(self) -> str: ...
    @property
    def envelope(self) -> Mapping[str, Any]: ...
    @property
    def confirmation_id(self) -> UUID | None: ...
    @property
    def resolved_call(self) -> str | None: ...
    @property
    def review(self) -> _Identified | None: ...
    @property
    def question(self) -> _Identified | None: ...


class Tracing:
    """One app's tracer: `Tracing.from_environ()` in the lifespan, `shutdown()` on the way out
    (what is still queued is sent). Off when no endpoint is set: `answer()` traces nothing."""

    def __init__(self, provider: TracerProvider | None = None, *, content: bool = False) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("vernis") if provider is not None else None
        self.content = content

    @classmethod
    def from_environ(
        cls, *, content: bool = False, on_dropped: Callable[[int], None] | None = None
    ) -> Tracing:
        """On when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `_TRACES_ENDPOINT`) is set and `OTEL_SDK_DISABLED`
        is not `true`; the exporter and the batch processor read the other `OTEL_*` variables.
        `content`: message text, tool arguments and results go into the spans too. `on_dropped` is
        told how many spans an export that failed lost (from the exporter's thread)."""
        if not any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
            return cls()
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return cls()
        # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES as the SDK reads them; "vernis" unless named.
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "unknown_service")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
        # The exporter (protobuf and its generated code) is imported only when traces are sent.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider = TracerProvider(resource=resource)
        exporter: SpanExporter = OTLPSpanExporter()
        if on_dropped is not None:
            exporter = _Counted(exporter, on_dropped)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider, content=content)

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    def answer(
        self,
        *,
        conversation_id: UUID,
        message_id: UUID,
        model: str,
        org: str | None,
        parent: str | None = None,
    ) -> _AnswerContext:
        """The span `invoke_agent` of one answer, current while the block runs (enter it in the
        answer's own task). Its `ended()` is called before the block ends. `parent`: the W3C
        traceparent of the tool call this answer goes on from (a review decided, a form answered:
        `traceparent()` when it was asked, stored with it), whose trace it joins as a child of that
        call; None: a trace of its own."""
        if self._tracer is None:
            return _NOT_TRACED
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": SERVICE_NAME,
            "gen_ai.conversation.id": str(conversation_id),
            "gen_ai.request.model": model,
            "vernis.message.id": str(message_id),
        }
        if org is not None:
            attributes["vernis.org"] = org
        context = propagate.extract({"traceparent": parent}) if parent else None
        span = self._tracer.start_span(
            "invoke_agent", context=context, kind=SpanKind.INTERNAL, attributes=attributes
        )
        return _Answer(self._tracer, span, content=self.content)

    async def shutdown(self) -> None:
        """Send what is queued (bounded by the exporter's timeout), then stop."""
        if self._provider is not None:
            await asyncio.to_thread(self._provider.shutdown)


class _Counted(SpanExporter):
    """An exporter that tells `on_dropped` how many spans each failed export lost."""

    def __init__(self, exporter: SpanExporter, on_dropped: Callable[[int], None]) -> None:
        self._exporter = exporter
        self._on_dropped = on_dropped

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._exporter.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self._on_dropped(len(spans))
        return result

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)


class _AnswerContext(Protocol):
    def __enter__(self) -> AnswerTrace: ...
    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class _NotTraced:
    """Tracing off, or a tool run outside a traced answer: nothing is recorded."""

    __slots__ = ()

    def __enter__(self) -> _NotTraced:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def ended(self, *args: Any, **kwargs: Any) -> None:
        return None


_NOT_TRACED = _NotTraced()


class _Answer:
    """A traced answer: its span, current in its task while it runs."""

    __slots__ = ("_context", "_previous", "content", "response_model", "span", "tracer")

    def __init__(self, tracer: trace.Tracer, span: Span, *, content: bool) -> None:
        self.tracer = tracer
        self.span = span
        self.content = content
        # The model that answered, as the provider names it (the last model call's).
        self.response_model: str | None = None
        self._context: Token[Context] | None = None
        self._previous: Token[_Answer | None] | None = None

    def __enter__(self) -> _Answer:
        self._context = otel_context.attach(trace.set_span_in_context(self.span))
        self._previous = _answer.set(self)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._previous is not None:
            _answer.reset(self._previous)
        if self._context is not None:
            otel_context.detach(self._context)
        self.span.end()

    def ended(
        self, status: str, error: BaseException | None, *, input_tokens: int, output_tokens: int, text: str
    ) -> None:
        span = self.span
        span.set_attribute("vernis.answer.status", status)
        if input_tokens or output_tokens:
            span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        if self.response_model is not None:
            span.set_attribute("gen_ai.response.model", self.response_model)
        if self.content:
            message = {"role": "assistant", "parts": [{"type": "text", "content": text}]}
            span.set_attribute("gen_ai.output.messages", _json([message]))
        if error is not None:
            # The class only: an error's text may hold what the upstream said.
            span.set_attribute("error.type", type(error).__name__)
            span.set_status(Status(StatusCode.ERROR))


def current() -> _Answer | None:
    """The answer traced in this context, if any."""
    return _answer.get()


def traceparent() -> str | None:
    """The W3C traceparent of the span current here (a tool call's, inside a traced answer), to be
    stored with what an answer that goes on later starts from (`Tracing.answer(parent=...)`); None
    when no answer is traced here."""
    if _answer.get() is None:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent")


def tool_span(name: str, call_id: str, arguments: Any) -> _ToolContext:
    """The span `execute_tool <name>` of one tool call of the traced answer, current while the block
    runs (its HTTP requests carry it: `inject`); nothing when no answer is traced here."""
    answer = _answer.get()
    if answer is None:
        return _NOT_TRACED
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
    }
    if answer.content:
        attributes["gen_ai.tool.call.arguments"] = _json(arguments)
    span = answer.tracer.start_span(f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes)
    return _Tool(span, content=answer.content)


class _ToolContext(Protocol):
    def __enter__(self) -> ToolTrace: ...
    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


# What a tool's outcome status tells of an approval, a review or a question: the span's event.
_STATUS_EVENTS = {
    "needs_confirmation": "vernis.approval.requested",
    "review_requested": "vernis.review.requested",
    "needs_answer": "vernis.question.asked",
}


class _Tool:
    __slots__ = ("_context", "content", "span")

    def __init__(self, span: Span, *, content: bool) -> None:
        self.span = span
        self.content = content
        self._context: Token[Context] | None = None

    def __enter__(self) -> _Tool:
        self._context = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._context is not None:
            otel_context.detach(self._context)
        if exc is not None:
            self.span.set_attribute("error.type", type(exc).__name__)
            if not isinstance(exc, asyncio.CancelledError):
                self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()

    def ended(self, outcome: ToolResult) -> None:
        span = self.span
        span.set_attribute("vernis.tool.status", outcome.status)
        if outcome.resolved_call is not None:
            # The model repeated a previewed write after the user approved it in the chat.
            span.add_event(
                "vernis.approval.resolved",
                {"vernis.approval.outcome": "approved", "vernis.approval.via": "chat"},
            )
        event = _STATUS_EVENTS.get(outcome.status)
        if event == "vernis.approval.requested" and outcome.confirmation_id is not None:
            span.add_event(event, {"vernis.approval.id": str(outcome.confirmation_id)})
        elif event == "vernis.review.requested" and outcome.review is not None:
            span.add_event(event, {"vernis.review.id": str(outcome.review.id)})
        elif event == "vernis.question.asked" and outcome.question is not None:
            span.add_event(event, {"vernis.question.id": str(outcome.question.id)})
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", _json(outcome.envelope))
        if outcome.status == "error":
            error = outcome.envelope.get("error")
            code = error.get("code") if isinstance(error, Mapping) else None
            span.set_attribute("error.type", str(code or "tool_error"))
            span.set_status(Status(StatusCode.ERROR))


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the W3C `traceparent` (and `tracestate`) of the current span to an outgoing request's
    headers, when an answer is traced here (a tool's span is then the current one)."""
    if _answer.get() is not None:
        propagate.inject(headers)


def trace_headers() -> dict[str, str]:
    """The headers a toolkit adds to its HTTP requests so that the service it calls joins the
    answer's trace: `traceparent` (and `tracestate`), or none when the answer is not traced."""
    headers: dict[str, str] = {}
    inject(headers)
    return headers
