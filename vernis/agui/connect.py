"""`POST /api/agui/connect` (SPEC §20): join a thread as a run, so a stock AG-UI client can read it.

Without `Last-Event-ID`: `RUN_STARTED`, a `MESSAGES_SNAPSHOT` of the stored history, then, when an
answer is running, its events so far and the live rest, then `RUN_FINISHED`. With it (the seq of the
last event the client has): exactly the events after it (a text message it was reading opened again
by its id first, which a client continues), then the live rest, as the socket resumes with
`after_seq`; outside the hub's replay window, the snapshot instead. The session subscribes
before it reads the replay, so an event is either in the replay or arrives live (dropped by seq
when it is both): nothing lost, nothing twice, on any instance (the hub's replay is Redis's there).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import orjson
from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Message,
    MessagesSnapshotEvent,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from vernis.agui.run import Stream, WriteNow, follow
from vernis.agui.translate import RunTranslator, sse
from vernis.conversation.records import StoredMessage
from vernis.exceptions import NotFound
from vernis.hub.base import HubEvent
from vernis.identity.members import Identity
from vernis.runtime import Services
from vernis.session.state import Session
from vernis.store.models import MessageRole

__all__ = ["Connection", "open_connection", "snapshot"]


def snapshot(stored: list[StoredMessage], leave_out: UUID | None = None) -> MessagesSnapshotEvent:
    """The stored history as AG-UI messages: user and assistant messages, each tool call of an
    answer and its result as a `tool` message (`leave_out`: the answer still streaming)."""
    messages: list[Message] = []
    for message in stored:
        if message.id == leave_out:
            continue
        if message.role == MessageRole.USER:
            messages.append(UserMessage(id=str(message.id), content=message.content))
        elif message.role == MessageRole.ASSISTANT:
            calls = message.tool_calls or []
            messages.append(
                AssistantMessage(
                    id=str(message.id),
                    content=message.content or None,
                    tool_calls=[
                        ToolCall(
                            id=str(call["call_id"]),
                            function=FunctionCall(
                                name=str(call["tool_name"]),
                                arguments=orjson.dumps(call.get("arguments")).decode(),
                            ),
                        )
                        for call in calls
                    ]
                    or None,
                )
            )
            messages += [
                ToolMessage(
                    id=f"{call['call_id']}:result",
                    tool_call_id=str(call["call_id"]),
                    content=orjson.dumps(call.get("result")).decode(),
                )
                for call in calls
                if call.get("result") is not None
            ]
    return MessagesSnapshotEvent(messages=messages)


class Connection:
    """A thread joined by `open_connection`; `stream()` once."""

    def __init__(
        self,
        session: Session,
        stream: Stream,
        translator: RunTranslator,
        opening: list[Any],
        replay: list[HubEvent],
    ) -> None:
        self._session = session
        self._stream = stream
        self._translator = translator
        self._opening = opening
        self._streamed = False
        self._replay = replay

    async def stream(self) -> AsyncIterator[str]:
        translator = self._translator
        self._streamed = True
        try:
            yield sse(translator.started(), translator.seq)
            for event in self._opening:
                yield sse(event, translator.seq)
            for item in self._replay:
                if translator.done:
                    break
                yield translator.frame(orjson.loads(item.frame))
            async for chunk in follow(translator, self._stream):
                yield chunk
            yield sse(translator.finish(), translator.seq)
        finally:
            self._session.close()

    def write_directly(self, write_now: WriteNow) -> None:
        """From here on, events may be written to the client from their publish (`Stream`)."""
        self._stream.write_now = write_now

    def close(self) -> None:
        """After the response: lets go of the session when the stream never started."""
        if not self._streamed:
            self._streamed = True
            self._session.close()


async def open_connection(
    services: Services,
    identity: Identity,
    thread_id: UUID,
    run_id: str,
    last_event_id: int | None,
    *,
    versioned: bool = True,
) -> Connection:
    """Join the member's thread; `NotFound` for anyone else's or an unknown one."""
    member, hub = identity.member, services.hub
    conversation = await services.store.get_conversation(thread_id, member.id, member.organization_id)
    if conversation is None:
        raise NotFound()
    conversation = await services.store.latest_rollover(conversation, member.id, member.organization_id)
    stream = Stream()
    session = Session(services, identity, stream)
    try:
        session.show(conversation)
        newest = await hub.last_seq(conversation.id)
        running = await hub.in_flight(conversation.id)
        translator = RunTranslator(str(thread_id), run_id, versioned=versioned)
        replay: list[HubEvent] | None = None
        if last_event_id is not None:
            replay = await hub.events_since(conversation.id, last_event_id)
        opening: list[Any] = []
        if replay is not None:
            assert last_event_id is not None
            first = last_event_id
            if running is not None and running.start_seq <= last_event_id:
                # The client is inside the answer: what it had sets the translation's state (the
                # text message open, the interrupts), so what follows continues it.
                before = await hub.events_since(conversation.id, running.start_seq - 1) or []
                for item in before:
                    if item.seq <= last_event_id:
                        translator.feed(orjson.loads(item.frame))
                opening += translator.reopen()
        else:
            # The answer running, if any, comes from its start: the snapshot leaves it out.
            first = running.start_seq - 1 if running is not None else newest
            stored = await services.store.messages(conversation.id)
            opening.append(snapshot(stored, running.message_id if running is not None else None))
            replay = []
            if running is not None:
                replay = await hub.events_since(conversation.id, running.start_seq - 1) or []
        translator.seq = first
        if running is None and not any(item.seq > first for item in replay):
            translator.done = True
        return Connection(session, stream, translator, opening, replay)
    except BaseException:
        session.close()
        raise
