"""Compaction (SPEC §19) through a real server, the real `openai` client and the scripted model: a
long conversation's older messages are summarised by the title model instead of forgotten; the
summary rides in the system message, is announced with `conversation_compacted` (live and in the
history), goes on over a rollover and a restart, and a summary that cannot be had costs the older
messages instead, never the answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import BaseModel

from tests.fixtures.server import Client, Vernis, VernisFactory, text_of, types_of
from vernis.answers.compaction import MAX_SUMMARY_CHARS, SUMMARY_INSTRUCTIONS
from vernis.conversation import tokens
from vernis.model.prompt import SUMMARY_HEADING
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Fault, Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import system_text
from vernis.tools import Toolkit, tool
from vernis.tools.catalog import Catalog

FACT = "my locker code is QX-4471"
# Small windows, so that a few turns fill one: due past 6 messages, keeping the last 2.
SMALL = {
    "window_messages": 6,
    "context_keep_recent": 2,
    "rate_limit": "1000/60",
    "member_rate_limit": "1000/60",
}


def is_summary(body: Mapping[str, Any]) -> bool:
    return system_text(body) == SUMMARY_INSTRUCTIONS


def chat_requests(vernis: Vernis) -> list[dict[str, Any]]:
    return [body for body in vernis.scripted.requests if body["model"] == SCRIPTED_CHAT_MODEL]


def summary_in(body: dict[str, Any]) -> str | None:
    """The summary the request carries in its system message, if any."""
    system = body["messages"][0]["content"]
    _, heading, after = system.partition(SUMMARY_HEADING)
    return after if heading else None


async def turns(client: Client, count: int, start: int = 0) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for turn in range(start, start + count):
        answered = await client.answer(f"Question {turn}: what do you make of it?")
        assert answered[-1]["type"] == "assistant_end", types_of(answered)
        assert "error" not in types_of(answered), answered
        events += answered
    return events


async def test_a_fact_from_message_2_is_in_the_summary_at_message_120(vernis_factory: VernisFactory) -> None:
    """With the default budget and window, 60 turns (120 messages, two rollovers): the fact the user stated at message 2 (position 2) is in the summary the model receives with message 120, every request's history with its summary stays under the budget, and each compaction is announced live."""
    async with vernis_factory(rate_limit="1000/60", member_rate_limit="1000/60") as vernis:
        budget = vernis.settings.context_budget_tokens
        async with vernis.opened() as client:
            events = await turns(client, 1)
            said = await client.answer(f"Remember this: {FACT}.")
            assert said[-1]["type"] == "assistant_end"
            events += said + await turns(client, 58, start=2)
        requests = chat_requests(vernis)
    assert len(requests) == 60
    last = summary_in(requests[-1])
    assert last is not None
    assert FACT in last
    sizes = [
        tokens.count(orjson.dumps(body["messages"][1:-1]).decode()) + tokens.count(summary_in(body) or "")
        for body in requests
    ]
    assert max(sizes) <= budget
    compacted = [e for e in events if e["type"] == "conversation_compacted"]
    rolled = [e for e in events if e["type"] == "conversation_loaded" and e.get("rolled_over_from")]
    print(f"\n{len(compacted)} compactions, {len(rolled)} rollovers, history at most {max(sizes)} tokens")
    assert len(rolled) == 2
    assert 1 <= len(compacted) <= 6
    summaries = [body for body in vernis.scripted.requests if is_summary(body)]
    assert len(summaries) == len(compacted)
    assert all(body["model"] == vernis.settings.title_model_name for body in summaries)


async def test_the_summary_replaces_the_older_messages_and_is_marked_in_the_history(
    vernis_factory: VernisFactory,
) -> None:
    """Past the window's size the older messages go to the title model as a transcript; the next request carries the summary and only the last exchanges; both tabs hear conversation_compacted, and a replay marks it before the first message after it."""
    async with vernis_factory(**SMALL) as vernis:
        async with vernis.opened() as client, vernis.opened() as other:
            await client.answer(f"First, {FACT}.")
            conversation_id = (await client.answer("Second question"))[-1]["conversation_id"]
            await other.send("load_conversation", conversation_id=conversation_id)
            await other.until("history_end")
            await turns(client, 1)
            await other.until("assistant_end")
            events = await client.answer("Fourth question")  # 7 messages with it: due
            seen = await other.until("assistant_end")
        requests = chat_requests(vernis)
        async with vernis.opened() as replaying:
            await replaying.send("load_conversation", conversation_id=conversation_id)
            history = await replaying.until("history_end")
    compacted = next(e for e in events if e["type"] == "conversation_compacted")
    assert types_of(events).index("conversation_compacted") < types_of(events).index("assistant_start")
    assert any(e["type"] == "conversation_compacted" for e in seen)
    asked = next(body for body in vernis.scripted.requests if is_summary(body))
    assert FACT in asked["messages"][1]["content"]
    assert "User: Second question" in asked["messages"][1]["content"]
    last = requests[-1]
    assert FACT in (summary_in(last) or "")
    assert [m["role"] for m in last["messages"][1:]] == ["user", "assistant", "user"]
    kinds = types_of(history)
    marker = kinds.index("conversation_compacted")
    assert history[marker]["through_message_id"] == compacted["through_message_id"]
    assert history[marker - 1]["message_id"] == compacted["through_message_id"]
    assert kinds.count("history_message") == 8


async def test_a_summary_that_cannot_be_had_drops_the_older_messages_instead(
    vernis_factory: VernisFactory,
) -> None:
    """The title model failing (HTTP 500 after its retries), stalling past the stall timeout, or replying nothing: the older messages are dropped as before, nothing is announced or stored, and the answer goes on."""
    faults = [Reply("x", fault=Fault.http(500)), Reply("x", fault=Fault.stall(after=1)), Reply("")]
    async with vernis_factory(**SMALL) as vernis:
        async with vernis.opened() as client:
            for number, reply in enumerate(faults):
                vernis.scripted.add(reply, match=is_summary, times=None)
                events = await turns(client, 4, start=number * 4)
                assert "conversation_compacted" not in types_of(events)
                vernis.scripted.rules.clear()
        requests = chat_requests(vernis)
    assert all(summary_in(body) is None for body in requests)
    assert max(len(body["messages"]) for body in requests) <= 1 + 7
    assert "Question 0" not in orjson.dumps(requests[-1]["messages"]).decode()


async def test_an_enormous_summary_is_cut_and_a_secret_in_one_is_redacted(
    vernis_factory: VernisFactory,
) -> None:
    """A summary of 50,000 characters with a card number in it: the model receives at most MAX_SUMMARY_CHARS of it, the card number redacted by the guards."""
    card = "4111 1111 1111 1111"
    enormous = f"- The user paid with {card}.\n" + "\n".join(
        f"- point {n}: nothing new" for n in range(2_500)
    )
    async with vernis_factory(**SMALL) as vernis:
        vernis.scripted.add(Reply(enormous), match=is_summary)
        async with vernis.opened() as client:
            await turns(client, 4)
        summary = summary_in(chat_requests(vernis)[-1])
    assert summary is not None
    assert "- point 0: nothing new" in summary
    assert len(summary) <= MAX_SUMMARY_CHARS + 300
    assert card not in summary
    assert "1111 1111" not in summary


async def test_compact_conversation_asks_for_a_summary_now(vernis_factory: VernisFactory) -> None:
    """compact_conversation summarises at once, whatever the size, for every tab; a short conversation gets invalid_message, another member's not_found, and a running answer response_in_progress."""
    async with vernis_factory(**{**SMALL, "window_messages": 50}) as vernis:
        async with vernis.opened() as client:
            conversation_id = (await client.answer("Only question"))[-1]["conversation_id"]
            await client.send("compact_conversation", conversation_id=conversation_id)
            refused = await client.until("error")
            assert refused[-1]["code"] == "invalid_message"
            await turns(client, 2)
            await client.send("compact_conversation", conversation_id=conversation_id)
            compacted = await client.until("conversation_compacted")
            assert compacted[-1]["conversation_id"] == conversation_id
            vernis.scripted.add(
                Reply(["slow "] * 20, chunk_delay=0.1), match=lambda b: b["model"] == SCRIPTED_CHAT_MODEL
            )
            await client.send("user_message", content="A long answer, please")
            await client.until("assistant_start")
            await client.send("compact_conversation", conversation_id=conversation_id)
            busy = await client.until("error")
            assert busy[-1]["code"] == "response_in_progress"
            await client.until("assistant_end")
        async with vernis.opened("admin@acme.test") as stranger:
            await stranger.send("compact_conversation", conversation_id=conversation_id)
            assert (await stranger.until("error"))[-1]["code"] == "not_found"
        requests = chat_requests(vernis)
    assert "Only question" in (summary_in(requests[-1]) or "")


async def test_the_summary_goes_on_over_a_rollover_and_a_restart(vernis_factory: VernisFactory) -> None:
    """A conversation that rolls over carries its summary to the one that continues it; a new server reading that conversation from the store sends the same summary."""
    settings = {**SMALL, "rollover_messages": 8}
    async with vernis_factory(**settings) as vernis:
        async with vernis.opened() as client:
            await client.answer(f"First, {FACT}.")
            events = await turns(client, 4)  # compacted at the 4th exchange, rolled over at the 5th
        loaded = [e for e in events if e["type"] == "conversation_loaded" and e.get("rolled_over_from")]
        assert loaded
        assert FACT in (summary_in(chat_requests(vernis)[-1]) or "")
    async with vernis_factory(**settings) as restarted:
        async with restarted.opened() as client:  # the latest conversation: the one that rolled over
            await client.answer("After the restart")
        assert FACT in (summary_in(chat_requests(restarted)[-1]) or "")


class Export(BaseModel):
    table: str


async def export_rows(ctx: Any, args: Export) -> dict[str, Any]:
    """Export a table's rows."""
    return {"rows": [{"id": n, "name": f"row {n}", "notes": "an apple a day " * 10} for n in range(240)]}


async def test_a_paste_and_a_large_tool_result_past_the_budget_are_sent_cut_with_notes(
    vernis_factory: VernisFactory,
) -> None:
    """A 6,000-character paste whose answer reads a 40 KB tool result, with a budget of 1,000 tokens: the model receives both cut, each with a note saying so, the answer is given, and the stored message and result stay whole."""
    toolkit: Toolkit[None] = Toolkit(
        "rows",
        tools=[tool(permission="rows:read")(export_rows)],
        permissions={"rows:read": "Export rows"},
        role_grants={"member": ["rows:read"]},
    )
    paste = "\n".join(f"line {n}: " + "the quarterly figures look fine " * 5 for n in range(40))
    assert len(paste) >= 6_000
    async with vernis_factory(demo=False, catalog=Catalog([toolkit]), context_budget_tokens=1_000) as vernis:
        vernis.scripted.add(
            Reply(tool_calls=[ScriptedToolCall("export_rows", {"table": "contacts"}, call_id="call_rows")]),
            match=lambda body: (
                body["model"] == SCRIPTED_CHAT_MODEL and body["messages"][-1]["role"] == "user"
            ),
        )
        vernis.scripted.add(
            "Done: the export is above.",
            match=lambda body: (
                body["model"] == SCRIPTED_CHAT_MODEL and body["messages"][-1]["role"] == "tool"
            ),
        )
        async with vernis.opened() as client:
            events = await client.answer(f"Export the contacts and compare with this:\n{paste}")
        first, second = chat_requests(vernis)[-2:]
    assert text_of(events) == "Done: the export is above."
    completed = next(e for e in events if e["type"] == "tool_call_completed")
    assert len(orjson.dumps(completed["result"])) >= 40_000  # the user's card shows it whole
    assert "Vernis cut this message to fit the context budget" in first["messages"][-1]["content"]
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool"
    assert "[cut to its first lines" in tool_message["content"]
    assert "Vernis cut this message" in second["messages"][1]["content"]
    history = second["messages"][1:]
    assert sum(tokens.count(m.get("content") or "") for m in history) <= 1_500
