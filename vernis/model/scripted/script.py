"""What the scripted model answers: a `Reply`, the provider `Quirk`s it imitates, the `Fault` it injects.

Everything here is plain data and pure functions (no sockets): `render_stream()` turns a `Reply` into
the exact SSE frames an OpenAI-compatible server sends, and `render_completion()` into the body of a
non-streamed `chat.completion`. The server (`vernis.model.scripted.server`) only writes them out, applying
the fault's timing.

Stream layout (OpenAI's): a first chunk with `role` and empty content, the reasoning chunks, the text
chunks, the tool calls (per call: one chunk with `id`, `type` and `name`, then argument fragments,
all by `index`), one chunk with `finish_reason` and an empty delta, then a usage chunk with
`choices: []` when the request asked for `stream_options.include_usage`, then `data: [DONE]`.
Fault positions (`after=N`) count `data:` frames, the role chunk included.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "DONE_FRAME",
    "Fault",
    "Quirk",
    "Reply",
    "ScriptedToolCall",
    "render_completion",
    "render_stream",
    "split_words",
]

DONE_FRAME = b"data: [DONE]\n\n"
# OpenRouter keeps idle streams alive with exactly this comment.
COMMENT_FRAME = b": OPENROUTER PROCESSING\n\n"
DEFAULT_REASONING = "Thinking it over before answering."


class Quirk(enum.Flag):
    """Deviations from OpenAI's stream that real providers send; combine with `|`."""

    NONE = 0
    # Ollama: every tool call complete (id, name, whole arguments) in a single chunk.
    WHOLE_TOOL_CALLS = enum.auto()
    # Each tool call is delivered a second time, whole, under the same call id.
    REPEAT_TOOL_CHUNK = enum.auto()
    # OpenRouter: the finish chunk (here carrying the last text fragment, as vLLM does) comes twice.
    DOUBLE_FINISH = enum.auto()
    # OpenRouter: `: OPENROUTER PROCESSING` comment lines before and between chunks.
    COMMENT_LINES = enum.auto()
    # No usage chunk even though the request asked for one (many local servers).
    NO_USAGE = enum.auto()
    # Reasoning text before the answer, alternating `delta.reasoning_content` (DeepSeek, vLLM) and
    # `delta.reasoning` (OpenRouter) so one stream exercises both names.
    REASONING = enum.auto()
    # Some llama.cpp builds (with tools): a whole `chat.completion` JSON body even for `stream: true`.
    IGNORES_STREAM = enum.auto()
    # Reasoning and text interleaved, chunk by chunk (some providers think again mid-answer), the
    # reasoning in both fields' names as with REASONING.
    INTERLEAVED_REASONING = enum.auto()


@dataclass(frozen=True, slots=True)
class Fault:
    """An upstream failure. Build one with the class methods; `after` counts `data:` frames."""

    # Answer with this HTTP status (and an OpenAI error body) instead of streaming.
    status: int | None = None
    retry_after: float | None = None
    # Send an `{"error": {...}}` object under HTTP 200 after this many frames, then end the stream.
    error_after: int | None = None
    # Stop sending after this many frames, for `stall_for` seconds, keeping the connection open.
    stall_after: int | None = None
    stall_for: float = 3600.0
    # While stalled, send a `:` comment line this often (a keep-alive that is not a chunk).
    keepalive: float | None = None
    # Drop the connection after this many frames, mid-body.
    cut_after: int | None = None
    # Send no finish_reason and no usage: the stream just ends (with `[DONE]`).
    no_finish: bool = False

    @classmethod
    def http(cls, status: int, *, retry_after: float | None = None) -> Fault:
        return cls(status=status, retry_after=retry_after)

    @classmethod
    def error_mid_stream(cls, after: int = 2) -> Fault:
        return cls(error_after=after)

    @classmethod
    def stall(cls, after: int = 2, *, seconds: float = 3600.0, keepalive: float | None = None) -> Fault:
        return cls(stall_after=after, stall_for=seconds, keepalive=keepalive)

    @classmethod
    def cut(cls, after: int = 2) -> Fault:
        return cls(cut_after=after)

    @classmethod
    def truncated(cls) -> Fault:
        return cls(no_finish=True)


@dataclass(frozen=True, slots=True)
class ScriptedToolCall:
    name: str
    # JSON text, or a mapping serialized for you.
    arguments: str | Mapping[str, Any] = "{}"
    call_id: str | None = None

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return orjson.dumps(self.arguments).decode()


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer. `text` as a string is streamed word by word; a sequence, chunk by chunk."""

    text: str | Sequence[str] = ""
    tool_calls: Sequence[ScriptedToolCall] = ()
    # None: "tool_calls" when there are tool calls, else "stop".
    finish_reason: str | None = None
    # (prompt_tokens, completion_tokens); None: a deterministic estimate.
    usage: tuple[int, int] | None = None
    # Of the prompt tokens, those read from a prompt cache: sent as
    # `usage.prompt_tokens_details.cached_tokens`; None: no details (the model's prefix cache, when
    # it has one, may say).
    cached_tokens: int | None = None
    reasoning: str | Sequence[str] = ""
    quirks: Quirk = Quirk.NONE
    fault: Fault | None = None
    # Seconds between frames; None: the model's default.
    chunk_delay: float | None = None
    # Argument fragment size when tool calls are split across chunks.
    argument_chunk: int = 8
    # Frames written together (one ASGI send, so mostly one TCP segment), as a server under load or
    # a fast network coalesces them; the benchmark uses it to keep the server from being the limit.
    frames_per_write: int = 1
    # Extra top-level fields of every chunk (e.g. "system_fingerprint").
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def text_chunks(self) -> list[str]:
        return split_words(self.text) if isinstance(self.text, str) else list(self.text)

    @property
    def full_text(self) -> str:
        return "".join(self.text_chunks)

    @property
    def reasoning_chunks(self) -> list[str]:
        if isinstance(self.reasoning, str):
            reasoning = self.reasoning or (DEFAULT_REASONING if Quirk.REASONING in self.quirks else "")
            return split_words(reasoning)
        return list(self.reasoning)

    @property
    def resolved_finish_reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


def split_words(text: str) -> list[str]:
    """Split into word-sized chunks that concatenate back to `text` exactly."""
    return re.findall(r"\s*\S+|\s+$", text)


def estimate_prompt_tokens(body: Mapping[str, Any]) -> int:
    """A deterministic stand-in for a tokenizer: one token per whitespace-separated word."""
    count = 0
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            count += len(content.split()) + 1
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    count += len(part["text"].split())
            count += 1
    return count


def _call_id(call: ScriptedToolCall, position: int, completion_id: str) -> str:
    return call.call_id or f"call_{completion_id[-8:]}_{position}"


def _usage(reply: Reply, body: Mapping[str, Any], completion_tokens: int) -> dict[str, Any]:
    if reply.usage is not None:
        prompt, completion = reply.usage
    else:
        prompt, completion = estimate_prompt_tokens(body), completion_tokens
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {
            "cached_tokens": min(reply.cached_tokens, prompt),
            "audio_tokens": 0,
        }
    return usage


def render_stream(
    reply: Reply, body: Mapping[str, Any], *, completion_id: str, created: int, model: str
) -> list[bytes]:
    """The SSE frames of `reply` as answer to the request `body`, quirks applied, faults not.

    Comment frames (`:` lines) are included; the caller applies the fault positions to the
    `data:` frames only.
    """
    quirks = reply.quirks
    base: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        **reply.extra,
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **fields: Any) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**base, "choices": [choice], **fields}

    chunks: list[dict[str, Any]] = [chunk({"role": "assistant", "content": "", "refusal": None})]
    both_names = Quirk.REASONING in quirks or Quirk.INTERLEAVED_REASONING in quirks
    thoughts = [
        chunk({"reasoning" if both_names and number % 2 else "reasoning_content": piece})
        for number, piece in enumerate(reply.reasoning_chunks)
    ]
    text_chunks = reply.text_chunks
    # vLLM sends the last token together with finish_reason; DOUBLE_FINISH repeats that chunk.
    last_text = text_chunks.pop() if Quirk.DOUBLE_FINISH in quirks and text_chunks else None
    texts = [chunk({"content": piece}) for piece in text_chunks]
    if Quirk.INTERLEAVED_REASONING in quirks:
        for position in range(max(len(thoughts), len(texts))):
            chunks.extend(thoughts[position : position + 1])
            chunks.extend(texts[position : position + 1])
    else:
        chunks.extend(thoughts)
        chunks.extend(texts)

    completion_tokens = len(reply.reasoning_chunks) + len(reply.text_chunks)
    whole_calls: list[dict[str, Any]] = [
        {
            "index": position,
            "id": _call_id(call, position, completion_id),
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json},
        }
        for position, call in enumerate(reply.tool_calls)
    ]
    if Quirk.WHOLE_TOOL_CALLS in quirks and whole_calls:
        chunks.append(chunk({"tool_calls": whole_calls}))
        if Quirk.REPEAT_TOOL_CHUNK in quirks:
            chunks.append(chunk({"tool_calls": whole_calls}))
        completion_tokens += len(whole_calls)
    else:
        for whole in whole_calls:
            position, function = whole["index"], whole["function"]
            head = {**whole, "function": {"name": function["name"], "arguments": ""}}
            chunks.append(chunk({"tool_calls": [head]}))
            arguments: str = function["arguments"]
            step = max(1, reply.argument_chunk)
            for start in range(0, len(arguments), step):
                fragment = {"index": position, "function": {"arguments": arguments[start : start + step]}}
                chunks.append(chunk({"tool_calls": [fragment]}))
                completion_tokens += 1
            if Quirk.REPEAT_TOOL_CHUNK in quirks:
                chunks.append(chunk({"tool_calls": [whole]}))

    usage = _usage(reply, body, completion_tokens)
    if not (reply.fault and reply.fault.no_finish):
        finish_delta = {} if last_text is None else {"content": last_text}
        finish = chunk(finish_delta, reply.resolved_finish_reason)
        chunks.append(finish)
        if Quirk.DOUBLE_FINISH in quirks:
            chunks.append(finish)
        options = body.get("stream_options")
        include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        if include_usage and Quirk.NO_USAGE not in quirks:
            chunks.append({**base, "choices": [], "usage": usage})

    frames = [b"data: " + orjson.dumps(item) + b"\n\n" for item in chunks]
    frames.append(DONE_FRAME)
    if Quirk.COMMENT_LINES in quirks:
        with_comments = [COMMENT_FRAME]
        for frame in frames:
            with_comments.append(frame)
            with_comments.append(COMMENT_FRAME)
        frames = with_comments
    return frames


def render_completion(
    reply: Reply, body: Mapping[str, Any], *, completion_id: str, created: int, model: str
) -> dict[str, Any]:
    """The non-streamed `chat.completion` body for `reply` (quirks and mid-stream faults do not apply)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.full_text or None, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id(call, position, completion_id),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for position, call in enumerate(reply.tool_calls)
        ]
    completion_tokens = len(reply.text_chunks) + len(reply.tool_calls)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": reply.resolved_finish_reason}
        ],
        "usage": _usage(reply, body, completion_tokens),
    }
