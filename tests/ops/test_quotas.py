"""Token quotas (SPEC §15) through a real server: a small budget, the refusal's fields, no model call
and nothing stored when refused, other members and organizations unaffected, an organization's quota
shared by its members, the provider's usage or an estimate when it sends none; and the limits the
configuration's overrides give.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fixtures.server import Client, Vernis, VernisFactory, text_of
from tests.ops.helpers import chat_requests, is_chat, sample, scrape
from vernis.config import load_config
from vernis.exceptions import ConfigError
from vernis.limits.quotas import QuotaLimits, QuotaPolicy
from vernis.limits.usage import estimate_tokens
from vernis.model.scripted import Quirk, Reply


async def stored_messages(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int((await connection.execute(sa.text("SELECT count(*) FROM assistant_message"))).scalar_one())


async def audit_rows(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        return int((await connection.execute(sa.text("SELECT count(*) FROM audit_log"))).scalar_one())


async def refused(client: Client, content: str) -> dict[str, object]:
    """Send a message that must be refused; the error event."""
    await client.send("user_message", content=content)
    events = await client.until("error")
    assert [e["type"] for e in events] == ["error"], events
    return events[0]


def next_utc_midnight() -> datetime:
    today = datetime.now(UTC).date()
    return datetime(today.year, today.month, today.day, tzinfo=UTC) + timedelta(days=1)


async def spend(vernis: Vernis, client: Client, tokens: tuple[int, int], content: str = "spend") -> None:
    """One answered message whose provider reports `tokens` (input, output)."""
    vernis.scripted.add(Reply("Done.", usage=tokens), match=is_chat)
    events = await client.answer(content)
    assert events[-1]["type"] == "assistant_end"
    assert events[-1]["stopped"] is False
    assert text_of(events) == "Done."


async def test_a_member_over_the_daily_quota_is_refused_without_a_model_call_or_a_stored_row(
    vernis_factory: VernisFactory, engine: AsyncEngine
) -> None:
    """Past the member's daily quota the next message gets quota_exceeded (scope, limit, used, reset_at, retry_after_ms, a sentence) with no upstream request, no stored message and no guard audit row; the answer that crossed the limit finished; another member is unaffected."""
    async with vernis_factory(member_daily_tokens=100) as vernis:
        async with vernis.opened("member@acme.test") as client:
            await spend(vernis, client, (80, 30))  # crosses the limit: it still finishes
            await client.until("title_updated")
            requests, rows = len(chat_requests(vernis)), await stored_messages(engine)
            audited = await audit_rows(engine)
            # A card number, which a guard would redact and audit: refused before the guards run.
            error = await refused(client, "Charge 4111 1111 1111 1111 please")
            assert len(chat_requests(vernis)) == requests
            assert await stored_messages(engine) == rows
            assert await audit_rows(engine) == audited
        assert error["code"] == "quota_exceeded"
        assert (error["scope"], error["limit"], error["used"]) == ("member", 100, 110)
        reset_at = datetime.fromisoformat(str(error["reset_at"]))
        assert reset_at == next_utc_midnight()
        retry_after = int(str(error["retry_after_ms"]))
        assert 0 < retry_after <= 24 * 3600 * 1000
        assert abs((reset_at - datetime.now(UTC)).total_seconds() * 1000 - retry_after) < 60_000
        assert "today" in str(error["message"])
        assert "UTC" in str(error["message"])
        async with vernis.opened("owner@acme.test") as other:
            events = await other.answer("hello from the owner")
            assert events[-1]["type"] == "assistant_end"
        samples = await scrape(vernis.http_url)
        assert sample(samples, "vernis_messages_refused_total", reason="quota_exceeded") == 1


async def test_an_organization_quota_is_shared_by_its_members_and_no_one_elses(
    vernis_factory: VernisFactory,
) -> None:
    """Tokens one member spends count against the organization's monthly quota for another member of it, who is refused with scope organization; a member of another organization is answered."""
    async with vernis_factory(org_monthly_tokens=100) as vernis:
        async with vernis.opened("member@acme.test") as first:
            await spend(vernis, first, (60, 10))
            await first.until("title_updated")
        async with vernis.opened("owner@acme.test") as second:
            await spend(vernis, second, (20, 15))  # 70 + 35 = 105: over, but this one was allowed
            await second.until("title_updated")
        async with vernis.opened("member@acme.test") as first:
            error = await refused(first, "anything")
        assert (error["code"], error["scope"], error["limit"], error["used"]) == (
            "quota_exceeded",
            "organization",
            100,
            105,
        )
        today = datetime.now(UTC).date()
        first_of_next = (today.replace(day=1) + timedelta(days=32)).replace(day=1)
        assert datetime.fromisoformat(str(error["reset_at"])).date() == first_of_next
        async with vernis.opened("owner@globex.test") as elsewhere:
            events = await elsewhere.answer("hello from globex")
            assert events[-1]["type"] == "assistant_end"


async def test_without_the_providers_usage_the_tokens_are_estimated(vernis_factory: VernisFactory) -> None:
    """A provider that sends no usage: the answer's tokens are estimated from its text (about four characters a token) and count against the quota."""
    async with vernis_factory(member_daily_tokens=1) as vernis:
        vernis.scripted.add(
            Reply("A reply of some length, long enough.", quirks=Quirk.NO_USAGE), match=is_chat
        )
        async with vernis.opened() as client:
            events = await client.answer("estimate me")
            assert events[-1]["type"] == "assistant_end"
            await client.until("title_updated")
            error = await refused(client, "again")
    (request,) = chat_requests(vernis)[:1]
    prompt = estimate_tokens(m["content"] for m in request["messages"] if isinstance(m.get("content"), str))
    assert error["used"] == prompt + estimate_tokens(["A reply of some length, long enough."])


def test_overrides_per_role_and_per_organization(tmp_path: Path) -> None:
    """The limits: a role's daily quota wins over the organization's, which wins over the setting, which wins over the file's default; 0 means none."""
    path = tmp_path / "vernis.toml"
    path.write_text(
        "[quotas]\nmember_daily_tokens = 10\norg_monthly_tokens = 1000\n"
        "[quotas.roles.admin]\nmember_daily_tokens = 500\n"
        '[quotas.organizations."acme"]\nmember_daily_tokens = 50\norg_monthly_tokens = 0\n'
    )
    quotas = load_config(path).quotas
    from_file = QuotaPolicy(quotas)
    assert from_file.limits("member", "globex") == QuotaLimits(10, 1000)
    assert from_file.limits("member", "acme") == QuotaLimits(50, None)
    assert from_file.limits("admin", "acme") == QuotaLimits(500, None)
    with_settings = QuotaPolicy(quotas, member_daily_tokens=20, org_monthly_tokens=0)
    assert with_settings.limits("member", "globex") == QuotaLimits(20, None)
    assert with_settings.limits("member", "acme") == QuotaLimits(50, None)
    assert QuotaPolicy().limits("member", "acme") == QuotaLimits(None, None)


async def test_used_tokens_survive_a_restart(vernis_factory: VernisFactory) -> None:
    """The counters start from the stored usage: after a restart of a single instance (memory counters) the member is still over the quota."""
    async with vernis_factory(member_daily_tokens=50) as vernis, vernis.opened() as client:
        await spend(vernis, client, (40, 20))
        await client.until("title_updated")
    async with vernis_factory(member_daily_tokens=50) as restarted, restarted.opened() as client:
        error = await refused(client, "after the restart")
    assert (error["code"], error["used"]) == ("quota_exceeded", 60)


def test_a_negative_quota_in_the_configuration_is_refused_naming_the_key(tmp_path: Path) -> None:
    """`member_daily_tokens = -1` stops the start with a message naming the file and the key."""
    path = tmp_path / "vernis.toml"
    path.write_text('[quotas.organizations."acme"]\nmember_daily_tokens = -1\n')
    with pytest.raises(ConfigError, match=r"quotas\.organizations\.acme\.member_daily_tokens"):
        load_config(path)
