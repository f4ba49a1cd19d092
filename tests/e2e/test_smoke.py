"""First exchange end to end: created, streamed, stored, titled, replayed on reconnect."""

from __future__ import annotations

from tests.fixtures.server import Vernis, text_of, types_of


async def test_first_message_is_created_streamed_stored_titled_and_replayed(vernis: Vernis) -> None:
    """A new member's first message creates the conversation, streams the answer, titles it, and a reconnect replays both messages."""
    vernis.scripted.add("Hello Priya, how can I help?", match="hello")
    async with vernis.connect() as client:
        opening = await client.expect("conversation_loaded", "history_end")
        assert opening[0]["conversation_id"] is None
        events = await client.answer("hello there")
        kinds = types_of(events)
        assert kinds[0] == "conversation_created"
        assert kinds[1] == "assistant_start"
        assert kinds[-1] == "assistant_end"
        assert set(kinds[2:-1]) == {"text_delta"}
        conversation_id = events[0]["conversation_id"]
        assert text_of(events) == "Hello Priya, how can I help?"
        assert events[-1]["stopped"] is False
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(set(seqs))
        (title,) = await client.expect("title_updated")
        assert title["conversation_id"] == conversation_id
        assert 0 < len(title["title"]) <= 60

    async with vernis.connect() as client:
        loaded, user, assistant, end = await client.expect(
            "conversation_loaded", "history_message", "history_message", "history_end"
        )
        assert loaded["conversation_id"] == conversation_id
        assert loaded["title"] == title["title"]
        assert (user["role"], user["content"]) == ("user", "hello there")
        assert (assistant["role"], assistant["content"]) == ("assistant", "Hello Priya, how can I help?")
        assert assistant["status"] == "complete"
        assert end["seq"] >= seqs[-1]
