"""Cached input tokens (SPEC §19) through a real server: the provider's
`usage.prompt_tokens_details.cached_tokens` lands in the usage rows, the usage API, the answer's log
line and `/metrics` (`gen_ai_token_type="cache_read"`); a usage block without details counts none."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from tests.fixtures.server import VernisFactory
from tests.ops.helpers import is_chat, sample, scrape
from tests.ops.test_usage import usage
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Reply


async def test_cached_tokens_reach_the_usage_rows_the_api_the_log_and_metrics(
    vernis_factory: VernisFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Two answers, one with 96 of 120 input tokens cached and one whose usage has no details: the day's row says 96 cached of 170 input, the log lines 96 and 0, /metrics cache_read 96."""
    async with vernis_factory() as vernis:
        vernis.scripted.add(Reply("Cached.", usage=(120, 4), cached_tokens=96), match=is_chat)
        vernis.scripted.add(Reply("Not said.", usage=(50, 2)), match=is_chat)
        with caplog.at_level(logging.INFO, logger="vernis.answers"):
            async with vernis.opened("owner@acme.test") as client:
                await client.answer("first")
                await client.until("title_updated")
                await client.answer("second")
        body = (await usage(vernis, "owner@acme.test")).json()
        samples = await scrape(vernis.http_url)
    (row,) = [row for row in body["days"] if row["sub"] == "owner@acme.test"]
    assert row["day"] == datetime.now(UTC).date().isoformat()
    assert (row["input_tokens"], row["cached_tokens"], row["output_tokens"], row["answers"]) == (
        170,
        96,
        6,
        2,
    )
    assert row["tokens"] == 176  # cached tokens are part of the input, not counted twice
    ended = [record for record in caplog.records if record.getMessage() == "answer complete"]
    assert [(r.input_tokens, r.cached_tokens) for r in ended] == [(120, 96), (50, 0)]  # type: ignore[attr-defined]
    chat = {"gen_ai_operation_name": "chat", "gen_ai_request_model": SCRIPTED_CHAT_MODEL}
    assert sample(samples, "gen_ai_client_token_usage_sum", **chat, gen_ai_token_type="cache_read") == 96
    assert sample(samples, "gen_ai_client_token_usage_count", **chat, gen_ai_token_type="cache_read") == 1
    assert sample(samples, "gen_ai_client_token_usage_sum", **chat, gen_ai_token_type="input") == 170


async def test_a_cache_friendly_conversation_is_mostly_read_from_the_cache(
    vernis_factory: VernisFactory,
) -> None:
    """With a model that caches prompt prefixes, a ten-message conversation's later answers read most of their input from the cache, and the usage API says so."""
    async with vernis_factory(rate_limit="100/60", member_rate_limit="100/60") as vernis:
        vernis.scripted.prefix_cache = True
        async with vernis.opened("owner@acme.test") as client:
            for turn in range(10):
                await client.answer(f"message {turn}", page_context={"route": f"/contacts/page-{turn}"})
        body = (await usage(vernis, "owner@acme.test")).json()
    (row,) = [row for row in body["days"] if row["sub"] == "owner@acme.test"]
    print(f"\ncached {row['cached_tokens']} of {row['input_tokens']} input tokens over 10 answers")
    assert row["cached_tokens"] >= 0.7 * row["input_tokens"]
