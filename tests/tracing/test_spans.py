"""vernis.tracing.spans without a server: when tracing is on, and that off it wraps nothing (the
answer's model is the app's own object, so a streamed delta runs exactly the code it ran before)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from tests.tracing.otlp_receiver import Collector, otlp_receiver
from vernis.model.openai import OpenAIChatModel
from vernis.model.traced import traced_model
from vernis.tracing.spans import ENDPOINT_VARIABLES, Tracing, tool_span, trace_headers


@pytest.fixture
async def model() -> AsyncIterator[OpenAIChatModel]:
    chat = OpenAIChatModel(base_url="http://127.0.0.1:9/v1", api_key=None, stall_timeout=1)
    yield chat
    await chat.aclose()


@pytest.fixture(autouse=True)
def _no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*ENDPOINT_VARIABLES, "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)


async def test_without_an_endpoint_nothing_is_wrapped_or_propagated(model: OpenAIChatModel) -> None:
    """With no OTEL_EXPORTER_OTLP_ENDPOINT an answer's model is the app's own object, a tool call opens no span and a request gets no traceparent."""
    tracing = Tracing.from_environ(content=True)
    assert not tracing.enabled
    with tracing.answer(conversation_id=uuid.uuid4(), message_id=uuid.uuid4(), model="m", org=None):
        assert traced_model(model) is model
        assert trace_headers() == {}
        with tool_span("find_contacts", "call_1", {"q": "x"}):
            assert trace_headers() == {}
    await tracing.shutdown()


@pytest.mark.parametrize("variable", ENDPOINT_VARIABLES)
async def test_an_endpoint_turns_tracing_on_unless_the_sdk_is_disabled(
    model: OpenAIChatModel, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """Either endpoint variable turns tracing on (the model is wrapped and requests carry a traceparent within an answer, not outside one); OTEL_SDK_DISABLED=true keeps it off."""
    async with otlp_receiver() as collector:
        monkeypatch.setenv(variable, collector.endpoint)
        tracing = Tracing.from_environ()
        assert tracing.enabled
        assert trace_headers() == {}
        assert traced_model(model) is model
        with tracing.answer(conversation_id=uuid.uuid4(), message_id=uuid.uuid4(), model="m", org=None):
            assert traced_model(model) is not model
            assert trace_headers()["traceparent"].startswith("00-")
        await tracing.shutdown()
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        assert not Tracing.from_environ().enabled


async def service_name(collector: Collector) -> str:
    """The service.name of a span sent by a `Tracing` made now (its stop waits for the collector's 200)."""
    tracing = Tracing.from_environ()
    with tracing.answer(conversation_id=uuid.uuid4(), message_id=uuid.uuid4(), model="m", org=None):
        pass
    await tracing.shutdown()
    name: str = collector.spans[-1].resource["service.name"]
    return name


async def test_the_service_is_named_vernis_unless_the_environment_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spans' resource says service.name=vernis, or what OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME say."""
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    async with otlp_receiver() as collector:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
        assert await service_name(collector) == "vernis"
        assert collector.spans[-1].resource["deployment.environment"] == "test"
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=crm-assistant")
        assert await service_name(collector) == "crm-assistant"
        monkeypatch.setenv("OTEL_SERVICE_NAME", "helpdesk-assistant")
        assert await service_name(collector) == "helpdesk-assistant"
