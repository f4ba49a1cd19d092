"""`POST /api/agui/connect` (SPEC §20) through the running server: the stored history as a
MESSAGES_SNAPSHOT, and a reconnect with Last-Event-ID in the middle of an answer that loses and
doubles nothing."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.e2e.test_agui import parse_sse, run, run_input, text, types, user
from tests.fixtures.server import Vernis
from vernis.model.scripted import Reply, ScriptedToolCall

LONG = " ".join(f"word{i}" for i in range(150))


async def connect(
    vernis: Vernis, thread: str, last_event_id: int | None = None, email: str = "member@acme.test"
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {vernis.token(email)}"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    async with httpx.AsyncClient(base_url=vernis.http_url, timeout=10) as client:
        return await client.post("/api/agui/connect", json={"threadId": thread}, headers=headers)


async def partial_run(
    vernis: Vernis, thread: str, content: str, deltas: int
) -> list[tuple[int, dict[str, Any]]]:
    """Start a run and drop its connection once `deltas` TEXT_MESSAGE_CONTENT events arrived: the
    complete events read so far."""
    headers = {"Authorization": f"Bearer {vernis.token()}"}
    body = ""
    async with (
        httpx.AsyncClient(base_url=vernis.http_url, timeout=10) as client,
        client.stream(
            "POST", "/api/agui/run", json=run_input(thread, user(content)), headers=headers
        ) as response,
    ):
        async for chunk in response.aiter_text():
            body += chunk
            complete = body[: body.rfind("\n\n") + 2] if "\n\n" in body else ""
            if complete.count("TEXT_MESSAGE_CONTENT") >= deltas:
                return parse_sse(complete)
    raise AssertionError("the answer ended before the connection was dropped")


async def test_connect_without_last_event_id_sends_the_history_as_a_messages_snapshot(vernis: Vernis) -> None:
    """Joining an idle thread gives RUN_STARTED, a MESSAGES_SNAPSHOT of the stored messages (a tool call with its result as a tool message), RUN_FINISHED; another member's thread is 404."""
    vernis.scripted.add(Reply(tool_calls=[ScriptedToolCall("get_unread_count", {})]), match="how many unread")
    thread = str(uuid.uuid4())
    message = user("how many unread?")
    await run(vernis, run_input(thread, message))
    response = await connect(vernis, thread)
    assert response.status_code == 200
    events = [data for _, data in parse_sse(response.text)]
    assert types(events) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    messages = events[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[0]["content"] == "how many unread?"
    (call,) = messages[1]["toolCalls"]
    assert call["function"]["name"] == "get_unread_count"
    assert messages[2]["toolCallId"] == call["id"]
    assert (await connect(vernis, thread, email="owner@acme.test")).status_code == 404
    assert (await connect(vernis, str(uuid.uuid4()))).status_code == 404


async def test_reconnect_with_last_event_id_mid_answer_loses_and_doubles_nothing(vernis: Vernis) -> None:
    """A client that lost its run mid-answer and connects with the id of the last event it had gets the open text message started again by its id, exactly the events after it and the live rest: its text and the new text make the answer, once."""
    vernis.scripted.add(Reply(LONG, chunk_delay=0.01), match="long story")
    thread = str(uuid.uuid4())
    before = await partial_run(vernis, thread, "tell me a long story", deltas=5)
    last_id = before[-1][0]
    response = await connect(vernis, thread, last_event_id=last_id)
    assert response.status_code == 200
    after = parse_sse(response.text)
    assert after[0][1]["type"] == "RUN_STARTED"
    assert after[-1][1]["type"] == "RUN_FINISHED"
    assert after[1][0] == last_id
    assert all(seq > last_id for seq, data in after[2:])
    opened = [data for _, data in before if data["type"] == "TEXT_MESSAGE_START"]
    reopened = [data for _, data in after if data["type"] == "TEXT_MESSAGE_START"]
    assert reopened == opened
    assert after[1][1] == opened[0]
    had = text([data for _, data in before])
    rest = text([data for _, data in after])
    assert had
    assert rest
    assert had + rest == LONG


async def test_connect_mid_answer_without_last_event_id_sends_the_answer_from_its_start(
    vernis: Vernis,
) -> None:
    """A client joining a thread mid-answer without Last-Event-ID gets the history without the streaming answer, then that answer whole from its start and the live rest."""
    vernis.scripted.add(Reply(LONG, chunk_delay=0.01), match="long story")
    thread = str(uuid.uuid4())
    await partial_run(vernis, thread, "another long story", deltas=3)
    response = await connect(vernis, thread)
    events = [data for _, data in parse_sse(response.text)]
    assert types(events)[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "TEXT_MESSAGE_START"]
    assert [m["role"] for m in events[1]["messages"]] == ["user"]
    assert text(events) == LONG
    assert events[-1]["type"] == "RUN_FINISHED"


async def test_a_bad_last_event_id_is_400(vernis: Vernis) -> None:
    """A Last-Event-ID that is not a seq is refused with 400."""
    thread = str(uuid.uuid4())
    await run(vernis, run_input(thread, user("hi")))
    headers = {"Authorization": f"Bearer {vernis.token()}", "Last-Event-ID": "abc"}
    async with httpx.AsyncClient(base_url=vernis.http_url, timeout=10) as client:
        response = await client.post("/api/agui/connect", json={"threadId": thread}, headers=headers)
    assert response.status_code == 400
