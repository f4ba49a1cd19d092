"""`/metrics` (SPEC §15) through a real server: Prometheus text parsed by prometheus-client's own
parser after real answers, a failed one and a rate-limited message; the bearer token; no label
names a member, organization or conversation.
"""

from __future__ import annotations

import asyncio

import httpx

from tests.fixtures.server import VernisFactory
from tests.ops.helpers import is_chat, sample, scrape
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Fault, Reply, ScriptedToolCall

MODEL = SCRIPTED_CHAT_MODEL
METRICS_TOKEN = "scrape-me-please-with-a-long-enough-token"


async def test_metrics_after_a_tool_call_a_failure_and_a_rate_limited_message(
    vernis_factory: VernisFactory,
) -> None:
    """After an answer with a tool call, a failed answer and a rate-limited message, /metrics counts each: answers by outcome, latencies, tokens, the tool call, the LLM error, the refusal, frames, sockets."""
    async with vernis_factory(rate_limit="2/60", llm_max_retries=0) as vernis:
        vernis.scripted.add(
            Reply(tool_calls=[ScriptedToolCall("search_contacts", {"query": "Priya"})], usage=(100, 10)),
            match=is_chat,
        )
        vernis.scripted.add(Reply("Here they are.", usage=(200, 20)), match=is_chat)
        vernis.scripted.add(Reply(fault=Fault.http(500)), match=is_chat)
        async with vernis.opened() as client:
            events = await client.answer("find Priya")
            assert [e["status"] for e in events if e["type"] == "tool_call_completed"] == ["ok"]
            await client.until("title_updated")  # the first exchange's title
            failed = await client.answer("this one fails")
            assert any(e["type"] == "error" and e["code"] == "llm_unavailable" for e in failed)
            await client.send("user_message", content="one too many")
            refused = await client.until("error")
            assert refused[-1]["code"] == "rate_limited"
            live = await scrape(vernis.http_url)
            assert sample(live, "vernis_sockets_open") == 1
        samples = await scrape(vernis.http_url)
        for _ in range(100):  # the socket's close is recorded once the server has seen it
            if sample(samples, "vernis_sockets_open") == 0:
                break
            await asyncio.sleep(0.05)
            samples = await scrape(vernis.http_url)
    assert sample(samples, "vernis_sockets_open") == 0
    assert sample(samples, "vernis_answers_in_flight") == 0
    assert sample(samples, "vernis_answers_total", outcome="complete") == 1
    assert sample(samples, "vernis_answers_total", outcome="failed") == 1
    chat = {"gen_ai_operation_name": "chat", "gen_ai_request_model": MODEL}
    assert sample(samples, "gen_ai_client_operation_duration_seconds_count", **chat) == 2
    assert sample(samples, "gen_ai_client_operation_time_to_first_chunk_seconds_count", **chat) == 1
    assert sample(samples, "gen_ai_client_operation_duration_seconds_bucket", **chat, le="60.0") == 2
    assert sample(samples, "gen_ai_client_operation_duration_seconds_bucket", **chat, le="0.05") <= 2
    assert sample(samples, "gen_ai_client_token_usage_sum", **chat, gen_ai_token_type="input") == 300
    assert sample(samples, "gen_ai_client_token_usage_sum", **chat, gen_ai_token_type="output") == 30
    assert sample(samples, "vernis_tool_calls_total", tool="search_contacts", outcome="ok") == 1
    assert sample(samples, "vernis_llm_errors_total", kind="unavailable") == 1
    assert sample(samples, "vernis_messages_refused_total", reason="rate_limited") == 1
    # In: the three user messages; out: at least every event the client read.
    assert sample(samples, "vernis_frames_total", direction="in") == 3
    assert sample(samples, "vernis_frames_total", direction="out") >= len(events) + len(failed)
    labels = {name for (_, pairs) in samples for name, _ in pairs}
    assert not labels & {"member", "member_id", "org", "organization", "sub", "conversation_id"}


async def test_a_tool_name_the_model_makes_up_is_counted_as_unknown(vernis_factory: VernisFactory) -> None:
    """A call to a tool name that is no tool of the catalog is counted as tool="(unknown)" in /metrics; the made-up name is no label value."""
    made_up = "exfiltrate_" + "zq" * 20
    async with vernis_factory() as vernis:
        vernis.scripted.add(Reply(tool_calls=[ScriptedToolCall(made_up, {"all": True})]), match=is_chat)
        vernis.scripted.add(Reply("There is no such tool."), match=is_chat)
        async with vernis.opened() as client:
            events = await client.answer("do it")
        (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
        samples = await scrape(vernis.http_url)
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{vernis.http_url}/metrics")).text
    assert completed["tool_name"] == made_up
    assert sample(samples, "vernis_tool_calls_total", tool="(unknown)", outcome=completed["status"]) == 1
    assert made_up not in text


async def test_metrics_ask_for_the_bearer_token_when_one_is_set(vernis_factory: VernisFactory) -> None:
    """With VERNIS_METRICS_TOKEN set, /metrics answers 401 without it or with a wrong one, and the metrics with it."""
    async with vernis_factory(metrics_token=METRICS_TOKEN) as vernis:
        async with httpx.AsyncClient(base_url=vernis.http_url) as http:
            assert (await http.get("/metrics")).status_code == 401
            wrong = await http.get("/metrics", headers={"Authorization": "Bearer scrape-me-not"})
            assert wrong.status_code == 401
        samples = await scrape(vernis.http_url, token=METRICS_TOKEN)
    assert ("vernis_sockets_open", frozenset()) in samples


async def test_guard_findings_are_counted_without_their_text(vernis_factory: VernisFactory) -> None:
    """A message with a card number (redacted) and one with an API key (blocked) each add one guard finding to /metrics, by where, category and action; the secrets appear nowhere in it."""
    card, key = "4111 1111 1111 1111", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    async with vernis_factory() as vernis, vernis.opened() as client:
        await client.answer(f"my card is {card}")
        await client.send("user_message", content=f"the key is {key}")
        assert (await client.until("error"))[-1]["code"] == "message_blocked"
        samples = await scrape(vernis.http_url)
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{vernis.http_url}/metrics")).text
    assert (
        sample(samples, "vernis_guard_findings_total", where="user_input", category="card", action="redact")
        == 1
    )
    assert (
        sample(
            samples, "vernis_guard_findings_total", where="user_input", category="credential", action="block"
        )
        == 1
    )
    assert card not in text
    assert key not in text
