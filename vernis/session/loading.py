"""Showing a conversation on a socket: history replay, joining an answer in flight, resuming.

Three ways in (SPEC §4):
- a plain load: `conversation_loaded`, one `history_message` per stored message, `history_end`
  (its `seq` is where the history is current to); a `conversation_compacted` before the first
  message after each summary checkpoint (SPEC §19);
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

import dataclasses
from typing import TYPE_CHECKING
from uuid import UUID

from vernis.conversation import events
from vernis.conversation.store import ConversationInfo
from vernis.conversation.summaries import SummaryInfo
from vernis.hub.base import HubEvent

if TYPE_CHECKING:
    from vernis.session.state import Session

__all__ = ["load_conversation", "resume_events"]


def resume_events(published: list[HubEvent], upto: int) -> list[tuple[events.Event | None, int, str | None]]:
    """An answer's events so far, for a socket joining it: runs of text merged, start marked resumed.

    `published` starts with the answer's `AnswerStarted`; events after `upto` are left out (the
    joining socket receives them live). Each item is (event, seq, its frame when it can be sent
    as published, else None: it must be encoded anew).
    """
    out: list[tuple[events.Event | None, int, str | None]] = []
    run: list[str] = []
    run_seq = 0
    for item in published:
        if item.seq > upto:
            break
        event = item.event
        if type(event) is events.TextDelta:
            run.append(event.content)
            run_seq = item.seq
            continue
        if run:
            out.append((events.TextDelta("".join(run)), run_seq, None))
            run = []
        if isinstance(event, events.AnswerStarted):
            out.append((dataclasses.replace(event, resumed=True), item.seq, None))
        else:
            out.append((event, item.seq, item.frame))
    if run:
        out.append((events.TextDelta("".join(run)), run_seq, None))
    return out


async def load_conversation(
    session: Session,
    conversation: ConversationInfo,
    *,
    after_seq: int | None = None,
    rolled_over_from: UUID | None = None,
) -> None:
    services = session.services
    hub = services.hub
    outbox = session.outbox
    session.show(conversation, hold=True)
    upto = await hub.last_seq(conversation.id)
    try:
        # Read again now that live events are held: a title stored just before the subscription
        # is in this row, one stored after it arrives as a held `title_updated`.
        member = session.member
        fresh = await services.store.get_conversation(conversation.id, member.id, member.organization_id)
        conversation = fresh or conversation
        if after_seq is not None:
            missed = await hub.events_since(conversation.id, after_seq)
            if missed is not None:
                outbox.send(
                    events.ConversationLoaded(
                        conversation_id=conversation.id, title=conversation.title, resumed=True
                    )
                )
                for event in missed:
                    if event.seq <= upto:
                        outbox.put(event.frame)
                return

        in_flight = await hub.in_flight(conversation.id)
        messages = await services.store.messages(conversation.id)
        summaries = await services.summaries.all(conversation.id)
        answer_events = None
        hidden: set[UUID] = session.held_answer_ids()
        if in_flight is not None:
            answer_events = await hub.events_since(conversation.id, in_flight.start_seq - 1)
            if answer_events is not None:
                hidden.add(in_flight.message_id)
        if in_flight is None and services.answers.running(conversation.id) is None:
            # An answer in flight appends to the window it started with; only rebuild when idle.
            latest = summaries[-1] if summaries else None
            services.windows.build(conversation.id, messages[-services.settings.window_messages :], latest)

        outbox.send(
            events.ConversationLoaded(
                conversation_id=conversation.id,
                title=conversation.title,
                rolled_over_from=rolled_over_from,
                resumed=False if after_seq is not None else None,
            )
        )
        attached = {}
        if services.attachments is not None:
            attached = await services.attachments.of_messages(m.id for m in messages if m.role == "user")
        marks = list(summaries)
        for message in messages:
            while marks and marks[0].covered <= message.position:
                outbox.send(_compacted(conversation.id, marks.pop(0)))
            if message.id not in hidden:
                outbox.send(events.HistoryMessage(message, tuple(attached.get(message.id, ()))))
        for mark in marks:
            outbox.send(_compacted(conversation.id, mark))
        if in_flight is not None and answer_events is not None:
            outbox.send(events.HistoryEnd(conversation_id=conversation.id), in_flight.start_seq - 1)
            for resumed, seq, frame in resume_events(answer_events, upto):
                if frame is not None:
                    outbox.put(frame)
                elif resumed is not None:
                    outbox.send(resumed, seq)
        else:
            outbox.send(events.HistoryEnd(conversation_id=conversation.id), upto)
    finally:
        session.release_held(upto)


def _compacted(conversation_id: UUID, summary: SummaryInfo) -> events.ConversationCompacted:
    return events.ConversationCompacted(
        conversation_id=conversation_id, through_message_id=summary.through_message_id
    )
