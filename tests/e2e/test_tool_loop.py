"""The tool loop through the whole server (SPEC §4 step 7, §5).

The app gets a toolkit of this module's own: real `Tool`s with pydantic argument models whose
async functions record every run. The scripted model calls them; the tests read what the client
sees, what the model was sent next (`scripted.requests`), and what was stored (a reconnect's replay).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from pydantic import BaseModel, Field

from tests.fixtures.server import Vernis, VernisFactory, text_of, types_of
from tests.utils import squash
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Fault, Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import last_user_text
from vernis.tools import Tool, ToolContext, Toolkit
from vernis.tools.catalog import Catalog

Body = Mapping[str, Any]


def is_chat(body: Body) -> bool:
    return body.get("model") == SCRIPTED_CHAT_MODEL


def offers_tools(body: Body) -> bool:
    return is_chat(body) and bool(body.get("tools"))


def after_tool_result(body: Body) -> bool:
    """A chat request whose last message is a tool result (the model's follow-up turn)."""
    return is_chat(body) and body["messages"][-1]["role"] == "tool"


def chat_about(word: str) -> Callable[[Body], bool]:
    """A chat request (first turn: its last message is the user's) whose user text contains `word`."""
    return lambda body: (
        is_chat(body) and body["messages"][-1]["role"] == "user" and word in last_user_text(body)
    )


def chat_requests(vernis: Vernis) -> list[dict[str, Any]]:
    return [body for body in vernis.scripted.requests if is_chat(body)]


def tool_names(body: Body) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or ()]


class Query(BaseModel):
    q: str = Field(min_length=1)


class NewAgent(BaseModel):
    name: str


class Probe:
    """The tools' real functions: each run is recorded as (tool name, argument)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str]] = []

    async def lookup(self, ctx: ToolContext[None], args: Query) -> dict[str, Any]:
        self.runs.append(("lookup_contact", args.q))
        return {"found": args.q, "member": ctx.member.email}

    async def create_agent(self, ctx: ToolContext[None], args: NewAgent) -> dict[str, Any]:
        self.runs.append(("create_agent", args.name))
        return {"created": args.name}

    def catalog(self) -> Catalog:
        # The demo's roles: everyone may look contacts up, only admins create agents.
        grants = {
            "viewer": ["contact:list"],
            "member": ["contact:list"],
            "admin": ["contact:list", "agent:create"],
        }
        return Catalog(
            [
                Toolkit(
                    "probe",
                    role_grants=grants,
                    tools=[
                        Tool(
                            "lookup_contact",
                            "Contacts",
                            "Find a contact.",
                            Query,
                            "contact:list",
                            False,
                            self.lookup,
                        ),
                        # Gated by an admin permission; declared without the write step (preview and
                        # approval) so that these tests are about the permission gate alone.
                        Tool(
                            "create_agent",
                            "Infrastructure",
                            "Create a voice agent.",
                            NewAgent,
                            "agent:create",
                            False,
                            self.create_agent,
                        ),
                    ],
                )
            ]
        )


LOOKUP_PRIYA = ScriptedToolCall("lookup_contact", {"q": "Priya"}, call_id="call_priya")
PRIYA_ENVELOPE = {"ok": True, "data": {"found": "Priya", "member": "member@acme.test"}}


async def test_tool_round_is_announced_then_followed_by_the_answer(vernis_factory: VernisFactory) -> None:
    """A tool call round sends `tool_call_started`, then `tool_call_completed` (ok, result envelope), then the model's follow-up text."""
    probe = Probe()
    async with vernis_factory(catalog=probe.catalog()) as vernis:
        vernis.scripted.add(Reply("Let me look.", tool_calls=[LOOKUP_PRIYA]), match=chat_about("Priya"))
        vernis.scripted.add("Priya Raman is in your contacts.", match=after_tool_result)
        async with vernis.opened() as client:
            events = await client.answer("who is Priya?")
        assert squash(types_of(events)) == [
            "conversation_created",
            "assistant_start",
            "text_delta",
            "tool_call_started",
            "tool_call_completed",
            "text_delta",
            "assistant_end",
        ]
        kinds = types_of(events)
        started = events[kinds.index("tool_call_started")]
        completed = events[kinds.index("tool_call_completed")]
        assert {k: started[k] for k in ("call_id", "tool_name", "arguments")} == {
            "call_id": "call_priya",
            "tool_name": "lookup_contact",
            "arguments": {"q": "Priya"},
        }
        assert {k: completed[k] for k in ("call_id", "tool_name", "status", "result")} == {
            "call_id": "call_priya",
            "tool_name": "lookup_contact",
            "status": "ok",
            "result": PRIYA_ENVELOPE,
        }
        # The text after the tool round starts a new paragraph.
        assert text_of(events[kinds.index("tool_call_completed") :]) == "\n\nPriya Raman is in your contacts."
        assert text_of(events) == "Let me look.\n\nPriya Raman is in your contacts."
        assert events[-1]["stopped"] is False
        assert probe.runs == [("lookup_contact", "Priya")]


async def test_next_request_carries_the_tool_calls_and_their_results(vernis_factory: VernisFactory) -> None:
    """After a tool round, the model's next request holds the assistant `tool_calls` message and the `tool` result message."""
    probe = Probe()
    async with vernis_factory(catalog=probe.catalog()) as vernis:
        vernis.scripted.add(Reply("Let me look.", tool_calls=[LOOKUP_PRIYA]), match=chat_about("Priya"))
        vernis.scripted.add("Found her.", match=after_tool_result)
        async with vernis.opened() as client:
            await client.answer("who is Priya?")
        first, second = chat_requests(vernis)
        assert tool_names(first) == ["lookup_contact"]
        assert second["messages"][: len(first["messages"])] == first["messages"]
        assistant, result = second["messages"][len(first["messages"]) :]
        assert assistant == {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "call_priya",
                    "type": "function",
                    "function": {"name": "lookup_contact", "arguments": '{"q":"Priya"}'},
                }
            ],
        }
        assert result["role"] == "tool"
        assert result["tool_call_id"] == "call_priya"
        assert json.loads(result["content"]) == PRIYA_ENVELOPE


async def test_a_model_that_keeps_calling_tools_stops_after_max_tool_rounds(
    vernis_factory: VernisFactory,
) -> None:
    """With `max_tool_rounds=2`, a model that always calls a tool gets two tool rounds, then one final request without tools."""
    probe = Probe()
    async with vernis_factory(catalog=probe.catalog(), max_tool_rounds=2) as vernis:
        again = Reply(tool_calls=[ScriptedToolCall("lookup_contact", {"q": "again"})])
        vernis.scripted.add(again, match=offers_tools, times=None)
        vernis.scripted.add("Here is what I found.", match=lambda b: is_chat(b) and not b.get("tools"))
        async with vernis.opened() as client:
            events = await client.answer("keep looking")
        assert squash(types_of(events)) == [
            "conversation_created",
            "assistant_start",
            "tool_call_started",
            "tool_call_completed",
            "tool_call_started",
            "tool_call_completed",
            "text_delta",
            "assistant_end",
        ]
        assert text_of(events) == "Here is what I found."
        requests = chat_requests(vernis)
        assert len(requests) == 3
        assert [tool_names(body) for body in requests[:2]] == [["lookup_contact"]] * 2
        assert "tools" not in requests[2]
        # The final request still carries both rounds, so the model can write its answer from them.
        assert [m["role"] for m in requests[2]["messages"]].count("tool") == 2


async def test_forbidden_and_unknown_tools_get_error_envelopes_and_never_run(
    vernis_factory: VernisFactory,
) -> None:
    """A viewer's call to a tool needing `agent:create`, or to a tool that does not exist, gets an error envelope; nothing runs."""
    probe = Probe()
    async with vernis_factory(catalog=probe.catalog()) as vernis:
        calls = [
            ScriptedToolCall("create_agent", {"name": "Night line"}, call_id="call_agent"),
            ScriptedToolCall("launch_rockets", {}, call_id="call_rockets"),
        ]
        vernis.scripted.add(Reply(tool_calls=calls), match=chat_about("agent"))
        vernis.scripted.add("I cannot do that for you.", match=after_tool_result)
        async with vernis.opened("viewer@acme.test") as client:
            events = await client.answer("create an agent")
        assert squash(types_of(events)) == [
            "conversation_created",
            "assistant_start",
            "tool_call_started",
            "tool_call_completed",
            "tool_call_started",
            "tool_call_completed",
            "text_delta",
            "assistant_end",
        ]
        completed = {e["call_id"]: e for e in events if e["type"] == "tool_call_completed"}
        assert completed["call_agent"]["status"] == "error"
        assert completed["call_agent"]["result"]["ok"] is False
        assert completed["call_agent"]["result"]["error"]["code"] == "forbidden"
        assert completed["call_rockets"]["status"] == "error"
        assert completed["call_rockets"]["result"]["error"]["code"] == "unknown_tool"
        assert probe.runs == []
        first, follow_up = chat_requests(vernis)
        # The viewer was never offered the write tool in the first place.
        assert tool_names(first) == ["lookup_contact"]
        results = {
            m["tool_call_id"]: json.loads(m["content"]) for m in follow_up["messages"] if m["role"] == "tool"
        }
        assert results == {
            "call_agent": completed["call_agent"]["result"],
            "call_rockets": completed["call_rockets"]["result"],
        }


async def test_identical_calls_within_one_answer_run_once(vernis_factory: VernisFactory) -> None:
    """The same call twice in one round and again in the next round runs the tool once; every call gets the result."""
    probe = Probe()
    async with vernis_factory(catalog=probe.catalog()) as vernis:
        twice = [
            ScriptedToolCall("lookup_contact", {"q": "Priya"}, call_id="call_a"),
            ScriptedToolCall("lookup_contact", {"q": "Priya"}, call_id="call_b"),
        ]
        vernis.scripted.add(Reply(tool_calls=twice), match=chat_about("Priya"))
        vernis.scripted.add(
            Reply(tool_calls=[ScriptedToolCall("lookup_contact", '{ "q" : "Priya" }', call_id="call_c")]),
            match=after_tool_result,
        )
        vernis.scripted.add("Priya, once.", match=after_tool_result)
        async with vernis.opened() as client:
            events = await client.answer("find Priya")
        assert probe.runs == [("lookup_contact", "Priya")]
        completed = [e for e in events if e["type"] == "tool_call_completed"]
        assert [e["call_id"] for e in completed] == ["call_a", "call_b", "call_c"]
        assert [e["status"] for e in completed] == ["ok"] * 3
        assert all(e["result"] == PRIYA_ENVELOPE for e in completed)
        assert text_of(events) == "Priya, once."


async def test_tool_calls_are_stored_and_replayed(vernis_factory: VernisFactory) -> None:
    """A reconnect replays the answer with its `tool_calls`: call_id, tool_name, arguments, status and result."""
    probe = Probe()
    async with vernis_factory(catalog=probe.catalog()) as vernis:
        vernis.scripted.add(Reply(tool_calls=[LOOKUP_PRIYA]), match=chat_about("Priya"))
        vernis.scripted.add("Priya Raman is in your contacts.", match=after_tool_result)
        async with vernis.opened() as client:
            events = await client.answer("who is Priya?")
            # The title is the last event of this conversation in flight; the replay comes after it.
            await client.expect("title_updated")
        async with vernis.connect() as client:
            replay = await client.until("history_end")
        assert types_of(replay) == [
            "conversation_loaded",
            "history_message",
            "history_message",
            "history_end",
        ]
        user, assistant = replay[1], replay[2]
        assert (user["role"], user["content"], user.get("tool_calls")) == ("user", "who is Priya?", None)
        assert assistant["message_id"] == events[-1]["message_id"]
        assert (assistant["role"], assistant["content"], assistant["status"]) == (
            "assistant",
            "Priya Raman is in your contacts.",
            "complete",
        )
        assert assistant["tool_calls"] == [
            {
                "call_id": "call_priya",
                "tool_name": "lookup_contact",
                "arguments": {"q": "Priya"},
                "status": "ok",
                "result": PRIYA_ENVELOPE,
                # Where in the answer's text the card stood (before any text here): a reload draws
                # it there.
                "text_offset": 0,
            }
        ]


async def test_the_next_message_context_carries_the_tool_calls(vernis_factory: VernisFactory) -> None:
    """The next user message's request (same socket, and after a reconnect) carries the earlier tool call and its result."""
    probe = Probe()
    async with vernis_factory(catalog=probe.catalog()) as vernis:
        vernis.scripted.add(Reply(tool_calls=[LOOKUP_PRIYA]), match=chat_about("Priya"))
        vernis.scripted.add("Priya Raman is in your contacts.", match=after_tool_result)
        vernis.scripted.add("Her last call was yesterday.", match=chat_about("call"))
        vernis.scripted.add("You asked about Priya.", match=chat_about("asked"))
        async with vernis.opened() as client:
            await client.answer("who is Priya?")
            await client.expect("title_updated")
            await client.answer("when did she last call?")
        async with vernis.opened() as client:
            await client.answer("what did I ask before?")
        expected = [
            ("user", "who is Priya?"),
            ("assistant", "call_priya"),
            ("tool", PRIYA_ENVELOPE),
            ("assistant", "Priya Raman is in your contacts."),
        ]
        for body in chat_requests(vernis)[2:]:
            seen = []
            for message in body["messages"][1:5]:
                if message["role"] == "tool":
                    assert message["tool_call_id"] == "call_priya"
                    seen.append(("tool", json.loads(message["content"])))
                elif message.get("tool_calls"):
                    (call,) = message["tool_calls"]
                    assert call["function"] == {"name": "lookup_contact", "arguments": '{"q":"Priya"}'}
                    seen.append(("assistant", call["id"]))
                else:
                    seen.append((message["role"], message["content"]))
            assert seen == expected
        assert len(chat_requests(vernis)) == 4
        assert probe.runs == [("lookup_contact", "Priya")]


@pytest.mark.parametrize(
    "fault", [Fault.error_mid_stream(after=1), Fault.cut(after=1)], ids=["error-object", "cut"]
)
async def test_fault_after_a_tool_round_but_before_any_text_is_retried(
    vernis_factory: VernisFactory, fault: Fault
) -> None:
    """A fault in the follow-up request after a text-less tool round, before any token, is retried without running the tool again."""
    probe = Probe()
    async with vernis_factory(catalog=probe.catalog()) as vernis:
        vernis.scripted.add(Reply(tool_calls=[LOOKUP_PRIYA]), match=chat_about("Priya"))
        vernis.scripted.add(Reply("never shown", fault=fault), match=after_tool_result)
        vernis.scripted.add("Priya Raman is in your contacts.", match=after_tool_result)
        async with vernis.opened() as client:
            events = await client.answer("who is Priya?")
        assert squash(types_of(events)) == [
            "conversation_created",
            "assistant_start",
            "tool_call_started",
            "tool_call_completed",
            "text_delta",
            "assistant_end",
        ]
        assert text_of(events) == "Priya Raman is in your contacts."
        assert probe.runs == [("lookup_contact", "Priya")]
        assert len(chat_requests(vernis)) == 3
