"""Traces (SPEC §22) end to end: a real Vernis sends one answer's spans over OTLP/HTTP to a real
receiver on loopback, which decodes them with the OpenTelemetry protobuf definitions; an MCP server
the answer calls receives the tool span's `traceparent`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.types import Receive, Scope, Send

from tests.data import add_notification
from tests.e2e.test_approvals import mark_read, preview
from tests.e2e.test_mcp import MEMBER, SERVICE_KEY, after_tool, chat_about, config_text, product_vernis
from tests.e2e.test_questions import QUESTIONS
from tests.e2e.test_reviews import a_contact, sms
from tests.fixtures.server import VernisFactory, text_of
from tests.helpdesk import test_e2e as helpdesk
from tests.helpdesk.support import RsaKey
from tests.ops.helpers import sample, scrape
from tests.ops.test_webhooks import until
from tests.tools.test_mcp_support import Desk
from tests.tracing.otlp_receiver import Collector, ReceivedSpan, otlp_receiver
from tests.utils import free_port, run_server
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Reply, ScriptedToolCall
from vernis_helpdesk.api import create_api

# The attributes that carry text or arguments: none of them without VERNIS_TRACE_CONTENT=1.
CONTENT = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}
SPAN_KIND_CLIENT = 3
STATUS_ERROR = 2


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.delenv("VERNIS_TRACE_CONTENT", raising=False)
    # The batch processor sends every 50 ms instead of every 5 s.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def send_to(monkeypatch: pytest.MonkeyPatch, collector: Collector) -> None:
    """A Vernis started afterwards sends its traces to `collector`."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)


def answered(spans: list[ReceivedSpan]) -> bool:
    return any(span.name == "invoke_agent" for span in spans)


def tree(spans: list[ReceivedSpan]) -> tuple[ReceivedSpan, list[ReceivedSpan]]:
    """The one answer's span and its children, in the order they started."""
    (answer,) = [span for span in spans if span.name == "invoke_agent"]
    children = sorted(
        (span for span in spans if span.parent_span_id == answer.span_id), key=lambda s: s.start
    )
    return answer, children


async def test_an_answer_with_a_previewed_write_is_one_trace_without_text(
    vernis_factory: VernisFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer that previews a write is one trace: invoke_agent (conversation, models, tokens, org) over chat, execute_tool with its approval as an event, and chat; no text or arguments anywhere."""
    async with otlp_receiver() as collector:
        send_to(monkeypatch, collector)
        async with vernis_factory() as vernis:
            notification_id = await add_notification(vernis)
            async with vernis.opened() as client:
                confirmation, events = await preview(client, vernis, notification_id)
            spans = await collector.until(answered)
    answer, children = tree(spans)
    start = next(e for e in events if e["type"] == "assistant_start")
    assert answer.parent_span_id == ""
    assert answer.resource["service.name"] == "vernis"
    assert answer.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert answer.attributes["gen_ai.conversation.id"] == start["conversation_id"]
    assert answer.attributes["vernis.message.id"] == start["message_id"]
    assert answer.attributes["gen_ai.request.model"] == SCRIPTED_CHAT_MODEL
    assert answer.attributes["gen_ai.response.model"] == SCRIPTED_CHAT_MODEL
    assert answer.attributes["vernis.org"] == "acme"
    assert answer.attributes["vernis.answer.status"] == "complete"
    assert [span.name for span in children] == [
        f"chat {SCRIPTED_CHAT_MODEL}",
        "execute_tool mark_notification_read",
        f"chat {SCRIPTED_CHAT_MODEL}",
    ]
    assert {span.trace_id for span in spans} == {answer.trace_id}
    chats = [span for span in children if span.name.startswith("chat ")]
    for chat in chats:
        assert chat.kind == SPAN_KIND_CLIENT
        assert chat.attributes["gen_ai.request.model"] == chat.attributes["gen_ai.response.model"]
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
    assert chats[0].attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert chats[0].attributes["vernis.tool_calls"] == ["mark_notification_read"]
    for kind in ("input", "output"):
        assert answer.attributes[f"gen_ai.usage.{kind}_tokens"] == sum(
            chat.attributes[f"gen_ai.usage.{kind}_tokens"] for chat in chats
        )
    tool = children[1]
    started = next(e for e in events if e["type"] == "tool_call_started")
    assert tool.attributes["gen_ai.tool.name"] == "mark_notification_read"
    assert tool.attributes["gen_ai.tool.call.id"] == started["call_id"]
    assert tool.attributes["vernis.tool.status"] == "needs_confirmation"
    assert tool.events == [
        ("vernis.approval.requested", {"vernis.approval.id": confirmation["confirmation_id"]})
    ]
    assert tool.status_code != STATUS_ERROR
    for span in spans:
        assert not CONTENT & span.attributes.keys(), span
    everything = json.dumps([span.attributes for span in spans])
    assert "mark it read please" not in everything
    assert notification_id not in everything
    assert text_of(events) not in everything


async def test_with_trace_content_the_spans_carry_the_text_and_arguments(
    vernis_factory: VernisFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With VERNIS_TRACE_CONTENT=1 the chat span holds the messages sent, the tool span its arguments and result, and the answer span its text."""
    monkeypatch.setenv("VERNIS_TRACE_CONTENT", "1")
    async with otlp_receiver() as collector:
        send_to(monkeypatch, collector)
        async with vernis_factory() as vernis:
            notification_id = await add_notification(vernis)
            async with vernis.opened() as client:
                _, events = await preview(client, vernis, notification_id)
            spans = await collector.until(answered)
    answer, (first, tool, second) = tree(spans)
    sent = json.loads(first.attributes["gen_ai.input.messages"])
    assert sent[-1]["role"] == "user"
    assert sent[-1]["content"].endswith("mark it read please")
    said = json.loads(first.attributes["gen_ai.output.messages"])
    assert said[0]["parts"][-1]["name"] == "mark_notification_read"
    assert json.loads(said[0]["parts"][-1]["arguments"]) == {"notification_id": notification_id}
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"notification_id": notification_id}
    result = json.loads(tool.attributes["gen_ai.tool.call.result"])
    assert result["ok"] is True
    assert json.loads(second.attributes["gen_ai.input.messages"])[-1]["role"] == "tool"
    (output,) = json.loads(answer.attributes["gen_ai.output.messages"])
    assert output["parts"] == [{"type": "text", "content": text_of(events)}]
    assert text_of(events)


async def test_an_mcp_server_receives_the_tool_spans_traceparent(
    vernis_factory: VernisFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HTTP request of an MCP tool call carries a W3C traceparent naming the answer's trace and that call's execute_tool span."""
    monkeypatch.setenv("DESK_MCP_KEY", SERVICE_KEY)
    desk = Desk()
    async with otlp_receiver() as collector:
        send_to(monkeypatch, collector)
        async with desk.serve() as url, product_vernis(vernis_factory, tmp_path, config_text(url)) as vernis:
            find = ScriptedToolCall("desk__find_tickets", {"status": "open"}, call_id="call_find")
            vernis.scripted.add(Reply("Looking.", tool_calls=[find]), match=chat_about("open tickets"))
            vernis.scripted.add("Two open tickets.", match=after_tool)
            async with vernis.connect(None, token=vernis.token(MEMBER)) as client:
                await client.until("history_end")
                await client.answer("Which open tickets do we have?")
            spans = await collector.until(answered)
    answer, children = tree(spans)
    (tool,) = [span for span in children if span.name == "execute_tool desk__find_tickets"]
    assert tool.attributes["gen_ai.tool.call.id"] == "call_find"
    assert tool.attributes["vernis.tool.status"] == "ok"
    (call,) = desk.calls_of("find_tickets")
    version, trace_id, parent_id, flags = call.headers["traceparent"].split("-")
    assert (version, trace_id, parent_id) == ("00", answer.trace_id, tool.span_id)
    assert int(flags, 16) & 1, "sampled"


async def test_a_question_is_an_event_and_a_failed_tool_call_an_error(
    vernis_factory: VernisFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ask_user's span has the event vernis.question.asked with the question's id; a call to an unknown tool has the error status and its code as error.type."""
    async with otlp_receiver() as collector:
        send_to(monkeypatch, collector)
        async with vernis_factory() as vernis:
            arguments = {"title": "Follow-up", "questions": QUESTIONS}
            calls = [ScriptedToolCall("no_such_tool", {}), ScriptedToolCall("ask_user", arguments)]
            vernis.scripted.add(Reply("A few questions first.", tool_calls=calls), match="plan it")
            async with vernis.opened() as client:
                events = await client.answer("plan it")
            spans = await collector.until(answered)
    (question,) = [e for e in events if e["type"] == "question_required"]
    answer, children = tree(spans)
    tools = {span.name: span for span in children if span.name.startswith("execute_tool ")}
    asked = tools["execute_tool ask_user"]
    assert asked.events == [("vernis.question.asked", {"vernis.question.id": question["question_id"]})]
    assert asked.attributes["vernis.tool.status"] == "needs_answer"
    assert asked.status_code != STATUS_ERROR
    failed = tools["execute_tool no_such_tool"]
    assert failed.status_code == STATUS_ERROR
    assert failed.attributes["error.type"] == "unknown_tool"
    assert answer.status_code != STATUS_ERROR


async def test_a_collector_that_is_down_costs_the_answers_nothing_and_its_spans_are_counted(
    vernis_factory: VernisFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing listening at the endpoint, answers stream and end as usual, and the spans that could not be sent are counted in vernis_trace_spans_dropped_total."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    async with vernis_factory() as vernis:
        async with vernis.opened() as client:
            for _ in range(3):
                events = await client.answer("hello", timeout=5)
                assert "hello" in text_of(events)
                assert not any(e["type"] == "error" for e in events)

        async def counted() -> bool:
            return sample(await scrape(vernis.http_url), "vernis_trace_spans_dropped_total") >= 2

        await until(counted)


async def test_the_helpdesk_toolkit_sends_its_tool_spans_traceparent(
    vernis_factory: VernisFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helpdesk example's request to its API carries the traceparent of the find_tickets span it runs in."""
    key = RsaKey.generate()
    api = create_api(public_key=key.public_pem)
    received: list[dict[str, str]] = []

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            received.append({name.decode(): value.decode() for name, value in scope["headers"]})
        await api(scope, receive, send)

    async with otlp_receiver() as collector, run_server(recording) as server:
        send_to(monkeypatch, collector)
        api_url = f"http://127.0.0.1:{server.config.port}"
        async with helpdesk.product_vernis(vernis_factory, key, tmp_path, api_url) as vernis:
            find = ScriptedToolCall("find_tickets", {"status": "open"}, call_id="call_find")
            vernis.scripted.add(
                Reply("Let me look.", tool_calls=[find]), match=helpdesk.chat_about("open tickets")
            )
            vernis.scripted.add("Two open tickets.", match=helpdesk.after_tool("find_tickets"))
            async with vernis.connect(email=None, token=key.sign(helpdesk.AGENT)) as client:
                await client.until("history_end")
                await client.answer("List my open tickets.")
            spans = await collector.until(answered)
    answer, children = tree(spans)
    (tool,) = [span for span in children if span.name == "execute_tool find_tickets"]
    (request,) = received
    _, trace_id, parent_id, _ = request["traceparent"].split("-")
    assert (trace_id, parent_id) == (answer.trace_id, tool.span_id)


async def test_an_approval_in_the_chat_is_an_event_of_the_write_it_lets_run(
    vernis_factory: VernisFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a preview, the user's "yes" lets the model repeat the write confirmed: its span, in the second answer's trace, has vernis.approval.resolved (approved, via chat)."""
    async with otlp_receiver() as collector:
        send_to(monkeypatch, collector)
        async with vernis_factory() as vernis:
            notification_id = await add_notification(vernis)
            async with vernis.opened() as client:
                await preview(client, vernis, notification_id)
                vernis.scripted.add(mark_read(notification_id, confirmed=True), match="yes, do it")
                events = await client.answer("yes, do it")
            spans = await collector.until(lambda spans: [s.name for s in spans].count("invoke_agent") == 2)
    start = next(e for e in events if e["type"] == "assistant_start")
    (second,) = [
        span
        for span in spans
        if span.name == "invoke_agent" and span.attributes["vernis.message.id"] == start["message_id"]
    ]
    (write,) = [
        span for span in spans if span.parent_span_id == second.span_id and span.name.startswith("execute_")
    ]
    assert write.name == "execute_tool mark_notification_read"
    assert write.attributes["vernis.tool.status"] == "ok"
    assert write.events == [
        ("vernis.approval.resolved", {"vernis.approval.outcome": "approved", "vernis.approval.via": "chat"})
    ]
    first = next(span for span in spans if span.name == "invoke_agent" and span is not second)
    assert first.trace_id != second.trace_id


async def test_a_write_sent_to_review_has_the_review_as_an_event(
    vernis_factory: VernisFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write approved in the chat that goes to a reviewer: its span has vernis.approval.resolved then vernis.review.requested with the review's id."""
    async with otlp_receiver() as collector:
        send_to(monkeypatch, collector)
        async with vernis_factory() as vernis:
            contact_id = await a_contact(vernis)
            arguments = {"contact_id": contact_id, "body": "See you at ten.", "confirmed": True}
            async with vernis.opened() as client:
                vernis.scripted.add(sms(contact_id, "See you at ten."), match="text them")
                await client.answer("please text them")
                vernis.scripted.add(
                    Reply(tool_calls=[ScriptedToolCall("send_sms", arguments)]), match="yes, send"
                )
                events = await client.answer("yes, send it")
            spans = await collector.until(lambda spans: [s.name for s in spans].count("invoke_agent") == 2)
    (requested,) = [e for e in events if e["type"] == "review_requested"]
    (write,) = [span for span in spans if span.name == "execute_tool send_sms" and span.events[1:]]
    assert write.attributes["vernis.tool.status"] == "review_requested"
    assert write.events == [
        ("vernis.approval.resolved", {"vernis.approval.outcome": "approved", "vernis.approval.via": "chat"}),
        ("vernis.review.requested", {"vernis.review.id": requested["review_id"]}),
    ]
