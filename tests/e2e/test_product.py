"""Product mode (SPEC §2, §13): no demo routes, the host's own RS256 tokens with string ids, members
made just in time, and `authenticate` refreshing a live socket's token."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import BaseModel
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.fixtures.server import Vernis, VernisFactory
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis.tools import ToolContext, Toolkit
from vernis.tools.catalog import Catalog

PRIVATE_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PUBLIC_PEM = (
    PRIVATE_KEY.public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)


def host_token(sub: str = "agent-42", org: str = "acme-support", ttl: float = 600, **claims: Any) -> str:
    """A token as the host product signs it, with its private key."""
    now = int(time.time())
    payload = {"sub": sub, "org": org, "iat": now, "exp": now + int(ttl), **claims}
    return jwt.encode(payload, PRIVATE_KEY, algorithm="RS256")


class Ticket(BaseModel):
    ticket_id: str


class Seen:
    """What the product's tool was called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, frozenset[str]]] = []

    async def open_ticket(self, ctx: ToolContext[None], args: Ticket) -> dict[str, Any]:
        """Open a ticket."""
        self.calls.append((ctx.member.sub, ctx.member.org, ctx.token, ctx.permissions))
        return {"ticket": args.ticket_id, "status": "open"}


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
async def product(vernis_factory: VernisFactory, seen: Seen) -> AsyncIterator[Vernis]:
    """Vernis as a product runs it: no demo, the host's public key, one toolkit of the product's."""
    kit: Toolkit[None] = Toolkit("tickets", role_grants={"agent": ["ticket:view"]})
    kit.tool(permission="ticket:view", category="Tickets")(seen.open_ticket)
    async with vernis_factory(
        catalog=Catalog([kit]),
        demo=False,
        jwt_secret=None,
        jwt_public_key=PUBLIC_PEM,
        jwt_issuer="https://host.test",
    ) as server:
        yield server


async def test_no_route_lists_members_or_signs_tokens(product: Vernis) -> None:
    """In product mode the demo's login, member list and pages do not exist; the embeddable UI does."""
    async with httpx.AsyncClient(base_url=product.http_url) as http:
        for path in ("/", "/login", "/contacts", "/calls"):
            assert (await http.get(path)).status_code == 404, path
        assert (await http.post("/login", data={"email": "owner@acme.test"})).status_code in (404, 405)
        assert (await http.get("/static/vernis/assistant.js")).status_code == 200
        assert (await http.get("/api/assistant/config")).status_code == 401


async def test_host_rs256_token_with_string_ids_runs_a_conversation_with_tools(
    product: Vernis, seen: Seen
) -> None:
    """A host-signed RS256 token for an unknown user makes the member just in time; the product's tool gets their ids and token."""
    token = host_token(role="agent", name="Ada Agent", email="ada@host.test", iss="https://host.test")
    product.scripted.add(Reply(tool_calls=[ScriptedToolCall("open_ticket", {"ticket_id": "T-7"})]))
    product.scripted.add("Ticket T-7 is open.")
    async with product.connect(None, token=token) as client:
        await client.expect("conversation_loaded", "history_end")
        events = await client.answer("open T-7")
    completed = next(e for e in events if e["type"] == "tool_call_completed")
    assert completed["result"] == {"ok": True, "data": {"ticket": "T-7", "status": "open"}}
    assert "Ticket T-7 is open." in "".join(e["content"] for e in events if e["type"] == "text_delta")
    ((sub, org, forwarded, permissions),) = seen.calls
    assert (sub, org, forwarded) == ("agent-42", "acme-support", token)
    assert permissions == {"assistant:use", "ticket:view"}
    system = product.scripted.requests[0]["messages"][0]["content"]
    assert "- Name: Ada Agent\n- Role: agent\n- Email: ada@host.test" in system
    assert "## Organization\n- Name: acme-support" in system

    async with httpx.AsyncClient(base_url=product.http_url) as http:
        config = await http.get("/api/assistant/config", headers={"Authorization": f"Bearer {token}"})
    assert config.status_code == 200
    assert config.json() == {
        "name": "Vernis",
        "greeting": None,
        "avatar_url": None,
        "scripted": False,
        "quick_actions": [],
        "pages": [],
        "image_origins": [],
        "navigable": [],
        "reviewer": False,
    }


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: host_token(iss="https://other.test"), id="wrong-issuer"),
        pytest.param(lambda: host_token(iss="https://host.test", ttl=-120), id="expired"),
        pytest.param(
            lambda: jwt.encode(
                {"sub": "a", "exp": int(time.time()) + 60, "iss": "https://host.test"}, PRIVATE_KEY, "RS256"
            ),
            id="no-org",
        ),
        pytest.param(
            lambda: jwt.encode(
                {"sub": "a", "org": "b", "exp": int(time.time()) + 60, "iss": "https://host.test"},
                "x" * 40,
                algorithm="HS256",
            ),
            id="hs256-not-allowed",
        ),
        pytest.param(
            lambda: host_token(iss="https://host.test", role="agent", permissions=["ticket:view"]),
            id="no-assistant-use",
        ),
    ],
)
async def test_bad_host_tokens_are_refused_before_accept_and_never_logged(
    product: Vernis, make: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong issuer, an expired token, a missing org claim, a foreign algorithm or no assistant:use: 403, and the log holds no token."""
    token = make()
    caplog.set_level(logging.INFO)
    with pytest.raises(InvalidStatus) as refused:
        async with product.connect(None, token=token):
            pass
    assert refused.value.response.status_code == 403
    assert "handshake refused" in caplog.text
    assert token not in caplog.text
    assert token.split(".")[2] not in caplog.text


async def test_authenticate_refreshes_the_token_of_a_live_socket(product: Vernis, seen: Seen) -> None:
    """`authenticate` with a new token for the same member keeps the socket; its permissions apply from the next message."""
    first = host_token(role="viewer", iss="https://host.test", ttl=40)
    async with product.connect(None, token=first) as client:
        await client.expect("conversation_loaded", "history_end")
        product.scripted.add("No tools for you.")
        await client.answer("hello")
        assert "tools" not in product.scripted.requests[-1]
        await client.send("authenticate", token=host_token(role="agent", iss="https://host.test", ttl=3600))
        await client.send("ping")
        await client.until("pong")  # the first answer's title may come first
        product.scripted.add("Now I can open tickets.")
        await client.answer("and now?")
        offered = [tool["function"]["name"] for tool in product.scripted.requests[-1]["tools"]]
        assert offered == ["open_ticket"]


@pytest.mark.parametrize(
    "replacement",
    [
        pytest.param(
            lambda: host_token(sub="someone-else", role="agent", iss="https://host.test"), id="other-member"
        ),
        pytest.param(lambda: host_token(role="agent", iss="https://host.test", ttl=-120), id="expired"),
        pytest.param(lambda: "not-a-token", id="garbage"),
    ],
)
async def test_authenticate_with_another_member_or_a_bad_token_closes_4401(
    product: Vernis, replacement: Any
) -> None:
    """`authenticate` with a token for another member, an expired or an invalid one closes the socket with 4401."""
    async with product.connect(None, token=host_token(role="agent", iss="https://host.test")) as client:
        await client.expect("conversation_loaded", "history_end")
        await client.send("authenticate", token=replacement())
        with pytest.raises(ConnectionClosed) as closed:
            await client.recv()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4401


async def test_the_panel_config_carries_the_greeting_and_avatar_of_the_configuration(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """`[assistant] greeting` and `avatar_url` reach the panel through /api/assistant/config; unset, both are null."""
    config = tmp_path / "vernis.toml"
    config.write_text(
        '[assistant]\nname = "Ada"\ngreeting = "  Ask me about your customers.  "\navatar_url = "/static/ada.png"\n'
    )
    async with vernis_factory(config=config) as vernis, httpx.AsyncClient(base_url=vernis.http_url) as http:
        shown = (
            await http.get("/api/assistant/config", headers={"Authorization": f"Bearer {vernis.token()}"})
        ).json()
    assert (shown["name"], shown["greeting"], shown["avatar_url"]) == (
        "Ada",
        "Ask me about your customers.",
        "/static/ada.png",
    )
    async with vernis_factory() as vernis, httpx.AsyncClient(base_url=vernis.http_url) as http:
        shown = (
            await http.get("/api/assistant/config", headers={"Authorization": f"Bearer {vernis.token()}"})
        ).json()
    assert (shown["greeting"], shown["avatar_url"]) == (None, None)
