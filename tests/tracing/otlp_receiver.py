"""A real OTLP/HTTP trace receiver for the tests: an ASGI app served by uvicorn on a free loopback
port, taking `POST /v1/traces` as a collector does and decoding each body with the OpenTelemetry
protobuf definitions (`ExportTraceServiceRequest`).

    async with otlp_receiver() as collector:   # collector.endpoint: http://127.0.0.1:PORT
        ...
        spans = await collector.until(lambda spans: any(s.name == "invoke_agent" for s in spans))
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.utils import run_server

__all__ = ["Collector", "ReceivedSpan", "otlp_receiver"]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int
    start: int  # unix nanoseconds
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int  # 0 unset, 1 ok, 2 error
    resource: dict[str, Any]


@dataclass
class Collector:
    port: int = 0
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def until(
        self, enough: Callable[[list[ReceivedSpan]], bool], timeout: float = 15.0
    ) -> list[ReceivedSpan]:
        """The spans received so far, once `enough` says they are."""
        async with asyncio.timeout(timeout):
            while not enough(self.spans):
                self._arrived.clear()
                await self._arrived.wait()
        return list(self.spans)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {key.decode().lower(): value.decode() for key, value in scope["headers"]}
        if scope["method"] != "POST" or scope["path"] != "/v1/traces":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        assert headers.get("content-type") == "application/x-protobuf", headers
        if headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            start=span.start_time_unix_nano,
                            attributes=_attributes(span.attributes),
                            events=[(event.name, _attributes(event.attributes)) for event in span.events],
                            status_code=span.status.code,
                            resource=resource,
                        )
                    )
        self.requests += 1
        self._arrived.set()
        answer = ExportTraceServiceResponse().SerializeToString()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/x-protobuf")],
            }
        )
        await send({"type": "http.response.body", "body": answer})


@asynccontextmanager
async def otlp_receiver() -> AsyncIterator[Collector]:
    """A collector on a free loopback port."""
    app = Collector()
    async with run_server(app, lifespan="off", timeout_graceful_shutdown=1) as server:
        app.port = server.config.port
        yield app
