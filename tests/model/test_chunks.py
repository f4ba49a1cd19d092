"""`Assembler.read`, sans I/O: the lines of one read give the events that feeding them one by one
(`Assembler.feed`) gives, each run of text or reasoning merged, whatever mix of chunks the read holds:
the in-line path for plain text chunks changes no event, no order and no state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from vernis.exceptions import LLMError, LLMUnavailable
from vernis.model.base import ModelEvent, ReasoningDelta, TextDelta
from vernis.model.chunks import MERGED_CHARS, Assembler


def line(body: Any, *, space: bool = True) -> bytes:
    return (b"data: " if space else b"data:") + orjson.dumps(body)


def chunk(delta: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": None}
    choice.update(extra.pop("choice", {}))
    return {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice], **extra}


# The chunks a read may hold, as providers send them.
KINDS: dict[str, Callable[[str], bytes]] = {
    "text": lambda text: line(chunk({"content": text})),
    "text, no space after data:": lambda text: line(chunk({"content": text}), space=False),
    "text with its role": lambda text: line(chunk({"role": "assistant", "content": text})),
    "text beside null fields": lambda text: line(
        chunk({"content": text, "refusal": None, "tool_calls": None})
    ),
    "text with null usage": lambda text: line(chunk({"content": text}, usage=None)),
    "empty text": lambda text: line(chunk({"content": ""})),
    "reasoning": lambda text: line(chunk({"reasoning_content": text})),
    "reasoning under its other name": lambda text: line(chunk({"reasoning": text})),
    "reasoning and text": lambda text: line(chunk({"reasoning_content": text, "content": text})),
    "a tool call's fragment": lambda text: line(
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": text}}]})
    ),
    "usage alone": lambda text: line({"id": "c", "choices": [], "usage": {"prompt_tokens": 3}}),
    "no choices": lambda text: line({"id": "c", "choices": []}),
    "text and the finish": lambda text: line(chunk({"content": text}, choice={"finish_reason": "stop"})),
    "text after the finish": lambda text: line(chunk({"content": text})),
    "a comment": lambda text: b": keep-alive",
    "an empty line": lambda text: b"",
    "done": lambda text: b"data: [DONE]",
}


def reference(assembler: Assembler, lines: list[bytes]) -> tuple[list[ModelEvent], LLMError | None]:
    """What `read` promises: each `data:` line fed on its own, runs of text or reasoning joined up
    to about `MERGED_CHARS`, an error ending the events."""
    out: list[ModelEvent] = []
    run: list[str] = []
    kind: type[TextDelta] | type[ReasoningDelta] = TextDelta
    error = None
    try:
        for raw in lines:
            if raw[:5] != b"data:":
                continue
            for event in assembler.feed(raw[5:]):
                if isinstance(event, TextDelta | ReasoningDelta):
                    if run and (type(event) is not kind or sum(map(len, run)) >= MERGED_CHARS):
                        out.append(kind("".join(run)))
                        run = []
                    kind = type(event)
                    run.append(event.content)
                    continue
                if run:
                    out.append(kind("".join(run)))
                    run = []
                out.append(event)
    except LLMError as exc:
        error = exc
    if run:
        out.append(kind("".join(run)))
    return out, error


def state(assembler: Assembler) -> tuple[Any, ...]:
    try:
        ending: Any = assembler.finish()
    except LLMError as exc:
        ending = type(exc)
    return assembler.done, assembler.finish_reason, assembler.usage, assembler.model, ending


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(KINDS)), st.text(alphabet="ab é\n", min_size=1, max_size=300)),
        max_size=24,
    )
)
@example([("text", "a" * 100)] * 12 + [("reasoning", "b" * 600), ("text with its role", "c" * 600)])
def test_a_read_gives_the_events_of_its_lines_fed_one_by_one(read: list[tuple[str, str]]) -> None:
    """Any mix of text, reasoning, tool-call, usage, finish and other chunks in one read: `read` gives the events (and leaves the state) that feeding each line to `feed` and merging the runs gives."""
    lines = [KINDS[kind](text) for kind, text in read]
    expected_assembler, assembler = Assembler(), Assembler()
    expected = reference(expected_assembler, lines)

    got = assembler.read(lines, lambda: None)

    assert got[0] == expected[0]
    assert repr(got[1]) == repr(expected[1])
    assert state(assembler) == state(expected_assembler)


def test_a_chunk_that_is_not_an_object_fails_the_read_after_the_text_before_it() -> None:
    """A malformed chunk after text in the same read: the text comes out, then the error."""
    lines = [KINDS["text"]("Hello"), b"data: [1, 2]", KINDS["text"]("lost")]

    events, error = Assembler().read(lines, lambda: None)

    assert events == [TextDelta("Hello")]
    assert isinstance(error, LLMUnavailable)
    assert "malformed chunk" in error.detail


@pytest.mark.parametrize(
    ("lines", "calls"),
    [
        ([KINDS["text"]("a"), KINDS["text"]("b"), KINDS["reasoning"]("c")], 1),
        ([b": keep-alive", b""], 0),
        ([], 0),
    ],
)
def test_progress_is_called_once_for_a_read_with_data(lines: list[bytes], calls: int) -> None:
    """The stall watch hears of a read once if it held any `data:` line, and not for comments alone."""
    seen: list[None] = []

    Assembler().read(lines, lambda: seen.append(None))

    assert len(seen) == calls
