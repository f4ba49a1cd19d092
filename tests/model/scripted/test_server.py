"""The scripted model: streams the official `openai` client accepts, and rules that do what tests say."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest
from openai.types.chat import ChatCompletion
from starlette.applications import Starlette
from starlette.routing import Mount

from tests.fixtures.scripted import ScriptedServer, scripted_fixture  # noqa: F401
from tests.utils import run_server
from vernis.model.scripted import SCRIPTED_TITLE_MODEL, Fault, Quirk, Reply, ScriptedModel, ScriptedToolCall
from vernis.model.scripted.script import render_stream, split_words

BODY: dict[str, Any] = {
    "model": "vernis-scripted",
    "messages": [{"role": "user", "content": "Hello"}],
    "stream": True,
    "stream_options": {"include_usage": True},
}


@pytest.fixture
async def client(scripted: ScriptedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=scripted.base_url, api_key="not-needed", max_retries=0)
    yield client
    await client.close()


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def render(reply: Reply, body: dict[str, Any] = BODY) -> list[dict[str, Any]]:
    frames = render_stream(reply, body, completion_id="chatcmpl-1", created=1, model="m")
    assert frames[-1] == b"data: [DONE]\n\n"
    return [orjson.loads(frame[6:]) for frame in frames[:-1] if frame.startswith(b"data: ")]


def test_split_words_concatenates_back_to_the_text() -> None:
    """Word chunks carry their leading space and join back to the exact text."""
    text = "  Hello brave\nnew   world "
    assert split_words(text) == ["  Hello", " brave", "\nnew", "   world", " "]
    assert "".join(split_words(text)) == text


def test_stream_layout_is_openai_s() -> None:
    """Role chunk, content chunks, a finish chunk with an empty delta, then a usage chunk with no choices."""
    chunks = render(Reply(["Hi", " there"], usage=(5, 2)))

    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:3]] == ["Hi", " there"]
    assert chunks[3]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert chunks[4]["choices"] == []
    assert chunks[4]["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["id"] for c in chunks} == {"chatcmpl-1"}


def test_usage_chunk_only_when_asked() -> None:
    """Without `stream_options.include_usage` no usage chunk is sent, as OpenAI does."""
    chunks = render(Reply("Hi"), {**BODY, "stream_options": None})

    assert all("usage" not in c for c in chunks)


def test_tool_calls_stream_id_and_name_first_then_argument_fragments() -> None:
    """A tool call streams as a header chunk (index, id, name) and argument fragments by index."""
    call = ScriptedToolCall("lookup", '{"q": "abc"}', call_id="call_1")
    chunks = render(Reply(tool_calls=[call], argument_chunk=4))

    deltas = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks[1:-2] if c["choices"][0]["delta"]]
    assert deltas[0] == {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": ""},
    }
    assert all(d.keys() == {"index", "function"} for d in deltas[1:])
    assert "".join(d["function"]["arguments"] for d in deltas[1:]) == '{"q": "abc"}'
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_comment_lines_and_double_finish_quirks() -> None:
    """COMMENT_LINES interleaves `:` lines; DOUBLE_FINISH sends the finish chunk (with last text) twice."""
    frames = render_stream(
        Reply("a b", quirks=Quirk.COMMENT_LINES | Quirk.DOUBLE_FINISH),
        BODY,
        completion_id="c",
        created=1,
        model="m",
    )
    finishes = [f for f in frames if b'"finish_reason":"stop"' in f]

    assert frames[0].startswith(b":")
    assert sum(f.startswith(b":") for f in frames) > 3
    assert len(finishes) == 2
    assert finishes[0] == finishes[1]
    assert b'"content":" b"' in finishes[0]


async def test_official_client_parses_the_stream_into_text_and_tool_calls(
    client: openai.AsyncOpenAI, scripted: ScriptedServer
) -> None:
    """The openai client's own stream accumulator rebuilds the scripted text, tool calls and usage."""
    call = ScriptedToolCall("lookup", {"q": "Dr. Alvarez"}, call_id="call_7")
    scripted.model.add(Reply("Looking it up.", tool_calls=[call], usage=(11, 6)))

    async with client.chat.completions.stream(
        model="vernis-scripted", messages=user("find Alvarez"), stream_options={"include_usage": True}
    ) as stream:
        completion = await stream.get_final_completion()

    message = completion.choices[0].message
    assert message.content == "Looking it up."
    assert message.tool_calls is not None
    tool_call = message.tool_calls[0]
    assert tool_call.type == "function"
    assert (tool_call.id, tool_call.function.name) == ("call_7", "lookup")
    assert orjson.loads(tool_call.function.arguments) == {"q": "Dr. Alvarez"}
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None
    assert completion.usage.total_tokens == 17


async def test_non_streamed_request_gets_a_chat_completion(
    client: openai.AsyncOpenAI, scripted: ScriptedServer
) -> None:
    """`stream: false` is answered with one chat.completion that the client parses."""
    scripted.model.add(Reply("All at once."))

    completion = await client.chat.completions.create(model="vernis-scripted", messages=user("hi"))

    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "All at once."
    assert completion.choices[0].finish_reason == "stop"


async def test_models_endpoint_lists_the_chat_and_title_models(client: openai.AsyncOpenAI) -> None:
    """GET /v1/models lists the scripted chat and title models."""
    models = [model.id async for model in client.models.list()]

    assert models == ["vernis-scripted", SCRIPTED_TITLE_MODEL]


async def test_requests_are_logged_and_rules_are_used_up_in_order(
    client: openai.AsyncOpenAI, scripted: ScriptedServer
) -> None:
    """The first unused matching rule answers, once by default; every body received is kept."""
    scripted.model.add("first")
    scripted.model.add("second")

    answers = [
        (await client.chat.completions.create(model="m", messages=user(f"q{n}"))).choices[0].message.content
        for n in range(3)
    ]

    assert answers[:2] == ["first", "second"]
    assert "scripted offline model" in (answers[2] or "")
    assert [body["messages"][-1]["content"] for body in scripted.model.requests] == ["q0", "q1", "q2"]
    assert [rule.hits for rule in scripted.model.rules] == [1, 1]


async def test_rules_match_a_substring_or_a_predicate_and_can_repeat(
    client: openai.AsyncOpenAI, scripted: ScriptedServer
) -> None:
    """`match=` takes a substring of the last user message or a predicate; `times=None` never runs out."""
    scripted.model.add("weather reply", match="WEATHER", times=None)
    scripted.model.add("tools reply", match=lambda body: bool(body.get("tools")))

    async def ask(text: str, **extra: Any) -> str | None:
        completion: ChatCompletion = await client.chat.completions.create(
            model="m", messages=user(text), **extra
        )
        return completion.choices[0].message.content

    tool = {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}}
    assert await ask("the weather today?") == "weather reply"
    assert await ask("and the weather tomorrow?") == "weather reply"
    assert await ask("use a tool", tools=[tool]) == "tools reply"
    assert await ask("use a tool again", tools=[tool]) != "tools reply"


async def test_fails_n_times_then_succeeds(client: openai.AsyncOpenAI, scripted: ScriptedServer) -> None:
    """A failure rule with `times=2` answers two requests with the HTTP error, then the next rule answers."""
    scripted.model.add(Reply(fault=Fault.http(503)), times=2)
    scripted.model.add("finally")

    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="m", messages=user("hi"))
    completion = await client.chat.completions.create(model="m", messages=user("hi"))

    assert completion.choices[0].message.content == "finally"


async def test_http_fault_sends_retry_after_and_an_openai_error_body(
    client: openai.AsyncOpenAI, scripted: ScriptedServer
) -> None:
    """A 429 fault carries Retry-After and an OpenAI-shaped error body."""
    scripted.model.add(Reply(fault=Fault.http(429, retry_after=3)))

    with pytest.raises(openai.RateLimitError) as caught:
        await client.chat.completions.create(model="m", messages=user("hi"))

    assert caught.value.response.headers["retry-after"] == "3"
    assert caught.value.code == "rate_limit_exceeded"


async def test_invalid_body_is_a_400(client: openai.AsyncOpenAI, scripted: ScriptedServer) -> None:
    """A body without messages is refused with 400 and is not logged as a request."""
    with pytest.raises(openai.BadRequestError):
        await client.post("/chat/completions", body={"model": "m"}, cast_to=object)

    assert scripted.model.requests == []


async def test_default_reply_says_it_is_scripted_and_quotes_the_user(
    client: openai.AsyncOpenAI, scripted: ScriptedServer
) -> None:
    """With no rule, the answer says it comes from a scripted offline model and quotes the last message."""
    messages: list[Any] = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": [{"type": "text", "text": "What is on my calendar?"}]},
    ]

    async with client.chat.completions.stream(model="vernis-scripted", messages=messages) as stream:
        completion = await stream.get_final_completion()

    text = completion.choices[0].message.content or ""
    assert "scripted offline model" in text
    assert "“What is on my calendar?”" in text


QUESTION = "can you find the invoice for Globex from last March, please?"


@pytest.mark.parametrize(
    ("model", "system", "content"),
    [
        (SCRIPTED_TITLE_MODEL, "Be helpful.", QUESTION),
        ("scripted", "Write a short title for this conversation.", QUESTION),
        ("scripted", "Write a title for this conversation.", f"User: {QUESTION}\n\nAssistant: Here it is."),
    ],
    ids=["title-model", "title-prompt", "transcript"],
)
async def test_title_requests_get_a_short_title_from_the_first_message(
    client: openai.AsyncOpenAI, model: str, system: str, content: str
) -> None:
    """A request for the title model, or whose system prompt asks for a title, gets the first words."""
    messages: list[Any] = [{"role": "system", "content": system}, {"role": "user", "content": content}]

    completion = await client.chat.completions.create(model=model, messages=messages)

    assert completion.choices[0].message.content == "Can you find the invoice for"


async def test_stream_faults_are_applied_in_order(
    client: openai.AsyncOpenAI, scripted: ScriptedServer
) -> None:
    """A mid-stream error fault makes the official client raise on the error object after the first chunks."""
    scripted.model.add(Reply(["a", " b", " c"], fault=Fault.error_mid_stream(after=2)))
    received: list[str] = []

    async def read() -> None:
        stream = await client.chat.completions.create(model="m", messages=user("hi"), stream=True)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)

    with pytest.raises(openai.APIError):
        await read()

    assert received == ["a"]


async def test_client_hanging_up_mid_stall_is_recorded(
    client: openai.AsyncOpenAI, scripted: ScriptedServer
) -> None:
    """When the client closes the response during a stall, the exchange is marked disconnected."""
    scripted.model.add(Reply(["a", " b"], fault=Fault.stall(after=2, seconds=60)))

    stream = await client.chat.completions.create(model="m", messages=user("hi"), stream=True)
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    await stream.close()

    exchange = scripted.model.exchanges[-1]
    await asyncio.wait_for(exchange.disconnected.wait(), 5)
    assert not exchange.completed


async def test_the_app_can_be_mounted_under_a_prefix() -> None:
    """Mounted at /scripted, the model answers at http://HOST:PORT/scripted/v1."""
    model = ScriptedModel()
    model.add("mounted")
    async with run_server(Starlette(routes=[Mount("/scripted", app=model.app)])) as server:
        client = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{server.config.port}/scripted/v1", api_key="x"
        )
        try:
            completion = await client.chat.completions.create(model="m", messages=user("hi"))
        finally:
            await client.close()

    assert completion.choices[0].message.content == "mounted"
