"""An answer that goes on after a decision (a form answered, a review decided; SPEC §17, §23) joins
the trace of the answer that asked, as a child of the tool call that asked, also when the decision
reaches another instance (SPEC §22): what the spans say, received over OTLP/HTTP by a real receiver."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.test_questions import VALID, answered, ask
from tests.e2e.test_reviews import REVIEWER, ask_for_review, continuing
from tests.fixtures.server import VernisFactory
from tests.tracing.otlp_receiver import ReceivedSpan, otlp_receiver
from tests.tracing.test_traces import send_to


def agents(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    """The answers' spans, in the order they started."""
    return sorted((span for span in spans if span.name == "invoke_agent"), key=lambda span: span.start)


def two_answers(spans: list[ReceivedSpan]) -> bool:
    return len(agents(spans)) == 2


def assert_goes_on_from(spans: list[ReceivedSpan], tool: str) -> None:
    """The second answer is in the first one's trace, a child of the first one's `tool` span."""
    first, second = agents(spans)
    (asked,) = [
        span for span in spans if span.name == f"execute_tool {tool}" and span.trace_id == first.trace_id
    ]
    assert asked.parent_span_id == first.span_id
    assert second.trace_id == first.trace_id
    assert second.parent_span_id == asked.span_id
    assert second.attributes["vernis.message.id"] != first.attributes["vernis.message.id"]


async def test_the_answer_after_a_form_joins_the_trace_of_the_answer_that_asked(
    vernis_factory: VernisFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer that reads the user's form is a child of the ask_user call's span, in the same trace."""
    async with otlp_receiver() as collector:
        send_to(monkeypatch, collector)
        async with vernis_factory() as vernis, vernis.opened() as client:
            question, _ = await ask(vernis, client)
            vernis.scripted.add("Booked.", match=answered)
            await client.send("answer_question", question_id=question["question_id"], answers=VALID)
            await client.until("assistant_end")
            spans = await collector.until(two_answers)
    assert_goes_on_from(spans, "ask_user")


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_review_decided_on_another_instance_goes_on_in_the_requesters_trace(
    vernis_factory: VernisFactory, redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked on instance A, reviewed on instance B: the answer B starts after the review is a child of A's send_sms span, in A's trace."""
    shared = {"redis_url": redis_url, "redis_prefix": redis_prefix}
    async with otlp_receiver() as collector:
        send_to(monkeypatch, collector)
        # Each instance names itself in its spans' resource (read when it starts).
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=one")
        async with vernis_factory(**shared) as one:
            monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=two")
            async with vernis_factory(**shared) as two, one.opened() as member, two.opened(REVIEWER) as admin:
                _, requested = await ask_for_review(one, member, f"Two instances {uuid.uuid4().hex[:6]}")
                await admin.expect("review_required")
                one.scripted.add("Sent from the other side.", match=continuing)
                await admin.send("review_tool", review_id=requested["review_id"], approved=True)
                await member.until("assistant_end", timeout=15)
            spans = await collector.until(two_answers)
    assert_goes_on_from(spans, "send_sms")
    first, second = agents(spans)
    assert (first.resource["service.instance.id"], second.resource["service.instance.id"]) == ("one", "two")
