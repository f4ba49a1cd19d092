"""`GET /api/assistant/usage` (SPEC §15) through a real server: a member's own tokens and quotas;
with `assistant:admin`, the organization's usage per member and per day, never another
organization's; bad input refused.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from tests.fixtures.server import Vernis, VernisFactory
from tests.ops.helpers import is_chat
from tests.ops.test_quotas import spend
from vernis.model.scripted import Reply


async def usage(vernis: Vernis, email: str, query: str = "") -> httpx.Response:
    async with httpx.AsyncClient(base_url=vernis.http_url) as http:
        return await http.get(
            f"/api/assistant/usage{query}", headers={"Authorization": f"Bearer {vernis.token(email)}"}
        )


async def spent(vernis: Vernis) -> None:
    """member@acme.test: 40 tokens in two answers; owner@acme.test: 7; owner@globex.test: 1,000."""
    async with vernis.opened("member@acme.test") as client:
        await spend(vernis, client, (10, 5), "first")
        await client.until("title_updated")
        await spend(vernis, client, (20, 5), "second")
    async with vernis.opened("owner@acme.test") as client:
        await spend(vernis, client, (4, 3))
    async with vernis.opened("owner@globex.test") as client:
        await spend(vernis, client, (900, 100))


async def test_a_member_sees_their_own_tokens_and_quotas(vernis_factory: VernisFactory) -> None:
    """A member gets their tokens today and this month, their daily quota, their organization's month against its quota, and no per-member breakdown."""
    async with vernis_factory(member_daily_tokens=1000, org_monthly_tokens=50_000) as vernis:
        await spent(vernis)
        response = await usage(vernis, "member@acme.test")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    body: dict[str, Any] = response.json()
    today = datetime.now(UTC).date()
    assert (body["sub"], body["org"]) == ("member@acme.test", "acme")
    assert body["today"]["day"] == today.isoformat()
    assert (body["today"]["tokens"], body["today"]["quota"]) == (40, 1000)
    assert body["today"]["reset_at"].endswith("Z")
    assert body["month"] == {"start": today.replace(day=1).isoformat(), "tokens": 40}
    organization = body["organization"]["month"]
    assert (organization["tokens"], organization["quota"]) == (47, 50_000)
    assert "days" not in body


async def test_an_admin_sees_the_organization_per_member_and_day_and_no_other(
    vernis_factory: VernisFactory,
) -> None:
    """An owner (assistant:admin) gets each member's tokens per day of their organization only; the other organization's admin sees only theirs."""
    async with vernis_factory() as vernis:
        await spent(vernis)
        acme = (await usage(vernis, "owner@acme.test")).json()
        globex = (await usage(vernis, "owner@globex.test")).json()
    today = datetime.now(UTC).date().isoformat()
    rows = {row["sub"]: row for row in acme["days"]}
    assert set(rows) == {"member@acme.test", "owner@acme.test"}
    assert rows["member@acme.test"] == {
        "day": today,
        "sub": "member@acme.test",
        "name": rows["member@acme.test"]["name"],
        "input_tokens": 30,
        "output_tokens": 10,
        "cached_tokens": 0,
        "tokens": 40,
        "answers": 2,
    }
    assert rows["owner@acme.test"]["tokens"] == 7
    assert acme["today"]["quota"] is None
    assert [row["sub"] for row in globex["days"]] == ["owner@globex.test"]
    assert globex["organization"]["month"]["tokens"] == 1000


async def test_usage_refuses_no_token_and_a_bad_since(vernis_factory: VernisFactory) -> None:
    """Without a token the route answers 401; an admin's malformed or too-old `since` answers 400 with a clear message."""
    async with vernis_factory() as vernis:
        async with httpx.AsyncClient(base_url=vernis.http_url) as http:
            assert (await http.get("/api/assistant/usage")).status_code == 401
        bad = await usage(vernis, "owner@acme.test", "?since=yesterday")
        old = await usage(vernis, "owner@acme.test", "?since=2001-01-01")
        earlier = await usage(vernis, "owner@acme.test", f"?since={datetime.now(UTC).date().isoformat()}")
    assert bad.status_code == 400
    assert "YYYY-MM-DD" in bad.json()["error"]["message"]
    assert old.status_code == 400
    assert earlier.status_code == 200


async def test_regenerated_and_edited_answers_count_like_new_ones(vernis_factory: VernisFactory) -> None:
    """An answer written again (`regenerate`) and one to an edited message (`edit_message`) add their tokens to the member's usage, as a new message's answer does."""
    async with vernis_factory() as vernis:
        vernis.scripted.add(Reply("First.", usage=(10, 1)), match=is_chat)
        vernis.scripted.add(Reply("Again.", usage=(20, 2)), match=is_chat)
        vernis.scripted.add(Reply("Edited.", usage=(30, 3)), match=is_chat)
        async with vernis.opened("member@acme.test") as client:
            first = await client.answer("hello")
            await client.until("title_updated")
            await client.send("regenerate")
            await client.until("assistant_end")
            await client.send("edit_message", message_id=first[-1]["message_id"], content="hello again")
            await client.until("assistant_end")
        response = await usage(vernis, "member@acme.test")
    assert response.json()["today"]["tokens"] == 11 + 22 + 33
