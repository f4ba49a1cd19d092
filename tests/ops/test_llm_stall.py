"""A stall before the first chunk (SPEC §9) through a real server and the real `openai` client: it
is retried like a 5xx within the retry budget, and once the budget is spent the answer fails with a
message that says the model did not start, never "mid-answer".
"""

from __future__ import annotations

import logging

import pytest

from tests.fixtures.server import VernisFactory, text_of
from tests.ops.helpers import chat_requests, is_chat, sample, scrape
from vernis.model.scripted import Fault, Reply


@pytest.mark.parametrize("after", [0, 1], ids=["no-frame", "role-frame-only"])
async def test_a_stall_before_the_first_token_is_retried_into_a_good_answer(
    vernis_factory: VernisFactory, after: int
) -> None:
    """The model stalls before any text (with no frame at all, or only the role frame): the request is asked again and the user gets the whole good answer, no error; /metrics counts the retried fault."""
    async with vernis_factory(llm_stall_timeout=0.5, llm_max_retries=2) as vernis:
        vernis.scripted.add(Reply("Never sent.", fault=Fault.stall(after=after, seconds=30)), match=is_chat)
        vernis.scripted.add(Reply("Here is the answer."), match=is_chat)
        async with vernis.opened() as client:
            events = await client.answer("are you there?", timeout=15)
        assert [e for e in events if e["type"] == "error"] == []
        assert text_of(events) == "Here is the answer."
        assert events[-1]["stopped"] is False
        assert len(chat_requests(vernis)) == 2
        # The retried fault is counted all the same.
        samples = await scrape(vernis.http_url)
        assert sample(samples, "vernis_llm_errors_total", kind="not_started") == 1
        assert sample(samples, "vernis_answers_total", outcome="complete") == 1


async def test_stalls_past_the_retry_budget_fail_saying_the_model_did_not_start(
    vernis_factory: VernisFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Every attempt stalls before its first chunk: after 1 + VERNIS_LLM_MAX_RETRIES requests the answer ends with llm_unavailable, and the operator's log says the model did not start answering, not that it stopped mid-answer."""
    async with vernis_factory(llm_stall_timeout=0.5, llm_max_retries=1) as vernis:
        vernis.scripted.add(
            Reply("Never sent.", fault=Fault.stall(after=0, seconds=30)), match=is_chat, times=2
        )
        with caplog.at_level(logging.WARNING, logger="vernis.answers"):
            async with vernis.opened() as client:
                events = await client.answer("are you there?", timeout=15)
        assert len(chat_requests(vernis)) == 2
    (error,) = [e for e in events if e["type"] == "error"]
    assert error["code"] == "llm_unavailable"
    assert text_of(events) == ""
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("answer failed")]
    assert len(failed) == 1
    assert "did not start answering" in failed[0]
    assert "mid-answer" not in failed[0]
