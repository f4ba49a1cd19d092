"""OpenAIChatModel against the scripted server: the real `openai` client over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import orjson
import pytest

from tests.fixtures.scripted import ScriptedServer, scripted_fixture  # noqa: F401
from tests.utils import free_port
from vernis.exceptions import LLMNotConfigured, LLMStalled, LLMTruncated, LLMUnavailable
from vernis.model.base import (
    ChatRequest,
    Finish,
    ModelEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    Usage,
    collect,
)
from vernis.model.chunks import MERGED_CHARS
from vernis.model.openai import OpenAIChatModel
from vernis.model.scripted import Fault, Quirk, Reply, ScriptedToolCall

REQUEST = ChatRequest(model="vernis-scripted", messages=[{"role": "user", "content": "Hello there"}])
SEARCH = ScriptedToolCall("search_contacts", {"query": "Dr. Alvarez", "limit": 5}, call_id="call_search")
NOTE = ScriptedToolCall("add_note", {"contact_id": 42, "text": "Call back on Monday"}, call_id="call_note")


@pytest.fixture
async def llm(scripted: ScriptedServer) -> AsyncIterator[OpenAIChatModel]:
    model = OpenAIChatModel(base_url=scripted.base_url, api_key=None, stall_timeout=5, max_retries=2)
    yield model
    await model.aclose()


@pytest.fixture
async def quick_llm(scripted: ScriptedServer) -> AsyncIterator[OpenAIChatModel]:
    """A model with a short stall timeout and no retries, for fault tests."""
    model = OpenAIChatModel(base_url=scripted.base_url, api_key=None, stall_timeout=0.3, max_retries=0)
    yield model
    await model.aclose()


async def events_of(llm: OpenAIChatModel, request: ChatRequest = REQUEST) -> list[ModelEvent]:
    return [event async for event in llm.stream(request)]


async def read_into(events: list[ModelEvent], llm: OpenAIChatModel) -> None:
    """Like `events_of`, but keeps what arrived before an error."""
    async for event in llm.stream(REQUEST):
        events.append(event)


def text_of(events: list[ModelEvent]) -> str:
    return "".join(event.content for event in events if isinstance(event, TextDelta))


def calls_of(events: list[ModelEvent]) -> list[ToolCall]:
    return [event for event in events if isinstance(event, ToolCall)]


async def test_plain_text_streams_deltas_then_usage_then_finish(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """A text answer whose chunks arrive apart comes as one TextDelta per chunk, then Usage, then Finish last."""
    scripted.model.add(Reply(["Hello", " from", " the", " model."], usage=(12, 4), chunk_delay=0.05))

    events = await events_of(llm)

    assert events == [
        TextDelta("Hello"),
        TextDelta(" from"),
        TextDelta(" the"),
        TextDelta(" model."),
        Usage(prompt_tokens=12, completion_tokens=4),
        Finish("stop", REQUEST.model),
    ]


async def test_chunks_that_arrive_together_are_one_delta(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """Text chunks written in one piece (a model that outruns the reader) come as one TextDelta of their whole text."""
    scripted.model.add(Reply(["Hello", " from", " the", " model."], usage=(12, 4), frames_per_write=20))

    events = await events_of(llm)

    assert events == [
        TextDelta("Hello from the model."),
        Usage(prompt_tokens=12, completion_tokens=4),
        Finish("stop", REQUEST.model),
    ]


async def test_a_long_run_of_chunks_in_one_read_is_cut_into_deltas_of_bounded_size(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """Chunks that came together are merged up to about MERGED_CHARS a delta (a slow socket's queue is bounded in frames), and a longer chunk is never split."""
    chunks = [f"word{n:05d} " for n in range(400)] + ["x" * 3000]
    scripted.model.add(Reply(chunks, frames_per_write=1000))

    deltas = [event for event in await events_of(llm) if isinstance(event, TextDelta)]

    assert "".join(delta.content for delta in deltas) == "".join(chunks)
    assert len(deltas) >= 4
    assert all(len(delta.content) < MERGED_CHARS + len(chunks[0]) for delta in deltas[:-1])
    assert deltas[-1].content.endswith("x" * 3000)  # whole, in one delta


async def test_an_error_after_text_in_the_same_read_comes_after_that_text(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """Text and an error chunk written in one piece: the text is given first, then LLMUnavailable (the answer had begun)."""
    scripted.model.add(
        Reply(["one", " two", " three"], fault=Fault.error_mid_stream(after=3), frames_per_write=20)
    )
    events: list[ModelEvent] = []

    with pytest.raises(LLMUnavailable):
        await read_into(events, llm)

    assert events == [TextDelta("one two")]


async def test_request_carries_messages_tools_and_stream_options(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """The upstream request is a streamed chat completion asking for usage, with every request field."""
    tool = {"type": "function", "function": {"name": "search_contacts", "parameters": {"type": "object"}}}
    request = ChatRequest(
        model="vernis-scripted",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        tools=[tool],
        max_tokens=256,
        temperature=0.2,
        user="member-7",
    )

    await events_of(llm, request)

    body = scripted.model.requests[-1]
    assert body["model"] == "vernis-scripted"
    assert body["messages"] == list(request.messages)
    assert body["tools"] == [tool]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert (body["max_tokens"], body["temperature"], body["user"]) == (256, 0.2, "member-7")


async def test_tool_calls_split_over_chunks_are_assembled_by_index(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """Tool calls streamed as id and name, then argument fragments, become whole ToolCalls after the text."""
    scripted.model.add(Reply("Let me look.", tool_calls=[SEARCH, NOTE], argument_chunk=3))

    events = await events_of(llm)

    assert text_of(events) == "Let me look."
    assert calls_of(events) == [
        ToolCall("call_search", "search_contacts", SEARCH.arguments_json),
        ToolCall("call_note", "add_note", NOTE.arguments_json),
    ]
    first_call = events.index(calls_of(events)[0])
    assert all(isinstance(event, TextDelta) for event in events[:first_call])
    assert isinstance(events[-2], Usage)
    assert events[-1] == Finish("tool_calls", REQUEST.model)


@pytest.mark.parametrize(
    "quirks",
    [
        Quirk.WHOLE_TOOL_CALLS,
        Quirk.REPEAT_TOOL_CHUNK,
        Quirk.WHOLE_TOOL_CALLS | Quirk.REPEAT_TOOL_CHUNK,
        Quirk.DOUBLE_FINISH,
        Quirk.DOUBLE_FINISH | Quirk.REPEAT_TOOL_CHUNK,
        Quirk.COMMENT_LINES,
        Quirk.REASONING,
        Quirk.IGNORES_STREAM,
        Quirk.WHOLE_TOOL_CALLS | Quirk.REPEAT_TOOL_CHUNK | Quirk.DOUBLE_FINISH | Quirk.COMMENT_LINES,
    ],
    ids=lambda quirks: quirks.name.replace("|", "+"),
)
async def test_provider_quirks_never_double_text_or_tool_calls(
    llm: OpenAIChatModel, scripted: ScriptedServer, quirks: Quirk
) -> None:
    """Under each provider quirk: the text once, each tool call once with its arguments once, one Finish."""
    scripted.model.add(Reply("Sure, searching now.", tool_calls=[SEARCH, NOTE], quirks=quirks, usage=(9, 7)))

    events = await events_of(llm)

    assert text_of(events) == "Sure, searching now."
    assert calls_of(events) == [
        ToolCall("call_search", "search_contacts", SEARCH.arguments_json),
        ToolCall("call_note", "add_note", NOTE.arguments_json),
    ]
    assert [event for event in events if isinstance(event, Usage)] == [Usage(9, 7)]
    assert [event for event in events if isinstance(event, Finish)] == [Finish("tool_calls", REQUEST.model)]
    assert events[-1] == Finish("tool_calls", REQUEST.model)


async def test_missing_usage_yields_no_usage_event(llm: OpenAIChatModel, scripted: ScriptedServer) -> None:
    """A provider that sends no usage chunk gives no Usage event, and the answer still finishes."""
    scripted.model.add(Reply("No usage here.", quirks=Quirk.NO_USAGE))

    events = await events_of(llm)

    assert text_of(events) == "No usage here."
    assert not any(isinstance(event, Usage) for event in events)
    assert events[-1] == Finish("stop", REQUEST.model)


async def test_reasoning_text_is_kept_apart_from_the_answer(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """`reasoning_content` and `reasoning` deltas become ReasoningDeltas, before and apart from the text."""
    scripted.model.add(Reply("The answer is 4.", reasoning="Two plus two is four.", quirks=Quirk.REASONING))

    events = await events_of(llm)

    reasoning = [event for event in events if isinstance(event, ReasoningDelta)]
    assert "".join(event.content for event in reasoning) == "Two plus two is four."
    assert text_of(events) == "The answer is 4."
    assert events.index(reasoning[-1]) < min(i for i, e in enumerate(events) if isinstance(e, TextDelta))


async def test_finish_reason_length_is_reported(llm: OpenAIChatModel, scripted: ScriptedServer) -> None:
    """The provider's finish_reason is passed through as said (here `length`)."""
    scripted.model.add(Reply("Cut short by max_tokens", finish_reason="length"))

    assert (await collect(llm, REQUEST)).finish_reason == "length"


async def test_429_with_retry_after_is_retried_then_succeeds(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """A 429 with Retry-After is retried by the client after that delay, and the answer then streams."""
    scripted.model.add(Reply(fault=Fault.http(429, retry_after=0.2)))
    scripted.model.add(Reply("Worth the wait."))

    start = time.monotonic()
    events = await events_of(llm)

    assert time.monotonic() - start >= 0.2
    assert text_of(events) == "Worth the wait."
    assert len(scripted.model.requests) == 2


async def test_500_is_retried_then_succeeds(llm: OpenAIChatModel, scripted: ScriptedServer) -> None:
    """A 5xx before the first byte is retried by the client, invisibly to the caller."""
    scripted.model.add(Reply(fault=Fault.http(500)))
    scripted.model.add(Reply("Recovered."))

    events = await events_of(llm)

    assert text_of(events) == "Recovered."
    assert len(scripted.model.requests) == 2


async def test_429_after_the_retries_is_unavailable_with_retry_after(
    quick_llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """A 429 that outlasts the retries is a retryable LLMUnavailable carrying the Retry-After delay."""
    scripted.model.add(Reply(fault=Fault.http(429, retry_after=7)))

    with pytest.raises(LLMUnavailable) as caught:
        await events_of(quick_llm)

    assert caught.value.retryable
    assert caught.value.retry_after == 7
    assert "429" in caught.value.detail


@pytest.mark.parametrize(
    ("status", "setting"),
    [
        (401, "VERNIS_LLM_API_KEY"),
        (403, "VERNIS_LLM_API_KEY"),
        (404, "VERNIS_LLM_MODEL"),
        (400, "VERNIS_LLM_MODEL"),
    ],
)
async def test_client_errors_are_not_retryable_and_name_the_setting(
    llm: OpenAIChatModel, scripted: ScriptedServer, status: int, setting: str
) -> None:
    """400/401/403/404 are not retried and their public message names the setting to check."""
    scripted.model.add(Reply(fault=Fault.http(status)), times=None)

    with pytest.raises(LLMUnavailable) as caught:
        await events_of(llm)

    assert not caught.value.retryable
    assert setting in caught.value.public_message
    assert len(scripted.model.requests) == 1


async def test_error_object_mid_stream_is_unavailable_after_the_partial_text(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """An `{"error": ...}` chunk under HTTP 200 raises LLMUnavailable after the text streamed so far."""
    scripted.model.add(Reply(["one", " two", " three", " four"], fault=Fault.error_mid_stream(after=3)))
    events: list[ModelEvent] = []

    with pytest.raises(LLMUnavailable) as caught:
        await read_into(events, llm)

    assert type(caught.value) is LLMUnavailable
    assert all(isinstance(event, TextDelta) for event in events)
    assert text_of(events) == "one two"
    assert "502" in caught.value.detail


async def test_stall_mid_answer_raises_stalled_within_the_timeout(
    quick_llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """No chunk for the stall timeout ends the answer with LLMStalled, long before the server resumes."""
    scripted.model.add(Reply(["one", " two", " three"], fault=Fault.stall(after=2, seconds=30)))

    start = time.monotonic()
    with pytest.raises(LLMStalled):
        await events_of(quick_llm)

    assert 0.25 <= time.monotonic() - start < 2


async def test_comment_lines_do_not_reset_the_stall_timer(
    quick_llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """A provider sending only `:` keep-alive comments still stalls: comments are not chunks."""
    scripted.model.add(Reply(["one", " two"], fault=Fault.stall(after=2, seconds=30, keepalive=0.05)))

    start = time.monotonic()
    with pytest.raises(LLMStalled):
        await events_of(quick_llm)

    assert time.monotonic() - start < 2
    assert len(scripted.model.requests) == 1


async def test_a_slow_consumer_is_not_a_stalled_provider(
    quick_llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """Time the caller spends between two events never counts as a stall, nor cancels the caller."""
    scripted.model.add(Reply(["one", " two", " three"]))
    events: list[ModelEvent] = []

    async for event in quick_llm.stream(REQUEST):
        if not events:
            await asyncio.sleep(0.5)  # longer than the stall timeout
        events.append(event)

    assert text_of(events) == "one two three"
    assert events[-1] == Finish("stop", REQUEST.model)


async def test_provider_keeping_the_stream_open_after_finish_is_a_complete_answer(
    quick_llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """A stream that stalls after its finish_reason (no [DONE], no close) ends as a complete answer."""
    # Frames: role, "one", " two", finish, usage, [DONE]; the server stalls before the usage.
    scripted.model.add(Reply(["one", " two"], fault=Fault.stall(after=4, seconds=30)))

    events = await events_of(quick_llm)

    assert text_of(events) == "one two"
    assert events[-1] == Finish("stop", REQUEST.model)


async def test_cut_connection_mid_answer_is_unavailable(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """A connection dropped mid-body raises a retryable LLMUnavailable after the partial text."""
    scripted.model.add(Reply(["one", " two", " three"], fault=Fault.cut(after=2)))
    events: list[ModelEvent] = []

    with pytest.raises(LLMUnavailable) as caught:
        await read_into(events, llm)

    assert type(caught.value) is LLMUnavailable
    assert caught.value.retryable
    assert events == [TextDelta("one")]


async def test_stream_without_finish_reason_is_truncated(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """A stream that ends (even with [DONE]) without a finish_reason raises LLMTruncated, not a Finish."""
    scripted.model.add(Reply(["one", " two"], fault=Fault.truncated()))
    events: list[ModelEvent] = []

    with pytest.raises(LLMTruncated):
        await read_into(events, llm)

    assert all(isinstance(event, TextDelta) for event in events)
    assert text_of(events) == "one two"


async def test_connection_refused_is_not_configured() -> None:
    """Nothing listening at the base URL raises LLMNotConfigured naming VERNIS_LLM_BASE_URL."""
    llm = OpenAIChatModel(
        base_url=f"http://127.0.0.1:{free_port()}/v1", api_key=None, stall_timeout=1, max_retries=0
    )
    try:
        with pytest.raises(LLMNotConfigured) as caught:
            await events_of(llm)
    finally:
        await llm.aclose()

    assert "VERNIS_LLM_BASE_URL" in caught.value.public_message


async def test_cancelling_the_consumer_closes_the_upstream_request(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """Cancelling the task that iterates the stream hangs up on the provider mid-answer."""
    scripted.model.add(Reply(["tick "] * 200, chunk_delay=0.02))
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in llm.stream(REQUEST):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    exchange = scripted.model.exchanges[-1]
    await asyncio.wait_for(exchange.disconnected.wait(), 5)
    assert not exchange.completed


async def test_closing_the_stream_early_closes_the_upstream_request(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """Leaving the iteration (break inside aclosing) hangs up on the provider too."""
    scripted.model.add(Reply(["tick "] * 200, chunk_delay=0.02))

    stream: Any = llm.stream(REQUEST)
    async with aclosing(stream):
        async for _ in stream:
            break

    exchange = scripted.model.exchanges[-1]
    await asyncio.wait_for(exchange.disconnected.wait(), 5)
    assert not exchange.completed


async def test_connections_are_reused_across_answers(llm: OpenAIChatModel, scripted: ScriptedServer) -> None:
    """Many answers in a row and in parallel all complete through the one client."""
    results = await asyncio.gather(*(collect(llm, REQUEST) for _ in range(20)))

    assert all("scripted offline model" in result.text for result in results)
    assert len(scripted.model.requests) == 20


async def test_cached_tokens_come_from_prompt_tokens_details(
    llm: OpenAIChatModel, scripted: ScriptedServer
) -> None:
    """`usage.prompt_tokens_details.cached_tokens` becomes Usage.cached_tokens beside the input and output tokens."""
    scripted.model.add(Reply("Hi.", usage=(120, 3), cached_tokens=96))

    events = await events_of(llm)

    assert [event for event in events if isinstance(event, Usage)] == [Usage(120, 3, cached_tokens=96)]


@pytest.mark.parametrize(
    ("usage", "cached"),
    [
        ({"prompt_tokens": 10, "completion_tokens": 2}, 0),  # no details at all
        ({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": None}, 0),
        ({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"audio_tokens": 0}}, 0),
        ({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": "x"}}, 0),
        ({"prompt_tokens": 10, "completion_tokens": 2, "prompt_cache_hit_tokens": 7}, 7),  # DeepSeek's name
    ],
)
async def test_usage_without_cache_details_counts_none(
    llm: OpenAIChatModel, scripted: ScriptedServer, usage: dict[str, Any], cached: int
) -> None:
    """A usage block without prompt_tokens_details (or with null, other or malformed details) gives 0 cached tokens and keeps the counts; DeepSeek's prompt_cache_hit_tokens is read."""
    scripted.model.add(Reply("Hi.", quirks=Quirk.NO_USAGE, extra={"usage": usage}))

    events = await events_of(llm)

    assert [event for event in events if isinstance(event, Usage)] == [Usage(10, 2, cached_tokens=cached)]


async def test_a_compressed_stream_is_read_whole() -> None:
    """A stream the provider compresses (`content-encoding: gzip`) is read through httpx2's decoding and gives the whole answer."""
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        for text in ("Zipped", " text.")
    ]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = gzip.compress(
        b"".join(b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"
    )

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")).split(
                b":"
            )[1]
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    model = OpenAIChatModel(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=None, stall_timeout=5, max_retries=0
    )
    try:
        events = await events_of(model)
    finally:
        await model.aclose()
        server.close()
        await server.wait_closed()

    assert text_of(events) == "Zipped text."
    assert events[-1] == Finish("stop")
