"""`feedback.created` (SPEC §22) end to end: a member rates an answer over a real socket on a real
Vernis, and a real receiver on loopback gets the signed event."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.server import VernisFactory
from tests.ops.test_feedback_export import rate
from tests.ops.test_webhooks import FAST, SECRET, delivered
from tests.ops.webhook_receiver import receiver, verify


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """Through a real server on SQLite (the outbox on both databases: tests/conversation/test_feedback.py)."""
    name: str = request.param
    return name


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_SECRET", SECRET)


async def test_a_rating_is_posted_with_its_comment_only_to_include_text_receivers(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """A thumbs-down with a comment is POSTed signed as `feedback.created` to two receivers: ids, rating and model to both, the comment only to the include_text one."""
    async with receiver() as plain, receiver() as chatty:
        config = tmp_path / "vernis.toml"
        config.write_text(
            "".join(
                f"""
[[webhooks]]
url = "{url}"
events = ["feedback.created"]
secret_env = "HOOK_SECRET"
include_text = {include_text}
allow_private = true
"""
                for url, include_text in ((plain.url, "false"), (chatty.url, "true"))
            )
        )
        async with vernis_factory(config=config, **FAST) as vernis:
            async with vernis.opened() as client:
                start = await rate(client, "How many calls today?", "down", "It was eleven, not twelve.")
            got = {"plain": await plain.next(), "chatty": await chatty.next()}
            rows = await delivered(vernis, 2)
    for received in got.values():
        assert verify(SECRET, received.headers["vernis-signature"], received.body)
        assert received.json["type"] == received.headers["vernis-event"] == "feedback.created"
        data = received.json["data"]
        assert data["message_id"] == start["message_id"]
        assert data["conversation_id"] == start["conversation_id"]
        assert (data["rating"], data["org"], data["sub"]) == ("down", "acme", "member@acme.test")
        assert data["model"] == vernis.settings.llm_model
    assert "comment" not in got["plain"].json["data"]
    assert b"eleven" not in got["plain"].body
    assert got["chatty"].json["data"]["comment"] == "It was eleven, not twelve."
    assert sorted((row.event, row.status) for row in rows) == [("feedback.created", "delivered")] * 2
