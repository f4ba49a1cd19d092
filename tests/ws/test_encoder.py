"""The one encoder: every internal event becomes the protocol v1 frame its wire model describes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import orjson
import pytest

from vernis.conversation import events
from vernis.conversation.store import ConversationInfo, StoredMessage
from vernis.ws import protocol
from vernis.ws.encoder import encode, to_wire

CONVERSATION = uuid.uuid4()
MESSAGE = uuid.uuid4()
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

EVERY_EVENT: list[events.Event] = [
    events.ConversationLoaded(CONVERSATION, "Hello", rolled_over_from=uuid.uuid4(), resumed=True),
    events.HistoryMessage(
        StoredMessage(MESSAGE, CONVERSATION, 0, "assistant", "Hi", [{"call_id": "c"}], "complete", None, WHEN)
    ),
    events.HistoryEnd(CONVERSATION),
    events.ConversationCreated(CONVERSATION),
    events.ConversationList(
        [ConversationInfo(CONVERSATION, uuid.uuid4(), uuid.uuid4(), "T", None, 3, WHEN, WHEN)],
        next_before="x",
    ),
    events.AnswerStarted(CONVERSATION, MESSAGE),
    events.TextDelta("Hel"),
    events.ToolCallStarted("call_1", "search_contacts", {"query": "Jane"}),
    events.ToolCallCompleted("call_1", "search_contacts", "ok", {"ok": True, "data": []}),
    events.ConfirmationRequired(uuid.uuid4(), "call_2", "create_contact", {"action": "Create"}),
    events.AnswerEnded(CONVERSATION, MESSAGE, stopped=True),
    events.TitleUpdated(CONVERSATION, "Jane's calls"),
    events.ErrorOccurred("rate_limited", "Slow down.", retry_after_ms=1500),
    events.Pong(),
]


@pytest.mark.parametrize("event", EVERY_EVENT, ids=lambda event: type(event).__name__)
def test_every_event_round_trips_through_its_wire_model(event: events.Event) -> None:
    """Each internal event encodes to a frame the wire models decode, with its seq when it belongs to a conversation."""
    frame = encode(event, 41)
    decoded = protocol.decode_event(frame)
    assert orjson.loads(frame)["type"] == decoded.type
    if isinstance(decoded, protocol.Pong | protocol.ConversationList):
        assert "seq" not in orjson.loads(frame)
    else:
        assert decoded.seq == 41  # type: ignore[union-attr]


def test_fields_map_onto_the_wire_names() -> None:
    """Internal names become the protocol's: a stored message is a history_message with message_id, role and status."""
    (history,) = [e for e in EVERY_EVENT if isinstance(e, events.HistoryMessage)]
    assert orjson.loads(encode(history)) == {
        "type": "history_message",
        "message_id": str(MESSAGE),
        "role": "assistant",
        "content": "Hi",
        "tool_calls": [{"call_id": "c"}],
        "status": "complete",
        "created_at": "2026-01-02T03:04:05Z",
    }
    started = orjson.loads(encode(events.AnswerStarted(CONVERSATION, MESSAGE), 9))
    assert started == {
        "type": "assistant_start",
        "conversation_id": str(CONVERSATION),
        "message_id": str(MESSAGE),
        "seq": 9,
    }


def test_absent_fields_are_left_out_and_required_nulls_kept() -> None:
    """Unset optional fields are omitted; a pending conversation's null id stays."""
    assert orjson.loads(encode(events.ErrorOccurred("not_found", "No such conversation."))) == {
        "type": "error",
        "code": "not_found",
        "message": "No such conversation.",
    }
    assert orjson.loads(encode(events.ConversationLoaded(None, None))) == {
        "type": "conversation_loaded",
        "conversation_id": None,
        "title": None,
    }
    assert orjson.loads(encode(events.HistoryEnd(None))) == {"type": "history_end", "conversation_id": None}


def test_hot_path_delta_matches_the_model() -> None:
    """The text_delta frame built without a model decodes to the same event as the model, with and without seq."""
    assert protocol.decode_event(encode(events.TextDelta("Hel"), 41)) == protocol.TextDelta(
        content="Hel", seq=41
    )
    assert protocol.decode_event(encode(events.TextDelta("lo"))) == protocol.TextDelta(content="lo")


@pytest.mark.parametrize(
    "event",
    [
        events.AnswerStarted(CONVERSATION, MESSAGE),
        events.AnswerStarted(CONVERSATION, MESSAGE, resumed=True),
        events.AnswerStarted(CONVERSATION, MESSAGE, resumed=False),
        events.AnswerEnded(CONVERSATION, MESSAGE, stopped=False),
        events.AnswerEnded(CONVERSATION, MESSAGE, stopped=True),
        events.AnswerEnded(CONVERSATION, MESSAGE, stopped=False, model="backup-model"),
    ],
)
@pytest.mark.parametrize("seq", [None, 0, 1_732_000_000_000_001])
def test_an_answers_start_and_end_built_directly_are_the_models_frame(
    event: events.Event, seq: int | None
) -> None:
    """assistant_start and assistant_end, built without their models, are byte for byte what the models dump (resumed left out when absent, seq when given)."""
    data = to_wire(event).model_dump(mode="json")
    if seq is not None:
        data["seq"] = seq
    assert encode(event, seq) == orjson.dumps(data).decode()


def test_an_error_code_outside_the_protocol_fails_loudly() -> None:
    """An error event with a code the protocol does not define cannot be encoded (never sent as garbage)."""
    with pytest.raises(ValueError, match="code"):
        encode(events.ErrorOccurred("made_up", "?"))
