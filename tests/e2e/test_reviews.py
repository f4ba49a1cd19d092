"""Reviews (SPEC §23): writes a second member approves, end to end. Demo mode sends the CRM's
`send_sms` to review by holders of `message:review` (owners and admins; members do not hold it)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

import httpx
import sqlalchemy as sa

from tests.data import database, demo_member
from tests.fixtures.server import Client, Vernis, VernisFactory, types_of
from vernis.model.scripted import Reply, ScriptedToolCall

REVIEWER = "admin@acme.test"


async def sql(vernis: Vernis, statement: str, **params: Any) -> list[Any]:
    async with database(vernis) as engine, engine.begin() as connection:
        result = await connection.execute(sa.text(statement), params)
        return list(result.all()) if result.returns_rows else []


async def a_contact(vernis: Vernis) -> str:
    """A contact of acme with a primary phone number (an SMS can go to it)."""
    organization_id = demo_member(vernis).organization_id
    rows = await sql(
        vernis,
        "SELECT c.id FROM contact c JOIN contact_phone p ON p.contact_id = c.id AND p.is_primary "
        "WHERE c.organization_id = :org ORDER BY c.id LIMIT 1",
        org=organization_id.hex if vernis.settings.database_url.startswith("sqlite") else organization_id,
    )
    return str(uuid.UUID(str(rows[0][0])))


async def sent(vernis: Vernis, body: str) -> int:
    """How many SMS with this text the outbox holds."""
    rows = await sql(vernis, "SELECT count(*) FROM sms_message WHERE body = :body", body=body)
    return int(rows[0][0])


async def audit(vernis: Vernis, body: str) -> list[tuple[str, str]]:
    """(outcome, member e-mail) of the audit rows of send_sms with this text, in order."""
    rows = await sql(
        vernis,
        "SELECT a.outcome, m.email, a.arguments_json FROM audit_log a JOIN member m ON m.id = a.member_id "
        "WHERE a.tool_name = 'send_sms' ORDER BY a.created_at",
    )
    return [(row.outcome, row.email) for row in rows if body in str(row.arguments_json)]


def sms(contact_id: str, body: str) -> Reply:
    return Reply(tool_calls=[ScriptedToolCall("send_sms", {"contact_id": contact_id, "body": body})])


def continuing(body: Mapping[str, Any]) -> bool:
    """The request of the answer that follows a review's outcome."""
    return "A reviewer has decided" in str(body["messages"][0]["content"])


async def ask_for_review(vernis: Vernis, client: Client, body: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The member asks for an SMS and approves its card: (its confirmation_required, review_requested)."""
    contact_id = await a_contact(vernis)
    tag = uuid.uuid4().hex[:8]
    vernis.scripted.add(sms(contact_id, body), match=f"text {tag}")
    events = await client.answer(f"please text {tag}")
    confirmation = next(e for e in events if e["type"] == "confirmation_required")
    await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True)
    events = await client.until("review_requested")
    requested = events[-1]
    assert requested["call_id"] == confirmation["call_id"]
    assert "tool_call_completed" not in types_of(events)
    return confirmation, requested


async def test_approved_review_runs_the_write_once_as_the_requester_and_the_conversation_goes_on(
    vernis: Vernis,
) -> None:
    """A member's approved SMS waits for a reviewer (nothing sent); the admin sees it live and listed, approves it; it is sent once as the member, audited with both, and the member's conversation gets the result and a new answer that read it."""
    body = f"Your appointment is confirmed {uuid.uuid4().hex[:6]}"
    async with vernis.opened() as member, vernis.opened(REVIEWER) as admin:
        confirmation, requested = await ask_for_review(vernis, member, body)
        assert await sent(vernis, body) == 0
        (pushed,) = await admin.expect("review_required")
        assert pushed["review"]["review_id"] == requested["review_id"]
        assert pushed["review"]["requester_name"] == "Priya Raman"
        assert pushed["review"]["arguments"]["body"] == body
        await admin.send("list_reviews")
        (listed,) = await admin.expect("review_list")
        assert [r["review_id"] for r in listed["reviews"]] == [requested["review_id"]]

        vernis.scripted.add("The SMS went out.", match=continuing)
        await admin.send("review_tool", review_id=requested["review_id"], approved=True)
        (resolved,) = await admin.expect("review_resolved")
        assert resolved == {
            "type": "review_resolved",
            "review_id": requested["review_id"],
            "status": "approved",
        }
        events = await member.until("assistant_end")
        completed = next(e for e in events if e["type"] == "tool_call_completed")
        assert completed["call_id"] == confirmation["call_id"]
        assert completed["status"] == "ok"
        assert completed["result"]["data"]["body"] == body
        # The conversation's title is made in the background and may come at any point between.
        answered = [kind for kind in types_of(events) if kind != "title_updated"]
        assert answered[answered.index("tool_call_completed") :][:2] == [
            "tool_call_completed",
            "assistant_start",
        ]
        assert "The SMS went out." in "".join(e.get("content", "") for e in events)
        assert next(e for e in events if e["type"] == "assistant_start")["continues"] is True
        await admin.send("list_reviews")
        (after,) = await admin.expect("review_list")
        assert after["reviews"] == []
        await admin.send("review_tool", review_id=requested["review_id"], approved=True)
        (refused,) = await admin.expect("error")
        assert refused["code"] == "not_found"

    assert await sent(vernis, body) == 1
    rows = await sql(vernis, "SELECT sender_id FROM sms_message WHERE body = :body", body=body)
    assert uuid.UUID(str(rows[0][0])) == demo_member(vernis).id
    assert await audit(vernis, body) == [("review_approved", REVIEWER), ("ok", "member@acme.test")]
    request = next(r for r in vernis.scripted.requests if continuing(r))
    results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    assert body in results[-1]
    # History replay: the card ended `ok`; the new answer continues the earlier one (not a version).
    async with vernis.connect() as again:
        history = await again.until("history_end")
    answers = [e for e in history if e["type"] == "history_message" and e["role"] == "assistant"]
    assert answers[-2]["tool_calls"][0]["status"] == "ok"
    assert answers[-1]["continues"] is True
    assert answers[-1]["content"] == "The SMS went out."


async def test_rejected_review_runs_nothing_and_the_model_reads_the_note(vernis: Vernis) -> None:
    """A rejected review sends nothing; the card ends `rejected` and the new answer's model request carries the reviewer's note."""
    body = f"Discount of 90% {uuid.uuid4().hex[:6]}"
    async with vernis.opened() as member, vernis.opened(REVIEWER) as admin:
        confirmation, requested = await ask_for_review(vernis, member, body)
        await admin.expect("review_required")
        vernis.scripted.add("The reviewer said no.", match=continuing)
        await admin.send(
            "review_tool", review_id=requested["review_id"], approved=False, note="We never promise 90%."
        )
        events = await member.until("assistant_end")
        completed = next(e for e in events if e["type"] == "tool_call_completed")
        assert completed["call_id"] == confirmation["call_id"]
        assert completed["status"] == "rejected"
        assert "We never promise 90%." in completed["result"]["error"]["message"]
    assert await sent(vernis, body) == 0
    assert await audit(vernis, body) == [("review_rejected", REVIEWER)]
    request = next(r for r in vernis.scripted.requests if continuing(r))
    results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    assert "We never promise 90%." in results[-1]
    assert '"code":"rejected"' in results[-1]


async def test_a_reviewers_note_passes_the_guards_before_the_model_reads_it(vernis: Vernis) -> None:
    """A card number in a reviewer's note is redacted before the card, the store or the model sees it."""
    body = f"Guarded note {uuid.uuid4().hex[:6]}"
    async with vernis.opened() as member, vernis.opened(REVIEWER) as admin:
        _, requested = await ask_for_review(vernis, member, body)
        await admin.expect("review_required")
        vernis.scripted.add("Rejected.", match=continuing)
        await admin.send(
            "review_tool",
            review_id=requested["review_id"],
            approved=False,
            note="Use card 4111 1111 1111 1111",
        )
        events = await member.until("assistant_end")
    completed = next(e for e in events if e["type"] == "tool_call_completed")
    assert "4111 1111" not in str(completed["result"])
    assert completed["result"]["review"]["note"].startswith("Use card ")
    request = next(r for r in vernis.scripted.requests if continuing(r))
    assert "4111 1111" not in str(request["messages"])
    rows = await sql(vernis, "SELECT note FROM assistant_review")
    assert not [row for row in rows if row.note and "4111 1111" in row.note]


async def test_two_reviewer_tabs_approving_at_once_run_the_write_once(vernis: Vernis) -> None:
    """Two tabs of the reviewer approve the same review at the same moment: one wins, the other gets not_found, the SMS is sent once."""
    body = f"Both tabs {uuid.uuid4().hex[:6]}"
    async with (
        vernis.opened() as member,
        vernis.opened(REVIEWER) as first,
        vernis.opened(REVIEWER) as second,
    ):
        _, requested = await ask_for_review(vernis, member, body)
        await first.expect("review_required")
        await second.expect("review_required")
        vernis.scripted.add("Sent.", match=continuing)
        await asyncio.gather(
            first.send("review_tool", review_id=requested["review_id"], approved=True),
            second.send("review_tool", review_id=requested["review_id"], approved=True),
        )
        # A loaded machine may take a while to answer both: quiet for longer than usual.
        seen = await first.drain(1.5) + await second.drain()
        await member.until("assistant_end")
    errors = [e for e in seen if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["not_found"]
    assert types_of(seen).count("review_resolved") == 2
    assert await sent(vernis, body) == 1


async def test_a_chat_approval_of_a_reviewed_write_also_waits_for_a_reviewer(vernis: Vernis) -> None:
    """The member approves in the chat and the model repeats the call confirmed: nothing is sent, both cards say `review_requested` (live and on history replay), the reviewer hears of it, and their approval sends it once."""
    body = f"Chat approval {uuid.uuid4().hex[:6]}"
    contact_id = await a_contact(vernis)
    confirmed = Reply(
        tool_calls=[ScriptedToolCall("send_sms", {"contact_id": contact_id, "body": body, "confirmed": True})]
    )
    async with vernis.opened() as member, vernis.opened(REVIEWER) as admin:
        vernis.scripted.add(sms(contact_id, body), match="text them")
        events = await member.answer("please text them")
        confirmation = next(e for e in events if e["type"] == "confirmation_required")
        vernis.scripted.add(confirmed, match="yes, send it")
        events = await member.answer("yes, send it")
        (requested,) = [e for e in events if e["type"] == "review_requested"]
        assert requested["call_id"] == confirmation["call_id"]
        completed = [e for e in events if e["type"] == "tool_call_completed"]
        assert [e["status"] for e in completed] == ["review_requested", "review_requested"]
        assert completed[1]["call_id"] == confirmation["call_id"]
        assert await sent(vernis, body) == 0
        (pushed,) = await admin.expect("review_required")
        assert pushed["review"]["review_id"] == requested["review_id"]
        async with vernis.connect() as reloaded:
            history = await reloaded.until("history_end")
        calls = [c for e in history if e["type"] == "history_message" for c in e.get("tool_calls") or []]
        card = next(c for c in calls if c["call_id"] == confirmation["call_id"])
        assert card["status"] == "review_requested"
        assert card["approval"]["preview"]["body"] == body
        vernis.scripted.add("Sent after review.", match=continuing)
        await admin.send("review_tool", review_id=requested["review_id"], approved=True)
        events = await member.until("assistant_end")
        ended = [(e["call_id"], e["status"]) for e in events if e["type"] == "tool_call_completed"]
        assert ended == [(confirmation["call_id"], "ok"), (completed[0]["call_id"], "ok")]
        async with vernis.connect() as reloaded:
            history = await reloaded.until("history_end")
        calls = [c for e in history if e["type"] == "history_message" for c in e.get("tool_calls") or []]
        assert [c["status"] for c in calls if c["tool_name"] == "send_sms"] == ["ok", "ok"]
    assert await sent(vernis, body) == 1
    rows = await sql(
        vernis,
        "SELECT status, resolved_via FROM assistant_approval WHERE call_id = :call",
        call=confirmation["call_id"],
    )
    assert [(row.status, row.resolved_via) for row in rows] == [("executed", "chat")]


async def test_a_token_refresh_that_grants_the_reviewer_permission_starts_the_feed(vernis: Vernis) -> None:
    """A socket whose token lacks the reviewer permission hears no requests; after `authenticate` with a token that holds it, the next request reaches it live."""
    reads = ["assistant:use", "message:list", "contact:view"]
    async with (
        vernis.opened() as member,
        vernis.connect(token=vernis.token(REVIEWER, permissions=reads)) as tab,
    ):
        await tab.until("history_end")
        await ask_for_review(vernis, member, f"Before {uuid.uuid4().hex[:6]}")
        assert "review_required" not in types_of(await tab.drain(0.3))
        await tab.send("authenticate", token=vernis.token(REVIEWER, permissions=[*reads, "message:review"]))
        await tab.send("ping")
        await tab.until("pong")
        _, requested = await ask_for_review(vernis, member, f"After {uuid.uuid4().hex[:6]}")
        pushed = (await tab.until("review_required"))[-1]
        assert pushed["review"]["review_id"] == requested["review_id"]


async def test_another_organization_cannot_see_or_answer_a_review(vernis: Vernis) -> None:
    """A reviewer of another organization hears nothing of the request, does not list it, and answering it by id gets not_found."""
    body = f"Tenants {uuid.uuid4().hex[:6]}"
    async with vernis.opened() as member, vernis.opened("owner@globex.test") as stranger:
        _, requested = await ask_for_review(vernis, member, body)
        await stranger.send("list_reviews")
        (listed,) = await stranger.expect("review_list")
        assert listed["reviews"] == []
        await stranger.send("review_tool", review_id=requested["review_id"], approved=True)
        (refused,) = await stranger.expect("error")
        assert refused["code"] == "not_found"
        assert "tool_call_completed" not in types_of(await member.drain(0.3))
    assert await sent(vernis, body) == 0


async def test_the_requester_cannot_review_their_own_request(vernis: Vernis) -> None:
    """An admin who asked for the write holds the reviewer permission but cannot approve it (forbidden); a member who reviews nothing cannot either; another reviewer can."""
    body = f"Own request {uuid.uuid4().hex[:6]}"
    async with vernis.opened(REVIEWER) as admin, vernis.opened("owner@acme.test") as owner:
        _, requested = await ask_for_review(vernis, admin, body)
        await admin.until("review_required")
        await admin.send("review_tool", review_id=requested["review_id"], approved=True)
        refused = (await admin.until("error"))[-1]
        assert refused["code"] == "forbidden"
        assert await sent(vernis, body) == 0
        async with vernis.opened() as member:
            await member.send("review_tool", review_id=requested["review_id"], approved=True)
            (not_reviewer,) = await member.expect("error")
            assert not_reviewer["code"] == "forbidden"
        vernis.scripted.add("Done.", match=continuing)
        await owner.until("review_required")
        await owner.send("review_tool", review_id=requested["review_id"], approved=True)
        await admin.until("assistant_end")
    assert await sent(vernis, body) == 1


async def test_an_expired_review_runs_nothing_and_its_card_says_so(vernis_factory: VernisFactory) -> None:
    """After VERNIS_REVIEW_TTL, with no reviewer acting, the requester's card ends `expired` and the request leaves the reviewers' lists; answering it then gets not_found."""
    body = f"Too late {uuid.uuid4().hex[:6]}"
    async with vernis_factory(review_ttl=1.0) as vernis:
        async with vernis.opened() as member, vernis.opened(REVIEWER) as admin:
            confirmation, requested = await ask_for_review(vernis, member, body)
            await admin.expect("review_required")
            expired = (await member.until("tool_call_completed", timeout=5))[-1]
            assert expired["call_id"] == confirmation["call_id"]
            assert expired["status"] == "expired"
            (resolved,) = await admin.expect("review_resolved", timeout=5)
            assert resolved["status"] == "expired"
            await admin.send("review_tool", review_id=requested["review_id"], approved=True)
            events = await admin.until("error")
            assert events[-1]["code"] == "not_found"
            await admin.send("list_reviews")
            listed = (await admin.until("review_list"))[-1]
            assert listed["reviews"] == []
        assert await sent(vernis, body) == 0
        async with vernis.connect() as again:
            history = await again.until("history_end")
        calls = [c for e in history if e["type"] == "history_message" for c in e.get("tool_calls") or []]
        assert calls[-1]["status"] == "expired"


async def test_the_http_route_lists_reviews_to_reviewers_only(vernis: Vernis) -> None:
    """GET /api/assistant/reviews shows a pending review to a reviewer of its organization, an empty list to another organization's reviewer, and 403 to a member who reviews nothing."""
    body = f"Over HTTP {uuid.uuid4().hex[:6]}"
    async with vernis.opened() as member:
        _, requested = await ask_for_review(vernis, member, body)

    def bearer(email: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {vernis.token(email)}"}

    async with httpx.AsyncClient(base_url=vernis.http_url) as http:
        admin = await http.get("/api/assistant/reviews", headers=bearer(REVIEWER))
        stranger = await http.get("/api/assistant/reviews", headers=bearer("owner@globex.test"))
        refused = await http.get("/api/assistant/reviews", headers=bearer("member@acme.test"))
        anonymous = await http.get("/api/assistant/reviews")
        configs = [
            (await http.get("/api/assistant/config", headers=bearer(email))).json()["reviewer"]
            for email in (REVIEWER, "member@acme.test")
        ]
    assert admin.status_code == 200
    (listed,) = [r for r in admin.json()["reviews"] if r["review_id"] == requested["review_id"]]
    assert listed["tool_name"] == "send_sms"
    assert listed["arguments"]["body"] == body
    assert listed["requester_name"] == "Priya Raman"
    assert stranger.status_code == 200
    assert stranger.json() == {"reviews": []}
    assert refused.status_code == 403
    assert anonymous.status_code == 401
    assert configs == [True, False]
