"""Bring your own tools, end to end: Vernis in product mode (no demo) verifying the host's RS256 tokens, the
helpdesk toolkit loaded by its entry-point name from vernis.toml, its tools calling the helpdesk API with
the member's own token, over a real `websockets` client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import Client, Vernis, VernisFactory, text_of, types_of
from tests.helpdesk.support import Recorder, RsaKey
from tests.utils import free_port, run_server
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import last_user_text, prompt_text
from vernis_helpdesk.api import create_api

Body = Mapping[str, Any]
ORG = "acme-support"
AGENT = {
    "sub": "agent-42",
    "org": ORG,
    "role": "agent",
    "name": "Alex Agent",
    "email": "alex@acme-support.example",
}
VIEWER = {
    "sub": "viewer-9",
    "org": ORG,
    "role": "viewer",
    "name": "Vic Viewer",
    "email": "vic@acme-support.example",
}


def is_chat(body: Body) -> bool:
    return body.get("model") == SCRIPTED_CHAT_MODEL


def chat_about(words: str) -> Callable[[Body], bool]:
    """A chat request answering the user's message that contains `words`."""
    return lambda body: (
        is_chat(body) and body["messages"][-1]["role"] == "user" and words in last_user_text(body)
    )


def after_tool(name: str) -> Callable[[Body], bool]:
    """The model's turn after the result of a `name` call."""

    def match(body: Body) -> bool:
        if not is_chat(body) or body["messages"][-1]["role"] != "tool":
            return False
        calls = [
            call for m in body["messages"] if m["role"] == "assistant" for call in m.get("tool_calls") or ()
        ]
        return bool(calls) and calls[-1]["function"]["name"] == name

    return match


def offered(body: Body) -> list[str]:
    """The toolkit's tools offered to the model, less Vernis's own `ask_user` (offered to every member)."""
    names = (tool["function"]["name"] for tool in body.get("tools") or ())
    return [name for name in names if name != "ask_user"]


@dataclass
class Product:
    vernis: Vernis
    api_url: str
    api: Recorder
    key: RsaKey

    def token(self, claims: Mapping[str, str]) -> str:
        """A token as the host signs it: RS256, with its private key."""
        return self.key.sign(claims)

    @asynccontextmanager
    async def opened(self, token: str) -> AsyncIterator[Client]:
        async with self.vernis.connect(email=None, token=token) as client:
            await client.until("history_end")
            yield client

    async def ticket(self, token: str, ticket_id: str) -> dict[str, Any]:
        """The ticket as the helpdesk API holds it, read as the host's user."""
        async with httpx.AsyncClient(base_url=self.api_url) as client:
            response = await client.get(f"/tickets/{ticket_id}", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text
        ticket: dict[str, Any] = response.json()
        return ticket


def write_config(tmp_path: Path, api_url: str) -> Path:
    path = tmp_path / "vernis.toml"
    path.write_text(
        f'[assistant]\nname = "Ada"\n\n[[toolkits]]\nname = "helpdesk"\napi_url = "{api_url}"\ntimeout = 5\n',
        encoding="utf-8",
    )
    return path


@asynccontextmanager
async def product_vernis(
    factory: VernisFactory, key: RsaKey, tmp_path: Path, api_url: str
) -> AsyncIterator[Vernis]:
    """Vernis as a product runs it: no demo, no secret, only the host's public key; toolkits from vernis.toml."""
    async with factory(
        demo=False, jwt_secret=None, jwt_public_key=key.public_pem, config=write_config(tmp_path, api_url)
    ) as vernis:
        yield vernis


@pytest.fixture
async def product(vernis_factory: VernisFactory, rsa_key: RsaKey, tmp_path: Path) -> AsyncIterator[Product]:
    """The helpdesk API verifying the host's RS256 tokens with its public key, and Vernis configured to call it."""
    api = Recorder(create_api(public_key=rsa_key.public_pem))
    async with run_server(api) as server:
        api_url = f"http://127.0.0.1:{server.config.port}"
        async with product_vernis(vernis_factory, rsa_key, tmp_path, api_url) as vernis:
            yield Product(vernis, api_url, api, rsa_key)


async def test_agent_reads_real_tickets_then_approves_a_status_change(product: Product) -> None:
    """An agent's question runs find_tickets against the helpdesk API with their own token, the answer follows; then set_ticket_status previews, waits for confirm_tool, and changes the ticket in the API."""
    token = product.token(AGENT)
    scripted = product.vernis.scripted
    find = ScriptedToolCall("find_tickets", {"status": "open", "assigned_to_me": True}, call_id="call_find")
    scripted.add(Reply("Let me look.", tool_calls=[find]), match=chat_about("my open tickets"))
    scripted.add(Reply("You have two open tickets; T-1001 is urgent."), match=after_tool("find_tickets"))
    async with product.opened(token) as client:
        events = await client.answer("List my open tickets, most urgent first.")
        kinds = types_of(events)
        assert kinds[:3] == ["conversation_created", "assistant_start", "text_delta"]
        assert kinds[-1] == "assistant_end"
        started = next(e for e in events if e["type"] == "tool_call_started")
        assert (started["call_id"], started["tool_name"]) == ("call_find", "find_tickets")
        (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
        assert completed["status"] == "ok"
        found = completed["result"]["data"]["tickets"]
        assert [(t["id"], t["subject"]) for t in found] == [
            ("T-1001", "Cannot log in after the password reset"),
            ("T-1002", "Invoice 2291 shows the wrong VAT rate"),
        ]
        answer = text_of(events)
        assert answer.startswith("Let me look.")
        assert answer.endswith("You have two open tickets; T-1001 is urgent.")
        # The API was asked as the member: with the very token the host signed for them.
        assert product.api.seen == [("GET", "/tickets", f"Bearer {token}")]
        # The model's next turn read the API's real data, and was offered every tool an agent holds.
        follow_up = [body for body in scripted.requests if after_tool("find_tickets")(body)][-1]
        assert "Cannot log in after the password reset" in follow_up["messages"][-1]["content"]
        assert offered(follow_up) == ["find_tickets", "get_ticket", "set_ticket_status", "add_ticket_comment"]
        await client.until("title_updated")

        solve = ScriptedToolCall(
            "set_ticket_status", {"ticket_id": "T-1001", "status": "solved"}, call_id="call_solve"
        )
        scripted.add(Reply(tool_calls=[solve]), match=chat_about("as solved"))
        scripted.add(Reply("Shall I mark it solved?"), match=after_tool("set_ticket_status"))
        events = await client.answer(
            "Mark this one as solved, please.", page_context={"route": "/tickets/T-1001"}
        )
        (confirmation,) = [e for e in events if e["type"] == "confirmation_required"]
        assert (confirmation["call_id"], confirmation["tool_name"]) == ("call_solve", "set_ticket_status")
        assert confirmation["preview"]["changes"] == {"status": {"from": "open", "to": "solved"}}
        (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
        assert completed["status"] == "needs_confirmation"
        system = prompt_text([body for body in scripted.requests if chat_about("as solved")(body)][-1])
        assert 'the ticket "Cannot log in after the password reset" (id T-1001)' in system
        assert (await product.ticket(token, "T-1001"))["status"] == "open"

        await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=True)
        (done,) = await client.expect("tool_call_completed")
        assert (done["call_id"], done["status"]) == ("call_solve", "ok")
        assert done["result"]["data"]["status"] == {"from": "open", "to": "solved"}
    ticket = await product.ticket(token, "T-1001")
    assert (ticket["status"], ticket["updated_by"]) == ("solved", "agent-42")
    writes = [seen for seen in product.api.seen if seen[0] == "POST"]
    assert writes == [("POST", "/tickets/T-1001/status", f"Bearer {token}")]


async def test_a_ticket_comes_with_its_thread_as_the_toolkits_own_block(product: Product) -> None:
    """get_ticket's result carries a helpdesk.ticket_thread block (the toolkit's declared kind, checked against its schema) beside the data the model reads."""
    token = product.token(AGENT)
    scripted = product.vernis.scripted
    get = ScriptedToolCall("get_ticket", {"ticket_id": "T-1001"}, call_id="call_get")
    scripted.add(Reply(tool_calls=[get]), match=chat_about("show T-1001"))
    scripted.add(Reply("Here it is."), match=after_tool("get_ticket"))
    async with product.opened(token) as client:
        events = await client.answer("Please show T-1001.")
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["status"] == "ok"
    ticket = completed["result"]["data"]
    (thread,) = completed["ui"]
    assert thread["kind"] == "helpdesk.ticket_thread"
    assert thread["data"]["ticket_id"] == ticket["id"] == "T-1001"
    assert thread["data"]["url"] == "/tickets/T-1001"
    assert [c["body"] for c in thread["data"]["comments"]] == [c["body"] for c in ticket["comments"]]
    follow_up = [body for body in scripted.requests if after_tool("get_ticket")(body)][-1]
    assert "helpdesk.ticket_thread" not in follow_up["messages"][-1]["content"]


async def test_a_viewer_is_not_offered_the_writes(product: Product) -> None:
    """A viewer's model is offered only the reads, a write it calls anyway is forbidden, and its quick actions are the reads'."""
    token = product.token(VIEWER)
    scripted = product.vernis.scripted
    solve = ScriptedToolCall(
        "set_ticket_status", {"ticket_id": "T-1001", "status": "solved"}, call_id="call_solve"
    )
    scripted.add(Reply(tool_calls=[solve]), match=chat_about("solve T-1001"))
    scripted.add(Reply("I am not allowed to change tickets for you."), match=after_tool("set_ticket_status"))
    async with product.opened(token) as client:
        events = await client.answer("Please solve T-1001.")
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["status"] == "error"
    assert completed["result"]["error"]["code"] == "forbidden"
    assert "confirmation_required" not in types_of(events)
    first = next(body for body in scripted.requests if chat_about("solve T-1001")(body))
    assert offered(first) == ["find_tickets", "get_ticket"]
    assert not [seen for seen in product.api.seen if seen[0] == "POST"]
    async with httpx.AsyncClient(base_url=product.vernis.http_url) as http:
        response = await http.get("/api/assistant/config", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    config = response.json()
    assert config["name"] == "Ada"
    assert [a["label"] for a in config["quick_actions"]] == ["My open tickets", "Summarize this ticket"]


async def test_the_answer_goes_on_when_the_helpdesk_is_down(
    vernis_factory: VernisFactory, rsa_key: RsaKey, tmp_path: Path
) -> None:
    """With nothing listening at the API's URL the tool result is a retryable `unavailable` error and the model answers."""
    async with product_vernis(vernis_factory, rsa_key, tmp_path, f"http://127.0.0.1:{free_port()}") as vernis:
        find = ScriptedToolCall("find_tickets", {}, call_id="call_find")
        vernis.scripted.add(Reply(tool_calls=[find]), match=chat_about("tickets"))
        vernis.scripted.add(Reply("The helpdesk is unavailable right now."), match=after_tool("find_tickets"))
        async with vernis.connect(email=None, token=rsa_key.sign(AGENT)) as client:
            await client.until("history_end")
            events = await client.answer("Any tickets?")
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["status"] == "error"
    assert completed["result"]["error"] == {
        "code": "unavailable",
        "message": "The helpdesk cannot be reached.",
        "retryable": True,
        "hint": "Try once more; if it fails again, tell the user the helpdesk is unavailable right now.",
    }
    assert text_of(events) == "The helpdesk is unavailable right now."
    assert events[-1]["type"] == "assistant_end"
