"""UI blocks through the running server (SPEC §16): a Python toolkit's results carry blocks; the
browser gets the checked ones in `tool_call_completed.ui` and again in `history_message`, the model
never sees them, and bad blocks, bad links and too many blocks are dropped with a warning while the
answer goes on."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from tests.e2e.test_guarded_results import after_tool, chat_about, is_chat
from tests.fixtures.server import Vernis, VernisFactory
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis.tools import Shown, Toolkit, block, entity, links, metrics, table, tool
from vernis.tools.blocks import MAX_BLOCKS, MAX_BLOCKS_BYTES
from vernis.tools.catalog import Catalog

CARD = "4111 1111 1111 1111"

RECEIPT_SCHEMA = {
    "type": "object",
    "required": ["number", "lines"],
    "properties": {
        "number": {"type": "string"},
        "lines": {"type": "array", "items": {"type": "object"}},
        "href": {"type": "string"},
    },
}


class Ask(BaseModel):
    what: str = Field(description="Which blocks to return.")


GOOD = [
    table(
        [("id", "Order"), ("total", "Total")],
        [{"id": "O-1", "total": 12.5}, {"id": "O-2", "total": 3}],
        total=9,
    ),
    entity("order", "O-1", "Order O-1", [("Customer", "Jane Cooper"), ("Card", CARD)], url="/orders/O-1"),
    links(
        [
            ("Open the order", "/orders/O-1"),
            ("Run this", "javascript:alert(1)"),
            ("Partner portal", "https://partner.example/o/1"),
            ("Elsewhere", "https://evil.example/steal"),
        ]
    ),
    metrics([("Orders", 9), ("Revenue", "€120", "+5%")]),
    block("shop.receipt", {"number": "R-1", "lines": [{"sku": "A", "qty": 2}], "href": "//evil.example/x"}),
    block("nope.kind", {"x": 1}),
    block("table", {"columns": "not a list", "rows": []}),
]


async def show(ctx: Any, args: Ask) -> Shown:
    """Show orders."""
    if args.what == "many":
        return Shown({"n": 10}, ui=[metrics([(f"M{n}", n)]) for n in range(MAX_BLOCKS + 2)])
    if args.what == "huge":
        rows = [{"id": f"O-{n}", "note": "x" * 150} for n in range(200)]
        big = table([("id", "Order"), ("note", "Note")], rows)
        return Shown({"n": 3}, ui=[big, big, metrics([("Orders", 3)])])
    return Shown({"orders": ["O-1", "O-2"], "count": 9}, ui=GOOD)


def shop() -> Catalog:
    toolkit: Toolkit[None] = Toolkit(
        "shop",
        tools=[tool(permission="shop:view")(show)],
        permissions={"shop:view": "See orders"},
        role_grants={"member": ["shop:view"]},
        ui_kinds={"shop.receipt": RECEIPT_SCHEMA},
    )
    return Catalog([toolkit])


@pytest.fixture
async def vernis(vernis_factory: VernisFactory, tmp_path: Path) -> Any:
    path = tmp_path / "vernis.toml"
    path.write_text('[embed]\nlink_origins = ["https://partner.example"]\n', encoding="utf-8")
    async with vernis_factory(demo=False, catalog=shop(), config=path) as started:
        yield started


async def ask(vernis: Vernis, what: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The model calls `show` once; the answer's events and its `tool_call_completed`."""
    call = ScriptedToolCall("show", {"what": what}, call_id=f"call_{what}")
    vernis.scripted.add(Reply(tool_calls=[call]), match=chat_about(f"show {what}"))
    vernis.scripted.add("Here they are.", match=after_tool)
    async with vernis.opened() as client:
        events = await client.answer(f"show {what}")
    (done,) = [e for e in events if e["type"] == "tool_call_completed"]
    return events, done


async def test_blocks_reach_the_browser_checked_and_never_the_model(
    vernis: Vernis, caplog: pytest.LogCaptureFixture
) -> None:
    """Valid blocks arrive in tool_call_completed.ui (javascript:, foreign and protocol-relative links dropped, a card number redacted); an unknown kind and an invalid table are dropped and logged; the model reads data without ui and the answer ends."""
    with caplog.at_level(logging.WARNING, logger="vernis.tools"):
        events, done = await ask(vernis, "all")
    assert events[-1]["type"] == "assistant_end"
    assert done["status"] == "ok"
    assert done["result"] == {
        "ok": True,
        "data": {"orders": ["O-1", "O-2"], "count": 9},
    }
    kinds = [b["kind"] for b in done["ui"]]
    assert kinds == ["table", "entity", "links", "metrics", "shop.receipt"]
    by_kind = {b["kind"]: b["data"] for b in done["ui"]}
    assert by_kind["table"] == GOOD[0]["data"]
    assert by_kind["entity"]["url"] == "/orders/O-1"
    assert CARD not in json.dumps(by_kind["entity"])
    assert [link["url"] for link in by_kind["links"]["links"]] == [
        "/orders/O-1",
        "https://partner.example/o/1",
    ]
    assert by_kind["metrics"]["items"][1] == {"label": "Revenue", "value": "€120", "delta": "+5%"}
    assert "href" not in by_kind["shop.receipt"]
    dropped = [r.getMessage() for r in caplog.records if "UI block" in r.getMessage()]
    assert any("unknown kind 'nope.kind'" in m for m in dropped), dropped
    assert any("UI block 6 is dropped: table: columns" in m for m in dropped), dropped
    # The last request of the chat model (the title model's may come after it).
    chat = next(body for body in reversed(vernis.scripted.requests) if is_chat(body))
    (tool_message,) = [m for m in chat["messages"] if m["role"] == "tool"]
    assert json.loads(tool_message["content"]) == {"ok": True, "data": {"orders": ["O-1", "O-2"], "count": 9}}


async def test_history_replays_the_same_blocks(vernis: Vernis) -> None:
    """Reloading the conversation gives the call's blocks in history_message exactly as the live answer had them, the result without them."""
    events, done = await ask(vernis, "all")
    conversation_id = events[0]["conversation_id"]
    async with vernis.connect(query=f"?conversation_id={conversation_id}") as client:
        replay = await client.until("history_end")
    (answer,) = [e for e in replay if e["type"] == "history_message" and e["role"] == "assistant"]
    (call,) = answer["tool_calls"]
    assert call["ui"] == done["ui"]
    assert call["result"] == done["result"]


async def test_past_eight_blocks_or_64_kib_the_rest_are_dropped(
    vernis: Vernis, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten blocks keep the first eight; blocks past 64 KiB in all are dropped while a later small one stays."""
    with caplog.at_level(logging.WARNING, logger="vernis.tools"):
        _, many = await ask(vernis, "many")
        _, huge = await ask(vernis, "huge")
    assert [b["data"]["items"][0]["label"] for b in many["ui"]] == [f"M{n}" for n in range(MAX_BLOCKS)]
    assert [b["kind"] for b in huge["ui"]] == ["table", "metrics"]
    assert len(json.dumps(huge["ui"])) <= MAX_BLOCKS_BYTES
    assert any(f"exceed {MAX_BLOCKS_BYTES} bytes" in r.getMessage() for r in caplog.records)
