"""Showing a conversation on a session in process (vernis.session.loading): history replay, joining
an answer in flight, resuming after a seq; and `resume_events` on its own."""

from __future__ import annotations

import uuid
from typing import Any

from tests.session.conftest import App, Connect, Tab
from vernis.conversation import events
from vernis.conversation.store import ConversationInfo
from vernis.hub.base import HubEvent
from vernis.model.scripted import Reply
from vernis.session.loading import load_conversation, resume_events
from vernis.session.send import send_user_message

WORDS = " ".join(f"word{n}" for n in range(40))


def text(received: list[dict[str, Any]]) -> str:
    return "".join(event["content"] for event in received if event["type"] == "text_delta")


async def answered(tab: Tab, content: str) -> list[dict[str, Any]]:
    """`content` sent and answered, through the first exchange's title."""
    await send_user_message(tab.session, content, None, None)
    received = await tab.until("assistant_end")
    return received + await tab.until("title_updated")


async def shown(tab: Tab) -> ConversationInfo:
    conversation = tab.session.conversation
    assert conversation is not None
    return conversation


async def test_a_plain_load_replays_the_history_up_to_its_seq(app: App, connect: Connect) -> None:
    """Loading a conversation sends conversation_loaded (its title), one history_message per stored message with its text, then history_end carrying the seq the history is current to; the session shows it."""
    app.script("Fine, thanks.", "how are you")
    tab = await connect()
    received = await answered(tab, "how are you?")
    conversation = await shown(tab)
    other = await connect()

    await load_conversation(other.session, conversation)

    loaded, user, answer, end = other.rest()
    title = received[-1]["title"]
    assert (loaded["type"], loaded["conversation_id"], loaded["title"]) == (
        "conversation_loaded",
        str(conversation.id),
        title,
    )
    assert (user["type"], user["role"], user["content"]) == ("history_message", "user", "how are you?")
    assert (answer["role"], answer["content"], answer["status"]) == ("assistant", "Fine, thanks.", "complete")
    assert answer["message_id"] == received[1]["message_id"]
    assert end == {"type": "history_end", "conversation_id": str(conversation.id), "seq": received[-1]["seq"]}
    assert other.session.conversation is not None
    assert other.session.conversation.id == conversation.id


async def test_a_load_mid_answer_joins_it_without_losing_or_doubling_text(app: App, connect: Connect) -> None:
    """A session loading the conversation while its answer streams gets the history without that answer, then assistant_start marked resumed with the text so far in one delta, then the live rest: the same text as the asking session."""
    app.script(Reply(WORDS, chunk_delay=0.01), "a long one")
    tab = await connect()
    await send_user_message(tab.session, "a long one", None, None)
    await tab.until("text_delta")
    await tab.until("text_delta")
    other = await connect()

    await load_conversation(other.session, await shown(tab))
    joined = await other.until("assistant_end")

    asked = await tab.until("assistant_end")
    kinds = [event["type"] for event in joined]
    assert kinds[:4] == ["conversation_loaded", "history_message", "history_end", "assistant_start"]
    assert joined[1]["role"] == "user"
    assert joined[3]["resumed"] is True
    assert joined[3]["message_id"] == asked[-1]["message_id"]
    assert joined[4]["type"] == "text_delta"
    assert text(joined) == WORDS
    seqs = [event["seq"] for event in joined[2:]]
    assert seqs == sorted(set(seqs))


async def test_a_resume_inside_the_replay_window_sends_exactly_the_missed_events(
    app: App, connect: Connect
) -> None:
    """With after_seq the hub still holds, the load says resumed and sends exactly the events after that seq, as first sent, and no history."""
    app.script(Reply(["one", " two", " three", " four"], chunk_delay=0.05), "count")
    tab = await connect()
    received = await answered(tab, "count to four")
    cut = next(event for event in received if event["type"] == "text_delta")
    other = await connect()

    await load_conversation(other.session, await shown(tab), after_seq=cut["seq"])

    loaded, *missed = other.rest()
    assert loaded == {
        "type": "conversation_loaded",
        "conversation_id": str((await shown(tab)).id),
        "title": received[-1]["title"],
        "resumed": True,
    }
    assert missed == [event for event in received if event.get("seq", 0) > cut["seq"]]
    assert text(missed) == " two three four"


async def test_a_resume_the_hub_cannot_serve_is_a_plain_load_saying_so(app: App, connect: Connect) -> None:
    """An after_seq beyond what the hub holds (another instance, a restart) gets the whole history, its conversation_loaded saying resumed false so the client redraws."""
    tab = await connect()
    received = await answered(tab, "hello")
    other = await connect()

    await load_conversation(other.session, await shown(tab), after_seq=received[-1]["seq"] + 1_000)

    replayed = other.rest()
    assert replayed[0]["type"] == "conversation_loaded"
    assert replayed[0]["resumed"] is False
    assert [event["type"] for event in replayed[1:]] == ["history_message", "history_message", "history_end"]


def published(seq: int, event: events.Event) -> HubEvent:
    return HubEvent(seq=seq, frame=f"frame {seq}", event=event, at=0.0)


def test_resume_events_merge_text_mark_the_start_resumed_and_stop_at_upto() -> None:
    """An answer's published events for a joining socket: its start marked resumed (encoded anew), each run of deltas merged into one (encoded anew, with the run's last seq), other events as published, nothing after `upto`."""
    conversation_id, message_id = uuid.uuid4(), uuid.uuid4()
    start = events.AnswerStarted(conversation_id=conversation_id, message_id=message_id)
    tool = events.ToolCallStarted(call_id="c1", tool_name="search_contacts", arguments={})
    answer = [
        published(10, start),
        published(11, events.TextDelta("Let")),
        published(12, events.TextDelta(" me look.")),
        published(13, tool),
        published(14, events.TextDelta("Found")),
        published(15, events.TextDelta(" her.")),
        published(16, events.TextDelta(" Later.")),
    ]

    resumed = resume_events(answer, upto=15)

    assert resumed == [
        (
            events.AnswerStarted(conversation_id=conversation_id, message_id=message_id, resumed=True),
            10,
            None,
        ),
        (events.TextDelta("Let me look."), 12, None),
        (tool, 13, "frame 13"),
        (events.TextDelta("Found her."), 15, None),
    ]
