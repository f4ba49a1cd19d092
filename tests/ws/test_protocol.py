"""The wire protocol as plain code: parsing commands, encoding events."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest

from vernis.exceptions import InvalidMessage, MessageTooLong
from vernis.ws import protocol


def test_user_message_parses_with_page_context() -> None:
    """A user_message with page context and a client id parses into its typed command."""
    command = protocol.parse_command(
        orjson.dumps(
            {
                "type": "user_message",
                "content": "hello",
                "client_message_id": "c1",
                "page_context": {"route": "/contacts/abc", "entity_type": "contact", "entity_id": "abc"},
            }
        )
    )
    assert isinstance(command, protocol.UserMessage)
    assert command.content == "hello"
    assert command.page_context == protocol.PageContext(
        route="/contacts/abc", entity_type="contact", entity_id="abc"
    )


@pytest.mark.parametrize(
    ("frame", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"content": "x"}', "string `type`"),
        (b'{"type": "launch_rockets"}', "Unknown command type 'launch_rockets'"),
        (b'{"type": "load_conversation", "conversation_id": "nope"}', "conversation_id"),
        (
            b'{"type": "feedback", "message_id": "00000000-0000-0000-0000-000000000000", "rating": "meh"}',
            "rating",
        ),
        (b'{"type": "ping", "extra": 1}', "extra"),
        (b'{"type": "user_message", "content": "   "}', "empty"),
        (
            b'{"type": "rename_conversation", "conversation_id": "00000000-0000-0000-0000-000000000000", "title": ""}',
            "title",
        ),
    ],
)
def test_bad_frames_are_invalid_message(frame: bytes, fragment: str) -> None:
    """Malformed JSON, unknown types and bad fields raise InvalidMessage with a message naming the problem."""
    with pytest.raises(InvalidMessage) as info:
        protocol.parse_command(frame)
    assert info.value.code == "invalid_message"
    assert fragment in info.value.public_message


def test_content_over_8000_chars_is_message_too_long() -> None:
    """Content of 8,001 characters is refused with message_too_long; 8,000 is accepted."""
    protocol.parse_command(orjson.dumps({"type": "user_message", "content": "x" * 8000}))
    with pytest.raises(MessageTooLong):
        protocol.parse_command(orjson.dumps({"type": "user_message", "content": "x" * 8001}))


def test_every_command_type_parses() -> None:
    """Each of the ten client commands of SPEC §3 parses from its minimal frame."""
    some_id = str(uuid.uuid4())
    frames: list[dict[str, Any]] = [
        {"type": "user_message", "content": "hi"},
        {"type": "new_conversation"},
        {"type": "list_conversations", "before": "cursor"},
        {"type": "load_conversation", "conversation_id": some_id, "after_seq": 3},
        {"type": "stop"},
        {"type": "confirm_tool", "confirmation_id": some_id, "approved": True},
        {"type": "rename_conversation", "conversation_id": some_id, "title": " Renamed "},
        {"type": "delete_conversation", "conversation_id": some_id},
        {"type": "feedback", "message_id": some_id, "rating": "up", "comment": "good"},
        {"type": "ping"},
    ]
    parsed = [protocol.parse_command(orjson.dumps(frame)) for frame in frames]
    assert [command.type for command in parsed] == [frame["type"] for frame in frames]
    rename = parsed[6]
    assert isinstance(rename, protocol.RenameConversation)
    assert rename.title == "Renamed"


def test_review_commands_parse_and_bound_the_note() -> None:
    """list_reviews and review_tool (SPEC §23) parse; the note is stripped, left out when absent, and over 2,000 characters is invalid_message."""
    some_id = str(uuid.uuid4())
    listed = protocol.parse_command(orjson.dumps({"type": "list_reviews"}))
    assert isinstance(listed, protocol.ListReviews)
    review = protocol.parse_command(
        orjson.dumps(
            {"type": "review_tool", "review_id": some_id, "approved": False, "note": "  not this one "}
        )
    )
    assert isinstance(review, protocol.ReviewTool)
    assert (str(review.review_id), review.approved, review.note) == (some_id, False, "not this one")
    bare = protocol.parse_command(
        orjson.dumps({"type": "review_tool", "review_id": some_id, "approved": True})
    )
    assert isinstance(bare, protocol.ReviewTool)
    assert bare.note is None
    with pytest.raises(InvalidMessage):
        protocol.parse_command(
            orjson.dumps({"type": "review_tool", "review_id": some_id, "approved": True, "note": "x" * 2001})
        )
