"""OpenAI-compatible chat-completion chunks into `ModelEvent`s, without I/O: `Assembler` is fed the
`data:` lines of a stream (or a whole completion) by `vernis.model.openai`, which does the request.

- tool-call deltas are assembled by `index` (id and name first, arguments in fragments); a call
  delivered whole in one chunk (Ollama), or delivered again under the same call id, is one call with
  its arguments once;
- the first `finish_reason` ends the answer: later chunks (a second finish chunk, OpenRouter) are
  ignored except for their usage, so nothing is doubled;
- an `{"error": ...}` object (or `finish_reason: "error"`) raises `LLMUnavailable`;
- reasoning text (`delta.reasoning_content` or `delta.reasoning`) becomes `ReasoningDelta`s;
- the text of the chunks that came in one read of the stream is one `TextDelta` (reasoning: one
  `ReasoningDelta`), up to `MERGED_CHARS`: a model that outruns the server, or a burst after a
  network pause, costs one delta per read, not one per chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from vernis.exceptions import LLMError, LLMTruncated, LLMUnavailable
from vernis.ids import random_hex
from vernis.model.base import Finish, ModelEvent, ReasoningDelta, TextDelta, ToolCall, Usage

__all__ = ["MERGED_CHARS", "Assembler"]

# A merged delta takes no more chunks once it holds this many characters (one longer chunk stays
# whole): frames stay small enough that a slow socket's queue, bounded in frames
# (`vernis.ws.connection.SEND_QUEUE_FRAMES`), stays bounded in memory as it was with a frame a chunk.
MERGED_CHARS = 512


_NOTHING: tuple[ModelEvent, ...] = ()


class _Call:
    __slots__ = ("call_id", "name", "parts")

    def __init__(self) -> None:
        self.call_id: str | None = None
        self.name = ""
        self.parts: list[str] = []


class Assembler:
    """Turns the JSON chunks of one stream into `ModelEvent`s (sans I/O).

    `feed()` takes the payload of one `data:` line and returns the deltas to yield now; `read()`
    does it for the lines of one read, merging their deltas; `finish()`,
    once the stream has ended, returns the tool calls, the usage and the `Finish`, or raises
    `LLMTruncated` when no `finish_reason` came.
    """

    __slots__ = ("_by_id", "_by_index", "_calls", "done", "finish_reason", "model", "usage")

    def __init__(self) -> None:
        self.done = False  # `[DONE]` seen
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None
        self.model: str | None = None  # read from the chunk that finishes (traces)
        self._calls: list[_Call] = []
        self._by_index: dict[Any, _Call] = {}
        self._by_id: dict[str, _Call] = {}

    def feed(self, payload: bytes) -> tuple[ModelEvent, ...]:
        if payload[:1] == b" ":
            payload = payload[1:]
        if payload[:6] == b"[DONE]":
            self.done = True
            return _NOTHING
        return self._events(_json_object(payload, "malformed chunk"))

    def _events(self, chunk: dict[str, Any]) -> tuple[ModelEvent, ...]:
        usage = chunk.get("usage")
        if usage:
            self.usage = usage
        if self.finish_reason is not None:
            return _NOTHING
        error = chunk.get("error")
        if error:
            raise _stream_error(error)
        choices = chunk.get("choices")
        if not choices:
            return _NOTHING
        choice = choices[0]
        delta = choice.get("delta")
        events = _NOTHING
        if delta:
            content = delta.get("content")
            if content and type(content) is str:
                events = (TextDelta(content),)
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and type(reasoning) is str:
                events = (ReasoningDelta(reasoning), *events)
            tool_calls = delta.get("tool_calls")
            if tool_calls:
                self._add_tool_calls(tool_calls)
        finish_reason = choice.get("finish_reason")
        if finish_reason:
            if finish_reason == "error":
                raise _stream_error(chunk.get("error") or {})
            self.finish_reason = finish_reason
            self.model = chunk["model"] if type(chunk.get("model")) is str else None
        return events

    def read(
        self, lines: list[bytes], progress: Callable[[], None]
    ) -> tuple[list[ModelEvent], LLMError | None]:
        """The events of one read's lines (`progress` called once when any is a `data:` line), each
        run of text (or reasoning) deltas merged into one, up to about `MERGED_CHARS`: chunks that
        came together are not shown apart, and a delta costs the rest of the answer's path (the
        hub, the frame, the socket) once, not once per chunk. An error in the stream ends the
        events and is returned beside them: what came before it still goes out first.

        The chunk nearly every line is, text and nothing else, is taken in line: in a burst this
        loop runs once per token, and `feed`'s event objects cost more than the chunk's parse."""
        out: list[ModelEvent] = []
        run: list[str] = []
        size = 0  # the characters in `run`
        kind: type[TextDelta] | type[ReasoningDelta] = TextDelta
        error = None
        data = False
        loads = orjson.loads
        try:
            for line in lines:
                if line[:6] == b"data: ":
                    payload = line[6:]
                elif line[:5] == b"data:":
                    payload = line[5:]
                else:
                    continue
                data = True
                try:
                    chunk = loads(payload)
                except orjson.JSONDecodeError:
                    if payload[:6] == b"[DONE]":
                        self.done = True
                        continue
                    chunk = None
                # A text delta alone: no usage, error or finish; no reasoning or tool call beside it
                # (a delta of the content and maybe its role: any other key goes the long way).
                if (
                    type(chunk) is dict
                    and (choices := chunk.get("choices"))
                    and type(choices) is list
                    and type(choice := choices[0]) is dict
                    and type(delta := choice.get("delta")) is dict
                    and ((width := len(delta)) == 1 or (width == 2 and "role" in delta))
                    and type(content := delta.get("content")) is str
                    and content
                    and kind is TextDelta
                    and size < MERGED_CHARS
                    and self.finish_reason is None
                    and not (chunk.get("usage") or chunk.get("error") or choice.get("finish_reason"))
                ):
                    run.append(content)
                    size += len(content)
                    continue
                if type(chunk) is not dict:
                    raise _malformed(payload, "malformed chunk")
                for event in self._events(chunk):
                    if type(event) is TextDelta or type(event) is ReasoningDelta:
                        if run and (type(event) is not kind or size >= MERGED_CHARS):
                            out.append(_joined(kind, run))
                            run, size = [], 0
                        kind = type(event)
                        run.append(event.content)
                        size += len(event.content)
                        continue
                    if run:
                        out.append(_joined(kind, run))
                        run, size = [], 0
                    out.append(event)
        except LLMError as exc:
            error = exc
        if data:
            progress()
        if run:
            out.append(_joined(kind, run))
        return out, error

    def _add_tool_calls(self, deltas: list[Any]) -> None:
        for position, delta in enumerate(deltas):
            call_id = delta.get("id")
            function = delta.get("function") or {}
            arguments = function.get("arguments")
            if arguments is not None and type(arguments) is not str:
                arguments = orjson.dumps(arguments).decode()  # a few servers send an object
            call = self._by_id.get(call_id) if call_id else None
            if call is not None:
                # The same call again: whole (a repeat) or cumulative arguments replace, a fragment
                # (providers that put the id on every delta) appends.
                if arguments:
                    sofar = "".join(call.parts)
                    if sofar and arguments.startswith(sofar):
                        call.parts = [arguments]
                    else:
                        call.parts.append(arguments)
                continue
            index = delta.get("index", position)
            call = self._by_index.get(index)
            if call is None or (call_id and call.call_id and call.call_id != call_id):
                # A new call; llama.cpp and some Ollama versions reuse index 0 for every call.
                call = _Call()
                self._calls.append(call)
                self._by_index[index] = call
            if call_id:
                call.call_id = call_id
                self._by_id[call_id] = call
            name = function.get("name")
            if name and not call.name:
                call.name = name
            if arguments:
                call.parts.append(arguments)

    def finish(self) -> tuple[ModelEvent, ...]:
        if self.finish_reason is None:
            raise LLMTruncated(detail="the stream ended without a finish_reason")
        events: list[ModelEvent] = [
            ToolCall(
                call_id=call.call_id or f"call_{random_hex()[:24]}",
                name=call.name,
                arguments="".join(call.parts) or "{}",
            )
            for call in self._calls
        ]
        if self.usage:
            events.append(
                Usage(
                    prompt_tokens=_count(self.usage.get("prompt_tokens")),
                    completion_tokens=_count(self.usage.get("completion_tokens")),
                    cached_tokens=_cached_tokens(self.usage),
                )
            )
        events.append(Finish(self.finish_reason, self.model))
        return tuple(events)

    def feed_completion(self, body: bytes) -> tuple[ModelEvent, ...]:
        """Events of a whole (non-streamed) `chat.completion` body."""
        completion = _json_object(body, "not a completion")
        if completion.get("error"):
            raise _stream_error(completion["error"])
        choices = completion.get("choices") or [{}]
        message = choices[0].get("message") or {}
        self.usage = completion.get("usage")
        self.model = completion["model"] if type(completion.get("model")) is str else None
        events: list[ModelEvent] = []
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning and type(reasoning) is str:
            events.append(ReasoningDelta(reasoning))
        if message.get("content") and type(message["content"]) is str:
            events.append(TextDelta(message["content"]))
        if message.get("tool_calls"):
            self._add_tool_calls(message["tool_calls"])
        self.finish_reason = choices[0].get("finish_reason")
        return (*events, *self.finish())


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    """The JSON object `raw` holds; `LLMUnavailable` saying `what` (and how `raw` starts) for
    anything else."""
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        found = None
    if type(found) is not dict:
        raise _malformed(raw, what)
    return found


def _malformed(raw: bytes, what: str) -> LLMUnavailable:
    """The model's error for a body or chunk that is not a JSON object: `what`, and how it starts."""
    return LLMUnavailable(detail=f"{what}: {raw[:100]!r}")


def _count(value: object) -> int:
    """A token count from a provider's usage: a non-negative int, 0 for anything else."""
    if type(value) is int:
        return max(value, 0)
    if type(value) is float:
        return max(int(value), 0)
    return 0


def _cached_tokens(usage: Mapping[str, Any]) -> int:
    """The prompt tokens read from the provider's cache: OpenAI's (and vLLM's, OpenRouter's)
    `prompt_tokens_details.cached_tokens`, or DeepSeek's `prompt_cache_hit_tokens`; 0 when the usage
    says neither (many providers send no details, or `null`)."""
    details = usage.get("prompt_tokens_details")
    if isinstance(details, Mapping) and details.get("cached_tokens") is not None:
        return _count(details.get("cached_tokens"))
    return _count(usage.get("prompt_cache_hit_tokens"))


def _stream_error(error: object) -> LLMUnavailable:
    detail = orjson.dumps(error).decode() if isinstance(error, dict | list) else str(error)
    return LLMUnavailable(
        "The language model failed mid-answer; try again shortly.", detail=f"error in stream: {detail}"[:300]
    )


def _joined(kind: type[TextDelta] | type[ReasoningDelta], run: list[str]) -> ModelEvent:
    return kind(run[0] if len(run) == 1 else "".join(run))
