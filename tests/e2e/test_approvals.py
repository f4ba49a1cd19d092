"""Writes that ask first (SPEC §5), through the Notifications tools, end to end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import sqlalchemy as sa

from tests.data import add_notification, database, is_read
from tests.fixtures.server import Client, Vernis, VernisFactory, text_of, types_of
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis_crm import toolkit as crm_toolkit


def previewed(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The history's last assistant message with tool calls: the one that showed the preview (the
    answer that read a decision's outcome follows it)."""
    return [
        e
        for e in events
        if e["type"] == "history_message" and e["role"] == "assistant" and e.get("tool_calls")
    ][-1]


async def sql(vernis: Vernis, statement: str, **params: Any) -> list[Any]:
    async with database(vernis) as engine, engine.begin() as connection:
        result = await connection.execute(sa.text(statement), params)
        return list(result.all()) if result.returns_rows else []


async def audit(vernis: Vernis) -> list[tuple[str, str]]:
    rows = await sql(vernis, "SELECT tool_name, outcome FROM audit_log ORDER BY created_at")
    return [(row.tool_name, row.outcome) for row in rows]


def mark_read(notification_id: str, confirmed: bool = False) -> Reply:
    arguments: dict[str, Any] = {"notification_id": notification_id}
    if confirmed:
        arguments["confirmed"] = True
    return Reply(tool_calls=[ScriptedToolCall("mark_notification_read", arguments)])


async def preview(
    client: Client, vernis: Vernis, notification_id: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Ask for the change as the conversation's first message; return the confirmation_required
    event and the whole answer (through the title, which follows a first exchange)."""
    vernis.scripted.add(mark_read(notification_id), match="mark it read")
    events = await client.answer("mark it read please")
    events += await client.until("title_updated")
    kinds = [e["type"] for e in events]
    assert kinds.count("confirmation_required") == 1, kinds
    started = next(e for e in events if e["type"] == "tool_call_started")
    completed = next(e for e in events if e["type"] == "tool_call_completed")
    assert completed["status"] == "needs_confirmation"
    confirmation = next(e for e in events if e["type"] == "confirmation_required")
    assert confirmation["call_id"] == started["call_id"]
    assert confirmation["preview"]["changes"] == {"read": {"from": False, "to": True}}
    assert kinds.index("confirmation_required") > kinds.index("tool_call_completed")
    return confirmation, events


async def test_preview_then_button_approval_writes_once(vernis: Vernis) -> None:
    """A write first only previews (nothing changes); approving it runs the write once and every card shows the result."""
    notification_id = await add_notification(vernis)
    async with vernis.opened() as client:
        confirmation, _ = await preview(client, vernis, notification_id)
        assert not await is_read(vernis, notification_id)
        await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True)
        (done,) = await client.expect("tool_call_completed")
        assert done["call_id"] == confirmation["call_id"]
        assert done["status"] == "ok"
        assert done["result"]["data"]["read"] is True
        await client.until("assistant_end")  # the answer that reads the outcome
        await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True)
        (again,) = await client.expect("error")
        assert again["code"] == "not_found"
    assert await is_read(vernis, notification_id)
    assert await audit(vernis) == [("mark_notification_read", "ok")]
    status = await sql(vernis, "SELECT status, resolved_via FROM assistant_approval")
    assert [(row.status, row.resolved_via) for row in status] == [("executed", "button")]


async def test_rejection_changes_nothing_and_is_told_to_the_model(vernis: Vernis) -> None:
    """Rejecting a preview writes nothing, records the rejection, and the model's next request carries it."""
    notification_id = await add_notification(vernis)
    async with vernis.opened() as client:
        confirmation, _ = await preview(client, vernis, notification_id)
        await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=False)
        (done,) = await client.expect("tool_call_completed")
        assert done["status"] == "rejected"
        await client.until("assistant_end")  # the answer that reads the outcome
        await client.answer("ok, what now?")
    assert not await is_read(vernis, notification_id)
    assert await audit(vernis) == [("mark_notification_read", "rejected")]
    request = vernis.scripted.requests[-1]
    tool_results = [m for m in request["messages"] if m["role"] == "tool"]
    assert '"code":"rejected"' in tool_results[-1]["content"]


async def test_chat_confirmation_runs_the_identical_call(vernis: Vernis) -> None:
    """After the user agrees in the chat, the model's identical call with confirmed=true runs the write, and the preview card ends."""
    notification_id = await add_notification(vernis)
    async with vernis.opened() as client:
        confirmation, _ = await preview(client, vernis, notification_id)
        vernis.scripted.add(mark_read(notification_id, confirmed=True), match="yes, do it")
        events = await client.answer("yes, do it")
        completed = [e for e in events if e["type"] == "tool_call_completed"]
        assert [e["status"] for e in completed] == ["ok", "ok"]
        assert completed[1]["call_id"] == confirmation["call_id"]
        assert "confirmation_required" not in [e["type"] for e in events]
    assert await is_read(vernis, notification_id)
    rows = await sql(vernis, "SELECT status, resolved_via FROM assistant_approval")
    assert [(row.status, row.resolved_via) for row in rows] == [("executed", "chat")]


async def test_confirmed_call_without_a_preview_does_nothing(vernis: Vernis) -> None:
    """A confirmed=true call with no preview the user answered writes nothing and tells the model to preview first."""
    notification_id = await add_notification(vernis)
    vernis.scripted.add(mark_read(notification_id, confirmed=True), match="just do it")
    async with vernis.opened() as client:
        events = await client.answer("just do it")
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["status"] == "error"
    assert completed["result"]["error"]["code"] == "confirmation_required"
    assert not await is_read(vernis, notification_id)
    assert await audit(vernis) == [("mark_notification_read", "refused")]


async def test_confirmation_in_the_same_answer_as_the_preview_does_nothing(vernis: Vernis) -> None:
    """A model that previews and confirms in one answer, before the user said anything, writes nothing."""
    notification_id = await add_notification(vernis)
    vernis.scripted.add(mark_read(notification_id), match="sneaky")
    vernis.scripted.add(
        mark_read(notification_id, confirmed=True), match=lambda body: body["messages"][-1]["role"] == "tool"
    )
    async with vernis.opened() as client:
        events = await client.answer("sneaky")
    statuses = [e["status"] for e in events if e["type"] == "tool_call_completed"]
    assert statuses == ["needs_confirmation", "error"]
    assert not await is_read(vernis, notification_id)


async def test_approval_is_bound_to_its_arguments(vernis: Vernis) -> None:
    """An approved preview of one notification cannot be used to mark another one."""
    first = await add_notification(vernis, title="First")
    second = await add_notification(vernis, title="Second")
    async with vernis.opened() as client:
        await preview(client, vernis, first)
        vernis.scripted.add(mark_read(second, confirmed=True), match="yes")
        events = await client.answer("yes")
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["result"]["error"]["code"] == "confirmation_required"
    assert not await is_read(vernis, first)
    assert not await is_read(vernis, second)


async def test_two_tabs_approving_at_once_write_once(vernis: Vernis) -> None:
    """Two sockets approving the same preview at the same moment: the write runs once, the loser is told."""
    notification_id = await add_notification(vernis)
    async with vernis.opened() as first, vernis.opened() as second:
        confirmation, events = await preview(first, vernis, notification_id)
        await second.send("load_conversation", conversation_id=events[0]["conversation_id"])
        await second.until("history_end")
        approve = {"confirmation_id": confirmation["confirmation_id"], "approved": True}
        await asyncio.gather(first.send("confirm_tool", **approve), second.send("confirm_tool", **approve))
        # Each tab hears the card end (however long the write takes), then anything after it.
        first_events = await first.until("tool_call_completed") + await first.drain()
        second_events = await second.until("tool_call_completed") + await second.drain()
    for events in (first_events, second_events):
        assert [e["type"] for e in events].count("tool_call_completed") == 1
    errors = [e for e in first_events + second_events if e["type"] == "error"]
    assert len(errors) == 1
    assert errors[0]["code"] == "not_found"
    assert await audit(vernis) == [("mark_notification_read", "ok")]


async def test_expired_preview_cannot_be_approved(vernis_factory: VernisFactory) -> None:
    """A preview approved after VERNIS_APPROVAL_TTL is refused as expired, in the chat and by the button."""
    async with vernis_factory(approval_ttl=0.5) as vernis:
        notification_id = await add_notification(vernis)
        async with vernis.opened() as client:
            confirmation, _ = await preview(client, vernis, notification_id)
            await asyncio.sleep(0.8)
            vernis.scripted.add(mark_read(notification_id, confirmed=True), match="yes")
            events = await client.answer("yes")
            (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
            assert completed["result"]["error"]["code"] == "confirmation_required"
            await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True)
            (error,) = await client.expect("error")
            assert "expired" in error["message"]
        assert not await is_read(vernis, notification_id)
        rows = await sql(vernis, "SELECT status FROM assistant_approval")
        assert [row.status for row in rows] == ["expired"]


async def test_preview_card_survives_a_reconnect(vernis: Vernis) -> None:
    """After a reconnect the preview comes back in the history, still pending, and can be approved from there."""
    notification_id = await add_notification(vernis)
    async with vernis.opened() as client:
        confirmation, _ = await preview(client, vernis, notification_id)
    async with vernis.connect() as client:
        events = await client.until("history_end")
        assistant = previewed(events)
        (call,) = assistant["tool_calls"]
        assert call["status"] == "needs_confirmation"
        assert call["result"]["data"]["confirmation_id"] == confirmation["confirmation_id"]
        await client.send(
            "confirm_tool", confirmation_id=call["result"]["data"]["confirmation_id"], approved=True
        )
        (done,) = await client.expect("tool_call_completed")
        assert done["status"] == "ok"
    async with vernis.connect() as client:
        events = await client.until("history_end")
        assistant = previewed(events)
        assert assistant["tool_calls"][0]["status"] == "ok"
    assert await is_read(vernis, notification_id)


async def test_viewer_is_offered_no_write_tool_and_cannot_run_one(vernis: Vernis) -> None:
    """A viewer's model is offered no write tool (the reads only); a write call it makes anyway is refused and runs nothing."""
    notification_id = await add_notification(vernis, email="viewer@acme.test")
    vernis.scripted.add(mark_read(notification_id), match="mark it read")
    async with vernis.opened("viewer@acme.test") as client:
        events = await client.answer("mark it read")
    offered = {tool["function"]["name"] for tool in vernis.scripted.requests[0]["tools"]}
    writes = {tool.name for tool in crm_toolkit.tools if tool.writes}
    assert {"get_notifications", "get_unread_count"} <= offered
    assert not offered & writes
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["result"]["error"]["code"] == "forbidden"
    assert await sql(vernis, "SELECT id FROM assistant_approval") == []


async def test_history_keeps_an_answered_preview_and_where_each_call_came(vernis: Vernis) -> None:
    """A stored call says where in the text it came, and an answered preview keeps its preview beside the outcome."""
    notification_id = await add_notification(vernis)
    vernis.scripted.add(
        Reply(
            "Let me look.",
            tool_calls=[ScriptedToolCall("mark_notification_read", {"notification_id": notification_id})],
        ),
        match="mark it read",
    )
    async with vernis.opened() as client:
        await client.answer("mark it read please")
        # The title comes in the background: awaited here, so that it cannot reach the next socket.
        await client.until("title_updated")
    async with vernis.connect() as client:
        events = await client.until("history_end")
        assistant = previewed(events)
        (call,) = assistant["tool_calls"]
        assert call["text_offset"] == len("Let me look.")
        assert assistant["content"].startswith("Let me look.")
        assert "approval" not in call
        await client.send(
            "confirm_tool", confirmation_id=call["result"]["data"]["confirmation_id"], approved=False
        )
        (done,) = await client.expect("tool_call_completed")
        assert done["status"] == "rejected"
    async with vernis.connect() as client:
        events = await client.until("history_end")
        assistant = previewed(events)
        (call,) = assistant["tool_calls"]
        assert call["status"] == "rejected"
        assert call["text_offset"] == len("Let me look.")
        assert call["approval"]["preview"]["changes"] == {"read": {"from": False, "to": True}}
        assert call["approval"]["confirmation_id"]
    assert not await is_read(vernis, notification_id)


async def test_a_new_message_supersedes_a_pending_approval(vernis: Vernis) -> None:
    """A preview left pending while the member asks something else ends unapproved (its card says the conversation moved on, stored so), a late approval is not_found, nothing is written, and the model's next request reads it."""
    notification_id = await add_notification(vernis)
    async with vernis.opened() as client:
        confirmation, _ = await preview(client, vernis, notification_id)
        vernis.scripted.add(Reply("It is sunny."), match="weather")
        events = await client.answer("what's the weather like?")
        (ended,) = [e for e in events if e["type"] == "tool_call_completed"]
        assert ended["call_id"] == confirmation["call_id"]
        assert ended["status"] == "expired"
        assert ended["result"]["error"]["code"] == "superseded"
        assert (
            ended["result"]["error"]["message"]
            == "Not approved: the conversation moved on. Ask again to do it."
        )
        # The card ended before the new answer started.
        kinds = [e["type"] for e in events]
        assert kinds.index("tool_call_completed") < kinds.index("assistant_start")
        await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True)
        error = await client.until("error")
        assert error[-1]["code"] == "not_found"
        assert "moved on" in error[-1]["message"]
    assert not await is_read(vernis, notification_id)
    status = await sql(vernis, "SELECT status, resolved_via FROM assistant_approval")
    assert [(row.status, row.resolved_via) for row in status] == [("expired", "superseded")]
    # The model read that the change was not approved (the stored call), not a pending preview.
    last = vernis.scripted.requests[-1]
    results = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    assert any("superseded" in content for content in results), results
    # And history replays the card as ended.
    async with vernis.connect() as again:
        events = await again.until("history_end")
        (card,) = [
            call for e in events if e["type"] == "history_message" for call in e.get("tool_calls") or []
        ]
        assert card["status"] == "expired"


def after_decision(word: str) -> Callable[[Mapping[str, Any]], bool]:
    """The request of the answer that reads an approval's outcome (`word`: approved / rejected)."""
    return lambda body: (
        f"The user {word} the mark_notification_read change" in str(body["messages"][0]["content"])
    )


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "rejected"])
async def test_a_decision_on_a_card_is_followed_by_an_answer_that_reads_its_outcome(
    vernis: Vernis, approved: bool
) -> None:
    """After Approve or Reject the conversation goes on: the card ends, then a new answer (continues) whose model read the outcome says what happened."""
    notification_id = await add_notification(vernis)
    word = "approved" if approved else "rejected"
    async with vernis.opened() as client:
        confirmation, _ = await preview(client, vernis, notification_id)
        vernis.scripted.add(f"Done: you {word} it.", match=after_decision(word))
        await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=approved)
        events = await client.until("assistant_end")
    assert types_of(events)[:2] == ["tool_call_completed", "assistant_start"]
    assert events[0]["status"] == ("ok" if approved else "rejected")
    assert events[1]["continues"] is True
    assert text_of(events) == f"Done: you {word} it."
    request = vernis.scripted.requests[-1]
    (outcome,) = [m for m in request["messages"] if m["role"] == "tool"]
    assert ('"ok":true' in outcome["content"].replace(" ", "")) is approved
    assert await is_read(vernis, notification_id) is approved
