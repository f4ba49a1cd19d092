"""The offline demo's scenarios (`vernis serve --scripted-model`): enough of a model to show every
tool category working, without one.

- Quick actions (SPEC §11): a recognised request calls the matching tool, if this user is offered it.
- After tool results: a short summary of what came back (lists, numbers, errors), or, for a write's
  preview, the change and the question whether to go ahead.
- "Yes" after a preview: the identical call again with `confirmed: true` (the server checks that the
  user really answered after the preview; the model cannot skip it).
- Anything else: the catch-all scripted answer.

Every answer says it is scripted. The tests' scripted model does not use these (their answers are
scripted per test); `demo_scenarios()` is only for the demo.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from vernis.scripted.scenarios import (
    SCRIPTED_TITLE_MODEL,
    Scenario,
    TitleScenario,
    echo_reply,
    last_user_text,
)
from vernis.scripted.script import Reply, ScriptedToolCall

__all__ = ["QUICK_ACTIONS", "QuickAction", "demo_scenarios"]

NOTE = "\n\n_Scripted demo answer: no language model is connected._"
YES = re.compile(r"^\s*(yes|yep|yeah|sure|ok(ay)?|confirm(ed)?|go ahead|do it|approve[d]?|please do)\b", re.I)
LIST_ITEMS = 8


@dataclass(frozen=True, slots=True)
class QuickAction:
    pattern: re.Pattern[str]
    tool: str
    arguments: Callable[[str], dict[str, Any]]
    intro: str


def _named() -> Callable[[str], dict[str, Any]]:
    """A search query from "... for / named / called <words>", else no query (a plain list)."""

    def build(text: str) -> dict[str, Any]:
        match = re.search(r"\b(?:for|named|called)\s+([^.?!,:;]+)", text, re.I)
        query = match.group(1).strip(" \"'") if match else ""
        return {"query": query} if query else {}

    return build


def _fixed(arguments: dict[str, Any]) -> Callable[[str], dict[str, Any]]:
    return lambda text: dict(arguments)


QUICK_ACTIONS: tuple[QuickAction, ...] = (
    QuickAction(
        re.compile(r"search (?:my |the )?contacts|find (?:a )?contact", re.I),
        "search_contacts",
        _named(),
        "Searching your contacts.",
    ),
    QuickAction(
        re.compile(r"recent calls", re.I),
        "get_recent_calls",
        _fixed({"limit": 10}),
        "Here are the latest calls.",
    ),
    QuickAction(
        re.compile(r"unanswered|follow[- ]?up|waiting for a reply", re.I),
        "get_unanswered_contacts",
        _fixed({"limit": 10}),
        "These contacts are waiting for an answer.",
    ),
    QuickAction(
        re.compile(r"send an? (?:sms|text)", re.I),
        "get_unanswered_contacts",
        _fixed({"limit": 5}),
        "Who should get the SMS? These contacts are waiting for an answer.",
    ),
    QuickAction(re.compile(r"dashboard", re.I), "get_dashboard_stats", _fixed({}), "Your dashboard numbers."),
    QuickAction(
        re.compile(r"today'?s activity|activity today|review today", re.I),
        "get_activity_counts",
        _fixed({}),
        "Today's activity so far.",
    ),
    QuickAction(
        re.compile(r"create (?:a )?(?:new )?contact", re.I),
        "create_contact",
        _fixed(
            {
                "first_name": "Alex",
                "last_name": "Morgan",
                "emails": [{"email": "alex.morgan@example.com", "label": "work"}],
            }
        ),
        "I prepared a new contact (Alex Morgan) as an example.",
    ),
    QuickAction(re.compile(r"engagement", re.I), "get_engagement_stats", _fixed({}), "Engagement, recently."),
    QuickAction(
        re.compile(r"\b(?:my|active)\s+(?:active\s+)?plans\b|plan stats", re.I),
        "get_plan_stats",
        _fixed({}),
        "How your plans are doing.",
    ),
    QuickAction(
        re.compile(r"notifications?", re.I),
        "get_notifications",
        _fixed({"unread_only": True}),
        "Your unread notifications.",
    ),
    QuickAction(re.compile(r"tasks?", re.I), "get_tasks", _fixed({}), "Your tasks."),
)


def _offered(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        tool["function"]["name"]: tool["function"].get("parameters", {})
        for tool in body.get("tools") or ()
        if isinstance(tool, dict) and "function" in tool
    }


def _fit(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Keep only the arguments the tool declares (the demo guesses; the schema decides)."""
    properties = schema.get("properties", {})
    return {key: value for key, value in arguments.items() if key in properties}


def quick_action(body: Mapping[str, Any], /) -> Reply | None:
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "user":
        return None
    text = last_user_text(body)
    offered = _offered(body)
    for action in QUICK_ACTIONS:
        if not action.pattern.search(text):
            continue
        if action.tool not in offered:
            return Reply(
                f"You asked for something that needs `{action.tool}`, which you are not allowed to use here."
                + NOTE
            )
        return Reply(
            action.intro,
            tool_calls=[ScriptedToolCall(action.tool, _fit(action.arguments(text), offered[action.tool]))],
        )
    return None


def _trailing_tool_results(messages: list[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    """(tool name, envelope) for the tool messages after the last assistant tool call."""
    names: dict[str, str] = {}
    results: list[tuple[str, Any]] = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            results = []
            names = {call["id"]: call["function"]["name"] for call in message["tool_calls"]}
        elif message.get("role") == "tool":
            try:
                envelope = orjson.loads(message.get("content") or "null")
            except orjson.JSONDecodeError:
                envelope = None
            results.append((names.get(message.get("tool_call_id", ""), "a tool"), envelope))
    return results


def _label(item: Mapping[str, Any]) -> str:
    for key in ("name", "title", "label", "full_name", "number"):
        if isinstance(item.get(key), str) and item[key]:
            return str(item[key])
    return next((str(v) for v in item.values() if isinstance(v, str) and v), "item")


def _details(item: Mapping[str, Any]) -> str:
    skip = {"id", "name", "title", "label", "full_name"}
    parts = [
        f"{k.replace('_', ' ')}: {v}"
        for k, v in item.items()
        if k not in skip and isinstance(v, str | int | float) and not isinstance(v, bool)
    ]
    return "; ".join(parts[:3])


def _markdown(data: Any) -> str:
    if isinstance(data, Mapping):
        for key, value in data.items():
            if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
                lines = [f"Found {len(value)} {key.replace('_', ' ')}:"]
                for item in value[:LIST_ITEMS]:
                    details = _details(item)
                    lines.append(f"- **{_label(item)}**" + (f": {details}" if details else ""))
                if len(value) > LIST_ITEMS:
                    lines.append(f"- …and {len(value) - LIST_ITEMS} more")
                return "\n".join(lines)
        scalars = [(k, v) for k, v in data.items() if isinstance(v, str | int | float | bool)]
        if scalars:
            rows = "\n".join(f"| {k.replace('_', ' ')} | {v} |" for k, v in scalars[:20])
            return "| | |\n|---|---|\n" + rows
    text = orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
    return "```json\n" + (text if len(text) < 1500 else text[:1500] + "\n…") + "\n```"


def summarize_tool_results(body: Mapping[str, Any], /) -> Reply | None:
    messages = list(body.get("messages") or [])
    if not messages or messages[-1].get("role") != "tool":
        return None
    parts = []
    for name, envelope in _trailing_tool_results(messages):
        if not isinstance(envelope, Mapping):
            parts.append(f"`{name}` returned something I could not read.")
        elif (
            envelope.get("ok")
            and isinstance(envelope.get("data"), Mapping)
            and "confirmation_id" in envelope["data"]
        ):
            preview = envelope["data"].get("preview")
            parts.append(
                f"Here is the change `{name}` would make; nothing has changed yet:\n\n"
                f"{_markdown(preview)}\n\nShall I go ahead? Approve it on the card, or answer “yes”."
            )
        elif envelope.get("ok"):
            parts.append(_markdown(envelope.get("data")))
        else:
            error = envelope.get("error") or {}
            hint = f" {error['hint']}" if error.get("hint") else ""
            parts.append(f"`{name}` did not work: {error.get('message', 'unknown error')}{hint}")
    return Reply("\n\n".join(parts) + NOTE)


def confirm_previewed_write(body: Mapping[str, Any], /) -> Reply | None:
    """After "yes", repeat the previewed call still waiting for an answer, with confirmed=true."""
    messages = list(body.get("messages") or [])
    if not messages or messages[-1].get("role") != "user" or not YES.search(last_user_text(body)):
        return None
    calls: dict[str, tuple[str, str]] = {}
    pending: tuple[str, str] | None = None
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                calls[call["id"]] = (call["function"]["name"], call["function"]["arguments"])
                if '"confirmed":true' in call["function"]["arguments"].replace(" ", ""):
                    pending = None  # that preview was already carried out
        elif message.get("role") == "tool":
            try:
                envelope = orjson.loads(message.get("content") or "null")
            except orjson.JSONDecodeError:
                continue
            data = envelope.get("data") if isinstance(envelope, Mapping) else None
            if isinstance(data, Mapping) and "confirmation_id" in data:
                pending = calls.get(message.get("tool_call_id", ""))
    if pending is None:
        return None
    name, arguments = pending
    try:
        parsed = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return None
    return Reply("Going ahead.", tool_calls=[ScriptedToolCall(name, {**parsed, "confirmed": True})])


def demo_scenarios(title_model: str = SCRIPTED_TITLE_MODEL) -> list[Scenario]:
    return [
        TitleScenario(title_model),
        confirm_previewed_write,
        summarize_tool_results,
        quick_action,
        echo_reply,
    ]
