"""The offline demo's scripted scenarios, on request bodies as the server sends them."""

from __future__ import annotations

from typing import Any

import orjson

from vernis_crm.demo.scripted import confirm_previewed_write, quick_action, summarize_tool_results

TOOLS = [
    {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }
    for name, properties in [
        ("search_contacts", {"query": {"type": "string"}, "limit": {"type": "integer"}}),
        ("get_recent_calls", {"limit": {"type": "integer"}}),
        ("mark_notification_read", {"notification_id": {"type": "string"}, "confirmed": {"type": "boolean"}}),
    ]
]


def body(*messages: dict[str, Any], tools: list[dict[str, Any]] = TOOLS) -> dict[str, Any]:
    return {
        "model": "vernis-scripted",
        "messages": [{"role": "system", "content": "..."}, *messages],
        "tools": tools,
    }


def tool_exchange(name: str, arguments: dict[str, Any], envelope: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": orjson.dumps(envelope).decode()},
    ]


def test_quick_action_calls_the_offered_tool_with_its_arguments() -> None:
    """ "Search contacts for Jane" calls search_contacts with the query; arguments the tool lacks are dropped."""
    reply = quick_action(body({"role": "user", "content": "Search contacts for Jane Cooper"}))
    assert reply is not None
    (call,) = reply.tool_calls
    assert (call.name, call.arguments) == ("search_contacts", {"query": "Jane Cooper"})
    calls = quick_action(body({"role": "user", "content": "Show recent calls"}))
    assert calls is not None
    assert calls.tool_calls[0].arguments == {"limit": 10}


def test_quick_action_for_a_tool_not_offered_explains() -> None:
    """A quick action whose tool this user is not offered gets an explanation, no call."""
    reply = quick_action(body({"role": "user", "content": "Dashboard stats"}))
    assert reply is not None
    assert not reply.tool_calls
    assert "not allowed" in reply.full_text


def test_tool_results_are_summarized() -> None:
    """A list result becomes a bullet list; an error its message and hint; every answer says it is scripted."""
    found = summarize_tool_results(
        body(
            {"role": "user", "content": "find jane"},
            *tool_exchange(
                "search_contacts",
                {"query": "jane"},
                {
                    "ok": True,
                    "data": {"contacts": [{"id": "1", "name": "Jane Cooper", "company": "Cooper Co"}]},
                },
            ),
        )
    )
    assert found is not None
    assert "- **Jane Cooper**: company: Cooper Co" in found.full_text
    assert "Scripted demo answer" in found.full_text
    failed = summarize_tool_results(
        body(
            *tool_exchange(
                "search_contacts",
                {},
                {"ok": False, "error": {"code": "bad", "message": "Nope.", "hint": "Try again."}},
            )
        )
    )
    assert failed is not None
    assert "did not work: Nope. Try again." in failed.full_text


def test_yes_after_a_preview_repeats_the_call_confirmed_once() -> None:
    """ "Yes" after a pending preview repeats the identical call with confirmed=true; once carried out, "yes" does nothing."""
    preview = tool_exchange(
        "mark_notification_read",
        {"notification_id": "n1"},
        {"ok": True, "data": {"confirmation_id": "a1", "preview": {}}},
    )
    reply = confirm_previewed_write(
        body({"role": "user", "content": "mark it"}, *preview, {"role": "user", "content": "Yes please"})
    )
    assert reply is not None
    assert reply.tool_calls[0].arguments == {"notification_id": "n1", "confirmed": True}
    done: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c2",
                    "type": "function",
                    "function": {
                        "name": "mark_notification_read",
                        "arguments": '{"notification_id": "n1", "confirmed": true}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": '{"ok": true, "data": {"read": true}}'},
    ]
    again = confirm_previewed_write(
        body(*preview, {"role": "user", "content": "yes"}, *done, {"role": "user", "content": "yes"})
    )
    assert again is None
    assert confirm_previewed_write(body({"role": "user", "content": "no thanks"}, *preview)) is None
