"""The offline demo's scenarios (`vernis serve --scripted-model`): enough of a model to show every
tool category working, without one.

- Quick actions (SPEC §11): a recognised request calls the matching tool, if this user is offered it;
  "Summarize this contact" on a contact's page reads that contact (its id is in the system prompt's
  current page), and "today" is the organization's today (the system prompt's date).
- After tool results: a short summary of what came back (lists, numbers, errors), or, for a write's
  preview, the change and the question whether to go ahead.
- "Yes" after a preview: the identical call again with `confirmed: true` (the server checks that the
  user really answered after the preview; the model cannot skip it).
- "Text this contact: <message>" on a contact's page: `send_sms` to that contact, previewed (in demo
  mode a member's SMS then waits for an admin's review, SPEC §23); once a reviewer decided, the
  answer that follows says how it went (`review_outcome`).
- "Ask me (a few) questions ...": a form of questions (`ask_user`, SPEC §17); the answer after
  the user's form says what they answered.
- On a host page with its own tools (the embed demo): "Open Jane Cooper's page" and "New contact
  form for Ada Lovelace" (`vernis_crm.demo.page_tools`).
- Anything else: the catch-all scripted answer.

Every answer says it is scripted. The tests' scripted model does not use these (their answers are
scripted per test); `demo_scenarios()` is only for the demo.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import orjson

from vernis.model.scripted.scenarios import (
    SCRIPTED_TITLE_MODEL,
    Scenario,
    TitleScenario,
    ask_user_scenario,
    echo_reply,
    last_user_text,
    prompt_text,
    reasoning_scenario,
)
from vernis.model.scripted.script import Reply, ScriptedToolCall
from vernis_crm.demo.page_tools import fill_contact_form, open_contact_page

__all__ = ["QUICK_ACTIONS", "QuickAction", "demo_scenarios"]

NOTE = "\n\n_Scripted demo answer: no language model is connected._"
YES = re.compile(r"^\s*(yes|yep|yeah|sure|ok(ay)?|confirm(ed)?|go ahead|do it|approve[d]?|please do)\b", re.I)
LIST_ITEMS = 8


# The arguments of a quick action's call, from the user's text and the whole request.
Arguments = Callable[[str, Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class QuickAction:
    pattern: re.Pattern[str]
    tool: str
    arguments: Arguments
    intro: str


def _named() -> Arguments:
    """A search query from "... for / named / called <words>", else no query (a plain list)."""

    def build(text: str, body: Mapping[str, Any]) -> dict[str, Any]:
        match = re.search(r"\b(?:for|named|called)\s+([^.?!,:;]+)", text, re.I)
        query = match.group(1).strip(" \"'") if match else ""
        return {"query": query} if query else {}

    return build


def _fixed(arguments: dict[str, Any]) -> Arguments:
    return lambda text, body: dict(arguments)


TODAY = re.compile(r"^- Today: \w+, (\w+ \d{1,2}, \d{4})", re.M)


def organization_today(body: Mapping[str, Any]) -> date | None:
    """The organization's today, as the turn's context says it ("- Today: Tuesday, November 24, 2026")."""
    match = TODAY.search(prompt_text(body))
    if match is None:
        return None
    try:
        return datetime.strptime(match.group(1), "%B %d, %Y").date()
    except ValueError:
        return None


def _today(text: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Today only, on the organization's calendar (the tool's default is the last seven days)."""
    today = organization_today(body)
    return {"from": today.isoformat(), "to": today.isoformat()} if today else {}


FIRST_NAMES = ("Alex", "Sam", "Jordan", "Riley", "Casey", "Morgan", "Jamie", "Avery", "Quinn", "Rowan")
LAST_NAMES = ("Morgan", "Bennett", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Alvarez", "Kowalski")


def _example_contact(text: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """A fresh example contact each time (the approval demo can be tried again and again)."""
    first, last = secrets.choice(FIRST_NAMES), secrets.choice(LAST_NAMES)
    tag = secrets.token_hex(3)
    return {
        "first_name": first,
        "last_name": last,
        "emails": [{"email": f"{first}.{last}.{tag}@example.com".lower(), "label": "work"}],
    }


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
        _today,
        "Today's activity so far.",
    ),
    QuickAction(
        re.compile(r"create (?:a )?(?:new )?contact", re.I),
        "create_contact",
        _example_contact,
        "I prepared an example contact (a made-up person).",
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
            tool_calls=[
                ScriptedToolCall(action.tool, _fit(action.arguments(text, body), offered[action.tool]))
            ],
        )
    return None


# The page the user is on, as the system prompt names it (vernis.model.prompt).
CURRENT_PAGE = re.compile(r'The user is looking at the ([a-z][a-z ]*) "[^"\n]*" \(id ([^)\s]+)\)')
SUMMARIZE = re.compile(r"\bsummari[sz]e this ([a-z ]+?)\b(?: for me)?[.!?]?$", re.I)
# How the demo reads the entity a page shows: the tool and its id argument.
PAGE_TOOLS = {"contact": ("get_contact_details", "contact_id"), "call": ("get_call_details", "call_id")}


def summarize_page(body: Mapping[str, Any], /) -> Reply | None:
    """ "Summarize this contact" (or call): read the entity of the current page with its tool."""
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "user":
        return None
    match = SUMMARIZE.search(last_user_text(body).strip())
    page = CURRENT_PAGE.search(prompt_text(body))
    if match is None:
        return None
    if page is None:
        return Reply(f"I cannot tell which {match.group(1)} you mean: this page does not show one." + NOTE)
    entity_type = page.group(1).replace(" ", "_")
    tool = PAGE_TOOLS.get(entity_type)
    offered = _offered(body)
    if tool is None or tool[0] not in offered:
        return Reply(f"The demo cannot summarize this {page.group(1)}." + NOTE)
    name, argument = tool
    call = ScriptedToolCall(name, {argument: page.group(2)})
    return Reply(f"Reading this {page.group(1)}.", tool_calls=[call])


TEXT_THIS = re.compile(r"^\s*(?:text|send an? sms to) this contact\s*:\s*(\S.*)$", re.I | re.S)


def text_this_contact(body: Mapping[str, Any], /) -> Reply | None:
    """ "Text this contact: <message>" on a contact's page: send_sms to it (previewed first)."""
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "user":
        return None
    match = TEXT_THIS.match(last_user_text(body))
    if match is None:
        return None
    page = CURRENT_PAGE.search(prompt_text(body))
    if page is None or page.group(1) != "contact":
        return Reply("Open a contact's page first, then ask me to text this contact." + NOTE)
    if "send_sms" not in _offered(body):
        return Reply("You are not allowed to send SMS." + NOTE)
    call = ScriptedToolCall("send_sms", {"contact_id": page.group(2), "body": match.group(1).strip()})
    return Reply("Preparing the SMS.", tool_calls=[call])


def review_outcome(body: Mapping[str, Any], /) -> Reply | None:
    """The answer after a reviewer decided (SPEC §23): nobody wrote since the last answer (the
    request ends with it), and the reviewed call's result says what the reviewer did."""
    messages = list(body.get("messages") or [])
    if not messages or messages[-1].get("role") != "assistant":
        return None
    for message in reversed(messages):
        if message.get("role") != "tool":
            continue
        try:
            envelope = orjson.loads(message.get("content") or "null")
        except orjson.JSONDecodeError:
            continue
        if not isinstance(envelope, Mapping) or not isinstance(envelope.get("review"), Mapping):
            continue
        review = envelope["review"]
        who = review.get("reviewer") or "A reviewer"
        note = f" Their note: “{review['note']}”" if review.get("note") else ""
        if envelope.get("ok"):
            return Reply(
                f"{who} approved the change, and it was made.{note}\n\n{_markdown(envelope.get('data'))}"
                + NOTE
            )
        error = envelope.get("error") or {}
        if error.get("code") == "rejected":
            return Reply(f"{who} rejected the change; nothing was changed.{note}" + NOTE)
        return Reply(
            f"{who} approved the change, but it did not work: {error.get('message', 'unknown error')}" + NOTE
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


ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[+-]\d{2}:?\d{2}|Z)?$")


def _value(value: Any) -> str:
    """A value as a person reads it: a time as "Nov 24, 14:05" (the tools give times in the
    organization's time zone, with its offset: kept as is), yes / no, else the text."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str) and ISO_DATETIME.match(value):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        return f"{when:%b} {when.day}, {when:%Y} {when:%H:%M}"
    return str(value)


def _details(item: Mapping[str, Any]) -> str:
    skip = {"id", "name", "title", "label", "full_name"}
    parts = [
        f"{k.replace('_', ' ')}: {_value(v)}"
        for k, v in item.items()
        if k not in skip and isinstance(v, str | int | float) and not isinstance(v, bool)
    ]
    return "; ".join(parts[:3])


def _contact_summary(data: Mapping[str, Any]) -> str:
    """A contact's details (get_contact_details) as a short summary."""
    name = str(
        data.get("name") or " ".join(str(data.get(k) or "") for k in ("first_name", "last_name")).strip()
    )
    lines = [f"**{name}**" + (f" ({data['company']})" if data.get("company") else "")]
    emails = [str(e.get("email")) for e in data.get("emails") or () if isinstance(e, Mapping)]
    phones = [
        str(p.get("number") or p.get("e164")) for p in data.get("phones") or () if isinstance(p, Mapping)
    ]
    if emails:
        lines.append(f"- E-mail: {', '.join(emails)}")
    if phones:
        lines.append(f"- Phone: {', '.join(phones)}")
    if data.get("tags"):
        lines.append(f"- Tags: {', '.join(str(tag) for tag in data['tags'])}")
    if data.get("created_at"):
        lines.append(f"- In the CRM since {_value(data['created_at'])}")
    activity = data.get("activity")
    if isinstance(activity, Mapping) and activity:
        calls, messages = activity.get("calls", 0), activity.get("messages", 0)
        line = f"- {calls} call{'s' if calls != 1 else ''}, {messages} message{'s' if messages != 1 else ''}"
        if activity.get("last_call_at"):
            line += f"; last call {_value(activity['last_call_at'])}"
        lines.append(line)
        lines.append(
            f"- Open tasks: {activity.get('open_tasks', 0)}; active plans: {activity.get('active_plans', 0)}"
        )
    notes = data.get("notes")
    latest = (
        [n for n in notes.get("latest") or () if isinstance(n, Mapping)] if isinstance(notes, Mapping) else []
    )
    if latest:
        lines.append(f"- Latest note ({_value(latest[0].get('created_at'))}): {latest[0].get('body')}")
    return "\n".join(lines)


def _markdown(data: Any) -> str:
    if isinstance(data, Mapping) and "first_name" in data and "emails" in data:
        return _contact_summary(data)
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
            rows = "\n".join(f"| {k.replace('_', ' ').capitalize()} | {_value(v)} |" for k, v in scalars[:20])
            return "| What | Value |\n|---|---|\n" + rows
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
        ask_user_scenario,
        review_outcome,
        confirm_previewed_write,
        # The embed demo's own page tools (SPEC §18): before the summary of a search's results.
        open_contact_page,
        fill_contact_form,
        summarize_tool_results,
        text_this_contact,
        summarize_page,
        quick_action,
        reasoning_scenario,
        echo_reply,
    ]
