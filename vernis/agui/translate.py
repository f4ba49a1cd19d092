"""Vernis's conversation events as AG-UI events (SPEC §20): sans-I/O, one `RunTranslator` per run.

The translator reads the events of a conversation as its subscribers receive them (protocol v1
frames, decoded: `{"type": ..., "seq": ...}`, the same on every instance and in a replay) and
answers with the `ag-ui-protocol` models they become. Its state is the run's: the text message open,
the approvals and questions the run ends waiting for (interrupts), the client tool calls it leaves
to the page, the error it ends with.

| Vernis event | AG-UI events |
|---|---|
| `assistant_start` | (the message id of the text that follows) |
| `text_delta` | `TEXT_MESSAGE_START` (first of a text), `TEXT_MESSAGE_CONTENT` |
| `reasoning_delta` | `REASONING_START`, `REASONING_MESSAGE_START` (first), `REASONING_MESSAGE_CONTENT` |
| `tool_call_started` | `TOOL_CALL_START`, `_ARGS` (arguments as JSON), `_END` (not for page tools) |
| `tool_call_completed` | `TOOL_CALL_RESULT` (not while it awaits approval, nor for the page's tools) |
| `confirmation_required` | an interrupt `tool_approval` of the run's `RUN_FINISHED` |
| `question_required` | an interrupt `input_required`, with a `responseSchema` |
| `client_tool_call` | `TOOL_CALL_START/ARGS/END` by the id the page answers; the run ends |

A run that hands calls to the page ends with a plain `RUN_FINISHED` (success): the calls left
unanswered are the stream's, which 1.x clients derive; `pendingToolCallIds` is left out because the
0.x client CopilotKit pins refuses it.
| `error` | `RUN_ERROR` with the Vernis error code, once the answer ended |
| `assistant_end` | closes the text; the run ends (`RUN_FINISHED`, `cancelled` when stopped) |

An SSE event is `id: <seq>` (the seq of the Vernis event it comes from) and `data: <json>`, ended by
an empty line (`\\n\\n`); optional fields without a value are left out, never `null`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from ag_ui.core import (
    BaseEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

__all__ = ["PROTOCOL_VERSION", "RunTranslator", "question_schema", "sse"]

PROTOCOL_VERSION = "1.0"

# The answer types of `ask_user` questions (SPEC §17) as JSON Schema.
_QUESTION_TYPES: dict[str, dict[str, Any]] = {
    "text": {"type": "string"},
    "number": {"type": "number"},
    "date": {"type": "string", "format": "date"},
    "boolean": {"type": "boolean"},
}


def sse(event: BaseEvent, seq: int) -> str:
    """One SSE event: its id (`seq`, what `Last-Event-ID` names on a reconnect) and its JSON."""
    return f"id: {seq}\ndata: {event.model_dump_json(by_alias=True)}\n\n"


def question_schema(questions: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON Schema of the answers an `ask_user` question expects: `{answers: {id: value}}`."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for question in questions:
        kind = str(question.get("type", "text"))
        options = [str(option) for option in question.get("options") or ()]
        schema: dict[str, Any]
        if kind == "choice":
            schema = {"type": "string", "enum": options}
        elif kind == "multi_choice":
            schema = {"type": "array", "items": {"type": "string", "enum": options}}
        else:
            schema = dict(_QUESTION_TYPES.get(kind, {"type": "string"}))
        schema["title"] = str(question.get("label", question.get("id", "")))
        properties[str(question["id"])] = schema
        if question.get("required"):
            required.append(str(question["id"]))
    answers: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        answers["required"] = required
    return {"type": "object", "properties": {"answers": answers}, "required": ["answers"]}


class RunTranslator:
    """One run's translation. `feed` each Vernis event in seq order; once `done`, `finish()` is the
    run's last event."""

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        client_tools: frozenset[str] = frozenset(),
        seq: int = 0,
        *,
        versioned: bool = True,
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        # Whether the client said which protocol version it speaks: one that did not predates 1.0
        # (CopilotKit pins such a client), whose schema refuses the `cancelled` outcome.
        self.versioned = versioned
        # The seq of the last event translated: what the next SSE ids follow, and below which an
        # event is one the client has (`frame` drops it).
        self.seq = seq
        # The page's tools: their calls are told when the page is asked (`client_tool_call`), by the
        # id its result must name, and their results come from the page itself.
        self.client_tools = client_tools
        self.done = False
        self._message_id: str | None = None
        self._segment = 0
        self._text: str | None = None
        self._reasoning: str | None = None
        self._interrupts: list[Interrupt] = []
        self._pending: list[str] = []
        self._error: tuple[str, str] | None = None
        self._stopped = False
        self._answering = False
        self._awaiting: set[str] = set()
        # The run resumed approvals: the answer that reads their outcome follows (`Run.stream`).
        self.resumed_writes = False
        # The answer whose end ended the run (its message id), if one did.
        self.ended: str | None = None

    def started(self) -> RunStartedEvent:
        return RunStartedEvent(
            thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION
        )

    def await_calls(self, call_ids: set[str]) -> None:
        """The run resumed approvals: it ends once these calls completed (their writes ran or were
        rejected), unless an answer started meanwhile (then at its end)."""
        self._awaiting |= call_ids
        self.resumed_writes = True

    def frame(self, event: Mapping[str, Any]) -> str:
        """The SSE text of one Vernis event in seq order: "" for one at or below `seq` (sent before,
        or published before the run subscribed). A text delta, the event of every token, is encoded
        directly, the same bytes as its model's (tests/agui/test_translate.py compares them)."""
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq <= self.seq:
                return ""
            self.seq = seq
        if event.get("type") == "text_delta" and self._text is not None and self._reasoning is None:
            content = event["content"]
            if content:
                data = orjson.dumps(
                    {"type": "TEXT_MESSAGE_CONTENT", "messageId": self._text, "delta": content}
                )
                return f"id: {self.seq}\ndata: {data.decode()}\n\n"
        return "".join(sse(translated, self.seq) for translated in self.feed(event))

    def feed(self, event: Mapping[str, Any]) -> list[BaseEvent]:
        """The AG-UI events of one Vernis event (decoded); unknown and unrelated types give none."""
        kind = event.get("type")
        if kind == "text_delta":
            return self._text_delta(str(event["content"]))
        if kind == "reasoning_delta":
            return self._reasoning_delta(str(event["content"]))
        out = self._close_reasoning()
        if kind == "assistant_start":
            self._message_id = str(event["message_id"])
            self._segment = 0
            self._answering = True
        elif kind == "tool_call_started":
            if event.get("tool_name") not in self.client_tools:
                out += self._close_text()
                out += self._call(event)
        elif kind == "tool_call_completed":
            if (
                event.get("status") != "needs_confirmation"
                and event.get("tool_name") not in self.client_tools
            ):
                call_id = str(event["call_id"])
                out.append(
                    ToolCallResultEvent(
                        message_id=f"{call_id}:{event.get('seq', 0)}",
                        tool_call_id=call_id,
                        content=orjson.dumps(event.get("result")).decode(),
                        role="tool",
                    )
                )
                if call_id in self._awaiting:
                    self._awaiting.discard(call_id)
                    self.done = not self._awaiting and not self._answering
        elif kind == "confirmation_required":
            self._interrupts.append(
                Interrupt(
                    id=str(event["confirmation_id"]),
                    reason="tool_approval",
                    tool_call_id=str(event["call_id"]),
                    message=f"Approve {event['tool_name']}?",
                    metadata={"preview": event.get("preview"), "toolName": event["tool_name"]},
                )
            )
        elif kind == "question_required":
            questions = list(event.get("questions") or ())
            self._interrupts.append(
                Interrupt(
                    id=str(event["question_id"]),
                    reason="input_required",
                    tool_call_id=str(event["call_id"]),
                    message=event.get("title") or None,
                    response_schema=question_schema(questions),
                    expires_at=event.get("expires_at") or None,
                    metadata={"questions": questions},
                )
            )
        elif kind == "client_tool_call":
            out += self._close_text()
            out += self._call(event)
            self._pending.append(str(event["call_id"]))
            self.done = True
        elif kind == "error":
            self._error = (str(event.get("code", "internal")), str(event.get("message", "")))
        elif kind == "assistant_end":
            out += self._close_text()
            self._stopped = bool(event.get("stopped"))
            self._answering = False
            self.ended = str(event.get("message_id"))
            self.done = True
        return out

    def reopen(self) -> list[BaseEvent]:
        """On a resumed stream (a new run for the client): the start events of the text or reasoning
        message left open, which the client continues (the same id: no second message)."""
        if self._text is not None:
            return [TextMessageStartEvent(message_id=self._text, role="assistant")]
        if self._reasoning is not None:
            return [
                ReasoningStartEvent(message_id=self._reasoning),
                ReasoningMessageStartEvent(message_id=self._reasoning, role="reasoning"),
            ]
        return []

    @property
    def pending(self) -> list[str]:
        """The calls the run left to the page: their results come in the next run's `tool` messages."""
        return list(self._pending)

    def _call(self, event: Mapping[str, Any]) -> list[BaseEvent]:
        call_id = str(event["call_id"])
        return [
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=str(event["tool_name"]),
                parent_message_id=self._message_id,
            ),
            ToolCallArgsEvent(tool_call_id=call_id, delta=orjson.dumps(event.get("arguments")).decode()),
            ToolCallEndEvent(tool_call_id=call_id),
        ]

    def finish(self) -> BaseEvent:
        """The run's last event: `RUN_ERROR` after an error, else `RUN_FINISHED` with its outcome."""
        if self._error is not None:
            code, message = self._error
            return RunErrorEvent(message=message, code=code)
        outcome: RunFinishedInterruptOutcome | RunFinishedCancelledOutcome | None
        if self._interrupts:
            outcome = RunFinishedInterruptOutcome(interrupts=self._interrupts)
        elif self._stopped and not self._pending and self.versioned:
            outcome = RunFinishedCancelledOutcome()
        else:
            outcome = None
        return RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome)

    def fail(self, code: str, message: str) -> RunErrorEvent:
        """The run ends on an error of its own (not one the answer published)."""
        self.done = True
        return RunErrorEvent(message=message, code=code)

    # --- text and reasoning -------------------------------------------------------------------

    def _text_delta(self, content: str) -> list[BaseEvent]:
        out = self._close_reasoning()
        if not content:
            return out
        if self._text is None:
            base = self._message_id or self.run_id
            # Text after a tool round is a new AG-UI message, as the client shows it.
            self._text = base if self._segment == 0 else f"{base}:{self._segment}"
            self._segment += 1
            out.append(TextMessageStartEvent(message_id=self._text, role="assistant"))
        out.append(TextMessageContentEvent(message_id=self._text, delta=content))
        return out

    def _close_text(self) -> list[BaseEvent]:
        if self._text is None:
            return []
        ended = TextMessageEndEvent(message_id=self._text)
        self._text = None
        return [ended]

    def _reasoning_delta(self, content: str) -> list[BaseEvent]:
        out = self._close_text()
        if not content:
            return out
        if self._reasoning is None:
            self._reasoning = f"{self._message_id or self.run_id}:reasoning:{self._segment}"
            out += [
                ReasoningStartEvent(message_id=self._reasoning),
                ReasoningMessageStartEvent(message_id=self._reasoning, role="reasoning"),
            ]
        out.append(ReasoningMessageContentEvent(message_id=self._reasoning, delta=content))
        return out

    def _close_reasoning(self) -> list[BaseEvent]:
        if self._reasoning is None:
            return []
        reasoning, self._reasoning = self._reasoning, None
        return [ReasoningMessageEndEvent(message_id=reasoning), ReasoningEndEvent(message_id=reasoning)]
