"""The admin API (SPEC §15) through a real server: off without VERNIS_ADMIN_TOKEN, the bearer token,
revoking a member (their live socket closes 4401 at once, the old token is refused, a newer one is
let in, others untouched), exporting and erasing one member's conversations (nobody else's; the
audit of writes stays), and a log line per call.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import jwt
import pytest
from websockets.exceptions import InvalidStatus

from tests.data import add_notification
from tests.e2e.test_approvals import audit, preview, sql
from tests.e2e.test_serve import close_code
from tests.fixtures.server import JWT_SECRET, Client, Vernis, VernisFactory

ADMIN_TOKEN = "an-admin-token-for-the-host-servers"


async def admin(
    vernis: Vernis, method: str, path: str, token: str | None = ADMIN_TOKEN, **request: Any
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=vernis.http_url) as http:
        return await http.request(method, f"/api/admin/members/{path}", headers=headers, **request)


async def closed_with(client: Client, timeout: float = 10) -> int:
    """The close code the server sends (the socket watch runs every 300 s here: not it)."""
    code, _ = await close_code(client, timeout)
    return code


async def test_the_admin_api_is_off_without_its_token(vernis_factory: VernisFactory) -> None:
    """Without VERNIS_ADMIN_TOKEN every admin route answers 404, whatever the request carries."""
    async with vernis_factory() as vernis:
        for method, path in (("POST", "revoke"), ("GET", "conversations"), ("DELETE", "conversations")):
            response = await admin(vernis, method, path, token="anything")
            assert response.status_code == 404


async def test_the_admin_api_refuses_a_missing_or_wrong_token_and_bad_input(
    vernis_factory: VernisFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """No token or a wrong one: 401 and nothing done; a missing `sub`: 400; an unknown member: 404; each call is logged with its action and status, never the token."""
    async with vernis_factory(admin_token=ADMIN_TOKEN) as vernis:
        with caplog.at_level(logging.INFO, logger="vernis.admin"):
            member = {"org": "acme", "sub": "member@acme.test"}
            assert (await admin(vernis, "POST", "revoke", token=None, json=member)).status_code == 401
            assert (await admin(vernis, "POST", "revoke", token="wrong", json=member)).status_code == 401
            assert (await admin(vernis, "POST", "revoke", json={"org": "acme"})).status_code == 400
            assert (await admin(vernis, "POST", "revoke", content=b"not json")).status_code == 400
            unknown = {"org": "acme", "sub": "nobody@acme.test"}
            assert (await admin(vernis, "GET", "conversations", params=unknown)).status_code == 404
        async with vernis.opened() as client:  # not revoked by the refused calls
            await client.send("ping")
            await client.expect("pong")
    calls = [r for r in caplog.records if r.getMessage() == "admin call"]
    assert [(r.action, r.status) for r in calls] == [  # type: ignore[attr-defined]
        ("revoke", 401),
        ("revoke", 401),
        ("revoke", 400),
        ("revoke", 400),
        ("conversations", 404),
    ]
    assert all(ADMIN_TOKEN not in str(r.__dict__) for r in caplog.records)


async def test_revoking_closes_the_live_socket_and_refuses_the_old_token(
    vernis_factory: VernisFactory,
) -> None:
    """Revoke: the member's open socket closes with 4401 at once, their old token is refused by the handshake and the HTTP API, a token issued after the revocation is let in, and another member's socket stays open."""
    async with vernis_factory(admin_token=ADMIN_TOKEN, auth_check_interval=300) as vernis:
        old_token = vernis.token("member@acme.test")
        async with vernis.opened(token=old_token) as revoked, vernis.opened("owner@acme.test") as other:
            response = await admin(vernis, "POST", "revoke", json={"org": "acme", "sub": "member@acme.test"})
            assert response.status_code == 200
            assert await closed_with(revoked) == 4401
            await other.send("ping")
            await other.expect("pong")
        body = response.json()
        assert (body["org"], body["sub"]) == ("acme", "member@acme.test")
        with pytest.raises(InvalidStatus) as refused:
            async with vernis.connect(token=old_token):
                pass
        assert refused.value.response.status_code == 403
        async with httpx.AsyncClient(base_url=vernis.http_url) as http:
            config = await http.get("/api/assistant/config", headers={"Authorization": f"Bearer {old_token}"})
        assert config.status_code == 401
        now = int(time.time())
        newer = jwt.encode(
            {"sub": "member@acme.test", "org": "acme", "iat": now + 2, "exp": now + 600},
            JWT_SECRET,
            algorithm="HS256",
        )
        async with vernis.opened(token=newer) as again:
            await again.send("ping")
            await again.expect("pong")


async def test_export_and_erase_touch_only_that_member(vernis_factory: VernisFactory) -> None:
    """Export returns the member's conversations with their messages and nobody else's; erase deletes exactly those (messages and approvals too), leaves another member's, and keeps the audit of the member's writes."""
    async with vernis_factory(admin_token=ADMIN_TOKEN) as vernis:
        notification_id = await add_notification(vernis)
        async with vernis.opened("member@acme.test") as client:
            confirmation, _ = await preview(client, vernis, notification_id)
            await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True)
            await client.expect("tool_call_completed")
            await client.send("new_conversation")
            await client.until("history_end")
            await client.answer("a second conversation")
        async with vernis.opened("owner@acme.test") as other:
            await other.answer("the owner's own words")
        member = {"org": "acme", "sub": "member@acme.test"}
        exported = await admin(vernis, "GET", "conversations", params=member)
        assert exported.status_code == 200
        body = exported.json()
        assert (body["org"], body["sub"]) == ("acme", "member@acme.test")
        conversations = body["conversations"]
        assert len(conversations) == 2
        contents = [m["content"] for c in conversations for m in c["messages"]]
        assert "mark it read please" in contents
        assert "a second conversation" in contents
        assert "the owner's own words" not in contents
        assert any(m["tool_calls"] for c in conversations for m in c["messages"])
        before = await sql(vernis, "SELECT count(*) AS n FROM assistant_message")
        erased = await admin(vernis, "DELETE", "conversations", params=member)
        assert erased.status_code == 200
        messages = sum(len(c["messages"]) for c in conversations)
        assert erased.json() == {
            "org": "acme",
            "sub": "member@acme.test",
            "conversations": 2,
            "messages": messages,
            "attachments": 0,
        }
        after = await sql(vernis, "SELECT count(*) AS n FROM assistant_message")
        assert after[0].n == before[0].n - messages
        again = await admin(vernis, "GET", "conversations", params=member)
        assert again.json()["conversations"] == []
        owners = await admin(vernis, "GET", "conversations", params={"org": "acme", "sub": "owner@acme.test"})
        assert next(m["content"] for c in owners.json()["conversations"] for m in c["messages"]) == (
            "the owner's own words"
        )
        assert await sql(vernis, "SELECT id FROM assistant_approval") == []
        assert await audit(vernis) == [("mark_notification_read", "ok")]
        named = await sql(vernis, "SELECT m.external_id FROM audit_log a JOIN member m ON m.id = a.member_id")
        assert [row.external_id for row in named] == ["member@acme.test"]
