"""Showing a conversation on a socket: history replay, joining an answer in flight, resuming.

Three ways in (SPEC §4):
- a plain load: `conversation_loaded`, one `history_message` per stored message, `history_end`
  (its `seq` is where the history is current to);
- a load while an answer streams: the stored history without that answer, then `assistant_start`
  with `resumed: true`, what the answer has sent so far (its text merged into one `text_delta`),
  and the live rest;
- a resume with `after_seq` inside the replay window: `conversation_loaded` with `resumed: true`,
  then exactly the events after that seq, in order. Outside the window: a plain load, its
  `conversation_loaded` saying `resumed: false` so the client knows to redraw.

The socket subscribes before it reads anything, holding the live frames that arrive meanwhile; once
it has sent what it read, it releases the held frames it did not already send. Nothing is lost,
nothing arrives twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

import orjson

from vernis.services.hub import HubEvent
from vernis.services.persistence import ConversationInfo, StoredMessage
from vernis.ws import protocol

if TYPE_CHECKING:
    from vernis.ws.connection import Connection

__all__ = ["load_conversation", "resume_frames"]


def resume_frames(events: list[HubEvent], upto: int) -> list[str]:
    """An answer's events so far, for a socket joining it: runs of text merged, start marked resumed.

    `events` starts with the answer's `assistant_start`; events after `upto` are left out (the
    joining socket receives them live).
    """
    frames: list[str] = []
    run: list[str] = []
    run_seq = 0
    for event in events:
        if event.seq > upto:
            break
        if event.kind == "text_delta" and event.text is not None:
            run.append(event.text)
            run_seq = event.seq
            continue
        if run:
            frames.append(protocol.encode_text_delta("".join(run), run_seq))
            run = []
        if event.kind == "assistant_start":
            start = orjson.loads(event.frame)
            start["resumed"] = True
            frames.append(orjson.dumps(start).decode())
        else:
            frames.append(event.frame)
    if run:
        frames.append(protocol.encode_text_delta("".join(run), run_seq))
    return frames


async def load_conversation(
    connection: Connection,
    conversation: ConversationInfo,
    *,
    after_seq: int | None = None,
    rolled_over_from: UUID | None = None,
) -> None:
    services = connection.services
    hub = services.hub
    connection.show(conversation, hold=True)
    upto = hub.last_seq(conversation.id)
    try:
        # Read again now that live events are held: a title stored just before the subscription
        # is in this row, one stored after it arrives as a held `title_updated`.
        member = connection.member
        fresh = await services.store.get_conversation(conversation.id, member.id, member.organization_id)
        conversation = fresh or conversation
        if after_seq is not None:
            missed = await hub.events_since(conversation.id, after_seq)
            if missed is not None:
                connection.send(
                    protocol.ConversationLoaded(
                        conversation_id=conversation.id, title=conversation.title, resumed=True
                    )
                )
                for event in missed:
                    if event.seq <= upto:
                        connection.put(event.frame)
                return

        in_flight = hub.in_flight(conversation.id)
        messages = await services.store.messages(conversation.id)
        answer_events = None
        hidden: set[UUID] = connection.held_answer_ids()
        if in_flight is not None:
            answer_events = await hub.events_since(conversation.id, in_flight.start_seq - 1)
            if answer_events is not None:
                hidden.add(in_flight.message_id)
        if in_flight is None and services.answers.running(conversation.id) is None:
            # An answer in flight appends to the window it started with; only rebuild when idle.
            services.windows.build(conversation.id, messages[-services.settings.window_messages :])

        connection.send(
            protocol.ConversationLoaded(
                conversation_id=conversation.id,
                title=conversation.title,
                rolled_over_from=rolled_over_from,
                resumed=False if after_seq is not None else None,
            )
        )
        for message in messages:
            if message.id not in hidden:
                connection.send(history_message(message))
        if in_flight is not None and answer_events is not None:
            connection.send(protocol.HistoryEnd(conversation_id=conversation.id, seq=in_flight.start_seq - 1))
            for frame in resume_frames(answer_events, upto):
                connection.put(frame)
        else:
            connection.send(protocol.HistoryEnd(conversation_id=conversation.id, seq=upto))
    finally:
        connection.release_held(upto)


def history_message(message: StoredMessage) -> protocol.HistoryMessage:
    return protocol.HistoryMessage(
        message_id=message.id,
        role=message.role,
        content=message.content,
        tool_calls=message.tool_calls,
        status=message.status,
        created_at=message.created_at,
    )
