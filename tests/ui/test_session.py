"""The client's session rules (static/vernis/session.js), fed event sequences in the browser, no socket."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ui.conftest import UI

# Runs in the page: a Session with a view that records what it is told, fed `events`.
FEED = """async ([events, pending]) => {
    const { Session } = await import("/static/vernis/session.js");
    const calls = [];
    const sent = [];
    const view = new Proxy({}, { get: (_, name) => (...args) => calls.push([name, ...args]) });
    const session = new Session(view, (command) => { sent.push(command); return true; }, { pending });
    const queries = [];
    for (const event of events) {
        if (event === "connected") { session.connected(); continue; }
        if (event === "query") { queries.push(session.socketQuery()); continue; }
        session.handle(event);
    }
    const text = calls.filter(([name]) => name === "textDelta").map(([, , text]) => text).join("");
    return { calls: calls.map(([name]) => name), text, sent, queries, busy: session.busy };
}"""

CONVERSATION = "3f1c1f2e-0000-4000-8000-000000000001"
MESSAGE = "3f1c1f2e-0000-4000-8000-0000000000aa"


@pytest.fixture
def ui(login_page: UI) -> UI:
    return login_page


def live(seq: int, type: str, **fields: Any) -> dict[str, Any]:
    return {"type": type, "seq": seq, **fields}


def delta(seq: int, content: str) -> dict[str, Any]:
    return live(seq, "text_delta", content=content)


async def feed(ui: UI, events: list[Any], pending: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = await ui.page.evaluate(FEED, [events, pending])
    return result


async def test_events_already_applied_are_dropped_and_the_resume_point_moves(ui: UI) -> None:
    """A seq already applied is dropped (no doubled text) and the next socket resumes after the last one."""
    start = live(6, "assistant_start", conversation_id=CONVERSATION, message_id=MESSAGE)
    end = live(10, "assistant_end", conversation_id=CONVERSATION, message_id=MESSAGE, stopped=False)
    result = await feed(
        ui,
        [
            {"type": "conversation_loaded", "conversation_id": CONVERSATION, "title": None},
            "query",
            {"type": "history_end", "conversation_id": CONVERSATION, "seq": 5},
            start,
            delta(7, "a"),
            delta(8, "b"),
            "query",
            {"type": "conversation_loaded", "conversation_id": CONVERSATION, "title": None, "resumed": True},
            delta(7, "a"),
            delta(8, "b"),
            delta(9, "c"),
            end,
            "query",
        ],
    )
    assert result["text"] == "abc"
    assert result["queries"] == [
        f"?conversation_id={CONVERSATION}",
        f"?conversation_id={CONVERSATION}&after_seq=8",
        f"?conversation_id={CONVERSATION}&after_seq=10",
    ]
    assert "reset" in result["calls"]
    assert "resumed" in result["calls"]
    assert result["busy"] is False


async def test_a_redraw_forgets_the_resume_point_until_the_history_ends(ui: UI) -> None:
    """After a plain load the view is incomplete until history_end: no after_seq is offered meanwhile."""
    result = await feed(
        ui,
        [
            {"type": "conversation_loaded", "conversation_id": CONVERSATION, "title": "t"},
            {"type": "history_end", "conversation_id": CONVERSATION, "seq": 12},
            {"type": "conversation_loaded", "conversation_id": CONVERSATION, "title": "t", "resumed": False},
            "query",
            {"type": "history_end", "conversation_id": CONVERSATION, "seq": 14},
            "query",
        ],
    )
    assert result["queries"] == [
        f"?conversation_id={CONVERSATION}",
        f"?conversation_id={CONVERSATION}&after_seq=14",
    ]


async def test_a_new_chat_survives_a_reconnect(ui: UI) -> None:
    """A user in a new, unsaved chat who reconnects gets the pending chat back, not the latest conversation."""
    result = await feed(
        ui,
        [
            "connected",
            {"type": "conversation_loaded", "conversation_id": CONVERSATION, "title": "latest"},
            {"type": "history_message", "role": "user", "content": "old", "message_id": MESSAGE},
            {"type": "history_end", "conversation_id": CONVERSATION, "seq": 3},
            {"type": "conversation_loaded", "conversation_id": None, "title": None},
            {"type": "history_end", "conversation_id": None},
            "query",
        ],
        pending=True,
    )
    assert result["sent"] == [{"type": "new_conversation"}]
    assert result["calls"] == ["reset", "historyEnd"]
    assert result["queries"] == [""]


async def test_a_refused_message_is_handed_back(ui: UI) -> None:
    """A user message the server refuses (rate limit) is handed back to the view; nothing stays busy."""
    result = await ui.page.evaluate(
        """async () => {
            const { Session } = await import("/static/vernis/session.js");
            const calls = [];
            const view = new Proxy({}, { get: (_, name) => (...args) => calls.push([name, ...args]) });
            const session = new Session(view, () => true);
            session.userMessage("hello", { route: "/contacts" });
            const busy = session.busy;
            session.handle({ type: "error", code: "rate_limited", message: "Slow down.", retry_after_ms: 1000 });
            return { busy, after: session.busy, calls: calls.map(([name, content]) => [name, content]) };
        }"""
    )
    assert result == {"busy": True, "after": False, "calls": [["userMessageRefused", "hello"]]}
