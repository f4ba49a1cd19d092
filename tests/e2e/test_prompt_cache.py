"""Prompts a provider can cache (SPEC §19): consecutive requests of a long conversation share a
byte-identical prefix. A 120-message thread (60 turns, the page changing every 10th, a tool call
every 7th) goes through a real Vernis to the scripted model, which keeps each request's bytes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import orjson

from tests.fixtures.server import VernisFactory, types_of
from vernis.conversation import tokens
from vernis.model.prompt import SUMMARY_HEADING
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import last_user_text

TURNS = 60
PAGE_EVERY = 10
TOOL_EVERY = 7


def common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of `a` and `b`."""
    low, high = 0, min(len(a), len(b))
    while low < high:  # binary search on slices: fast on 50 KB bodies
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True)
class Share:
    turn: int
    whole: float  # of the request's bytes, tool list included
    messages: float  # of the messages' JSON alone


def prefix_shares(bodies: list[tuple[int, bytes]]) -> list[Share]:
    """Each request against the one before: the share of it that is a byte-identical prefix."""
    shares = []
    for (_, before), (turn, after) in itertools.pairwise(bodies):
        whole = common_prefix(before, after) / len(after)
        old, new = (orjson.dumps(orjson.loads(raw)["messages"]) for raw in (before, after))
        shares.append(Share(turn, whole, common_prefix(old, new) / len(new)))
    return shares


async def test_consecutive_requests_share_their_prefix(vernis_factory: VernisFactory) -> None:
    """Over 60 turns with page changes, tool calls, rollovers and window cuts, each request repeats ≥ 90 % of the one before byte for byte (≥ 85 % of its messages alone)."""
    async with vernis_factory(rate_limit="1000/60", member_rate_limit="1000/60") as vernis:
        chat = vernis.settings.chat_model
        vernis.scripted.add(
            Reply("Let me look.", tool_calls=[ScriptedToolCall("search_contacts", {"query": "Cooper"})]),
            match=lambda body: (
                body["model"] == chat
                and body["messages"][-1]["role"] == "user"
                and "look it up" in last_user_text(body)
            ),
            times=None,
        )
        contacts = sorted(key for key in vernis.seed.entities if key.startswith("acme:contact:"))
        turn_of: list[int] = []
        async with vernis.opened() as client:
            for turn in range(1, TURNS + 1):
                contact = vernis.seed.entities[contacts[(turn - 1) // PAGE_EVERY]]
                ask = "please look it up" if turn % TOOL_EVERY == 0 else "what do you make of it"
                before = len(vernis.scripted.exchanges)
                events = await client.answer(
                    f"Question {turn}: {ask}?", page_context={"route": f"/contacts/{contact}"}
                )
                assert events[-1]["type"] == "assistant_end", types_of(events)
                assert "error" not in types_of(events), events
                turn_of += [turn] * (len(vernis.scripted.exchanges) - before)
        bodies = [
            (turn, exchange.raw)
            for turn, exchange in zip(turn_of, vernis.scripted.exchanges, strict=False)
            if exchange.body["model"] == chat
        ]

    # The thread went as planned: 60 answers, 8 with a tool round, two rollovers.
    assert len(bodies) == TURNS + TURNS // TOOL_EVERY
    shares = prefix_shares(bodies)
    whole = sum(share.whole for share in shares) / len(shares)
    messages = sum(share.messages for share in shares) / len(shares)
    at_page_change = [s.messages for s in shares if s.turn % PAGE_EVERY == 1 and s.turn > 1]
    print(
        f"\nprefix share over {len(shares)} requests: {whole:.1%} with the tool list, "
        f"{messages:.1%} for the messages alone; at a page change {min(at_page_change):.1%} "
        f"(lowest: {min(s.messages for s in shares):.1%})"
    )
    assert whole >= 0.90
    assert messages >= 0.85
    # A page change is no longer a cache miss: the page goes with the new message only.
    assert min(at_page_change) >= 0.7


async def test_the_history_stays_under_the_token_budget(vernis_factory: VernisFactory) -> None:
    """With long answers and VERNIS_CONTEXT_BUDGET_TOKENS=2000, no request carries more history than the budget (o200k_base tokens, its summary included), the newest exchanges are always there, and the cuts are rare."""
    budget = 2_000
    async with vernis_factory(
        rate_limit="1000/60", member_rate_limit="1000/60", context_budget_tokens=budget
    ) as vernis:
        chat = vernis.settings.chat_model
        vernis.scripted.add(
            Reply("Long answer. " * 150), match=lambda body: body["model"] == chat, times=None
        )
        async with vernis.opened() as client:
            for turn in range(20):
                events = await client.answer(f"question {turn}")
                assert events[-1]["type"] == "assistant_end"
        bodies = [exchange.raw for exchange in vernis.scripted.exchanges if exchange.body["model"] == chat]
    sizes = []
    for raw in bodies:
        messages = orjson.loads(raw)["messages"]
        history = messages[1:-1]  # neither the system message nor the new one
        summary = messages[0]["content"].partition(SUMMARY_HEADING)[2]
        assert sum(tokens.count(m.get("content") or "") for m in history) + tokens.count(summary) <= budget
        sizes.append(len(history))
    assert min(sizes[1:]) >= 2  # the exchange before is always there
    # Cut now and then, at once, not one message a turn: most requests extend the one before.
    cuts = sum(after < before for before, after in itertools.pairwise(sizes))
    assert 1 <= cuts <= len(sizes) // 3
