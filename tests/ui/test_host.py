"""`static/vernis/host.js`, the host contract's plain functions, run in the browser: when to ask the
host for the next token, the page context as the protocol takes it, and a tool call's summary."""

from __future__ import annotations

from typing import Any

from tests.ui.conftest import UI

HOUR = 3600


async def delays(ui: UI, cases: list[dict[str, Any]]) -> list[float | None]:
    """`refreshDelay` in seconds for tokens with these claims, `now` being `now` (seconds)."""
    result: list[float | None] = await ui.page.evaluate(
        """async (cases) => {
            const { refreshDelay } = await import("/static/vernis/host.js");
            const part = (value) => btoa(JSON.stringify(value)).replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
            return cases.map(({ claims, now, raw }) => {
                const token = raw ?? `${part({ alg: "HS256", typ: "JWT" })}.${part(claims)}.signature`;
                const delay = refreshDelay(token, now * 1000);
                return delay === null ? null : delay / 1000;
            });
        }""",
        cases,
    )
    return result


async def test_the_next_token_is_asked_for_before_expiry_whatever_the_clock(login_page: UI) -> None:
    """A minute before `exp` for long tokens, a fifth of the lifetime for short ones; a clock behind or ahead of the server's, or a cached token, never makes it late or a tight loop."""
    now = 1_700_000_000
    cases = [
        {"claims": {"sub": "u", "iat": now, "exp": now + 12 * HOUR}, "now": now},
        {"claims": {"sub": "u", "iat": now, "exp": now + 6}, "now": now},
        # This browser's clock 10 minutes behind the server's: the lifetime bounds the wait.
        {"claims": {"sub": "u", "iat": now, "exp": now + HOUR}, "now": now - 600},
        # 2 hours ahead: the token looks expired here; it is the clock, not a reason to loop.
        {"claims": {"sub": "u", "iat": now, "exp": now + HOUR}, "now": now + 2 * HOUR},
        # A token the host cached: issued 11 hours ago, one hour left.
        {"claims": {"sub": "u", "iat": now - 11 * HOUR, "exp": now + HOUR}, "now": now},
        # No `iat`: the time left by this clock.
        {"claims": {"sub": "u", "exp": now + 600}, "now": now},
        # Ten years: within setTimeout's range (a longer delay would fire at once).
        {"claims": {"sub": "u", "iat": now, "exp": now + 10 * 365 * 24 * HOUR}, "now": now},
        {"claims": {"sub": "u"}, "now": now},
        {"raw": "not a token", "now": now},
        {"raw": "a.%%%.c", "now": now},
    ]
    assert await delays(login_page, cases) == [
        12 * HOUR - 60,
        4.8,
        HOUR - 60,
        HOUR - 60,
        HOUR - 60,
        600 - 60,
        (2**31 - 1) / 1000,
        None,
        None,
        None,
    ]


async def test_a_page_context_keeps_only_what_the_server_accepts(login_page: UI) -> None:
    """Only route, entity_type and entity_id are kept; an entity needs both; numbers become strings; values over the server's limits and non-objects are dropped, null unsets."""
    result = await login_page.page.evaluate(
        """async () => {
            const { normalizePageContext } = await import("/static/vernis/host.js");
            return [
                normalizePageContext({ route: "/t/1", entity_type: "ticket", entity_id: 42, user: "x" }),
                normalizePageContext({ route: "/t/1", entity_type: "ticket" }),
                normalizePageContext({ entity_type: "ticket", entity_id: "1" }),
                normalizePageContext({ route: "/x", entity_type: "t".repeat(65), entity_id: "1" }),
                normalizePageContext({ route: "/x".repeat(1025), entity_type: "ticket", entity_id: { id: 1 } }),
                normalizePageContext("ticket"),
                normalizePageContext(null),
            ];
        }"""
    )
    assert result == [
        {"route": "/t/1", "entity_type": "ticket", "entity_id": "42"},
        {"route": "/t/1"},
        {"entity_type": "ticket", "entity_id": "1"},
        {"route": "/x"},
        {},
        None,
        None,
    ]


async def test_a_tool_summary_is_one_short_line(login_page: UI) -> None:
    """The host's summary is the tool's own sentence when its result has one, else the tool's name and how the call ended (an error's message, a rejection, an expiry), on one line of at most 200 characters, never the raw result."""
    result = await login_page.page.evaluate(
        """async () => {
            const { toolSummary } = await import("/static/vernis/host.js");
            const data = { contact: { id: "c1", name: "Jane" }, added: ["vip"] };
            return [
                toolSummary("add_tags", "ok", { ok: true, data, summary: "Tagged Jane as vip" }),
                toolSummary("add_tags", "ok", { ok: true, data, summary: "x ".repeat(300) }),
                toolSummary("add_tags", "ok", { ok: true, data }),
                toolSummary("add_tags", "error", { ok: false, error: { code: "not_found", message: "No such\\ncontact." } }),
                toolSummary("add_tags", "error", undefined),
                toolSummary("add_tags", "rejected", undefined),
                toolSummary("add_tags", "expired", { ok: false, error: { code: "expired", message: "No reviewer answered." } }),
            ];
        }"""
    )
    assert result[0] == "Tagged Jane as vip"
    assert len(result[1]) == 200
    assert result[1].endswith("…")
    assert result[2:] == [
        "Add tags: done.",
        "Add tags failed: No such contact.",
        "Add tags failed.",
        "Add tags: rejected, nothing was changed.",
        "Add tags: No reviewer answered.",
    ]
