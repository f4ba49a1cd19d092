"""The socket cut at random points of answers that call tools (SPEC §4): after each resume the
client's text equals the stored text byte for byte, and every tool card appears exactly once.

Each run starts a conversation whose answer writes a little, calls two read tools, then writes more;
the client's socket closes after a random number of events (sometimes before the answer starts,
sometimes after it ended) and a new socket resumes, with `after_seq` (the missed events only) or
without (the full history, then the live rest).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from tests.e2e.test_resume import rebuild, wait_for_status
from tests.fixtures.server import Vernis, VernisFactory, text_of
from tests.proofs.conftest import Figures
from vernis.model.scripted import Reply, ScriptedToolCall

BEFORE = " ".join(f"b{n}" for n in range(12))
AFTER = " ".join(f"a{n}-é" for n in range(25))


def first_round(body: Mapping[str, Any]) -> bool:
    return body["messages"][-1]["role"] == "user" and "cut me" in body["messages"][-1]["content"]


def after_tools(body: Mapping[str, Any]) -> bool:
    return body["messages"][-1]["role"] == "tool" and any(
        m["role"] == "user" and "cut me" in str(m["content"]) for m in body["messages"][-4:]
    )


def cards(events: list[dict[str, Any]], message_id: str) -> Counter[str]:
    """The tool cards a client shows for the answer: from its history entry and from live events."""
    shown: Counter[str] = Counter()
    current = None
    for event in events:
        if event["type"] == "history_message" and event["message_id"] == message_id:
            shown.update(call["call_id"] for call in event.get("tool_calls") or ())
        elif event["type"] == "assistant_start":
            current = event["message_id"]
        elif event["type"] == "tool_call_started" and current == message_id:
            shown[event["call_id"]] += 1
    return shown


async def cut_and_resume(vernis: Vernis, rng: random.Random, use_after_seq: bool) -> dict[str, Any]:
    """One run: cut after a random number of events, resume, and compare with what is stored."""
    async with vernis.opened() as client:
        await client.send("new_conversation")
        await client.until("history_end")
        await client.send("user_message", content="cut me please")
        seen: list[dict[str, Any]] = []
        for _ in range(rng.randint(1, 60)):
            seen.append(await client.recv())
            if seen[-1]["type"] == "assistant_end":
                break
    conversation_id = seen[0]["conversation_id"]
    if rng.random() < 0.3:
        await asyncio.sleep(rng.uniform(0, 0.05))
    query = f"?conversation_id={conversation_id}"
    if use_after_seq:
        query += f"&after_seq={seen[-1]['seq']}"
    async with vernis.connect(query=query) as client:
        events = [await client.recv()]
        if events[0].get("resumed") is not True:
            events += await client.until("history_end")
        done = any(e["type"] == "assistant_end" for e in seen) or any(
            e["type"] == "history_message" and e["role"] == "assistant" for e in events
        )
        if not done:
            events += await client.until("assistant_end")
    message = await wait_for_status(vernis, conversation_id, "complete")
    message_id = str(message.id)
    if use_after_seq and events[0].get("resumed") is True:
        text = rebuild(seen, message_id) + text_of(events)
        shown = cards(seen + events, message_id)
    else:
        text = rebuild(events, message_id)
        shown = cards(events, message_id)
    stored_calls = [call["call_id"] for call in message.tool_calls or ()]
    return {"text": text, "stored": message.content, "cards": shown, "stored_calls": stored_calls}


@pytest.mark.slow
@pytest.mark.parametrize(
    "runs", [pytest.param(30, id="30"), pytest.param(200, id="200", marks=pytest.mark.long)]
)
async def test_random_cuts_of_answers_with_tool_calls(
    vernis_factory: VernisFactory, figures: Figures, runs: int
) -> None:
    """Cutting the socket at random points of answers with tool calls and resuming (half with after_seq) always rebuilds exactly the stored text and shows each tool card once."""
    rng = random.Random(20261124 + runs)
    # A model stall is not what this proves: a generous stall timeout for a busy machine.
    unlimited = {"rate_limit": "100000/60", "member_rate_limit": "100000/60", "llm_stall_timeout": 30.0}
    async with vernis_factory(**unlimited) as vernis:
        vernis.scripted.add(
            Reply(
                BEFORE,
                tool_calls=[
                    ScriptedToolCall("get_unread_count", {}),
                    ScriptedToolCall("search_contacts", {"query": "Jane"}),
                ],
                chunk_delay=0.002,
            ),
            match=first_round,
            times=None,
        )
        vernis.scripted.add(Reply(AFTER, chunk_delay=0.002), match=after_tools, times=None)
        problems = []
        for run in range(runs):
            outcome = await cut_and_resume(vernis, rng, use_after_seq=run % 2 == 0)
            assert len(outcome["stored_calls"]) == 2, outcome
            assert outcome["stored"].startswith(BEFORE), outcome
            assert outcome["stored"].endswith(AFTER), outcome
            if outcome["text"] != outcome["stored"] or outcome["cards"] != Counter(outcome["stored_calls"]):
                problems.append((run, outcome))
    assert problems == []
    figures(runs=runs, mismatches=len(problems))
