"""The offline demo's scenarios for the host page's own tools (SPEC §18), so that the embed demo's
`navigate` and `fill_contact_form` can be tried without a model:

- "Open Jane Cooper's page" (when the page offers `navigate`): `search_contacts` for the name, then
  `navigate` to the first contact found (`/contacts/<id>`).
- "New contact form for Ada Lovelace" (when the page offers `fill_contact_form`): that write, with
  the first and last name; the server shows its approval card, and the page opens its form once the
  user approved it.

Each returns None when it does not apply, like the other demo scenarios (`vernis_crm.demo.scripted`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from vernis.model.scripted import Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import last_user_text

__all__ = ["fill_contact_form", "open_contact_page"]

NOTE = "\n\n_(A scripted demo answer.)_"
OPEN = re.compile(
    r"^\s*(?:open|go to|show me)\s+(?:the\s+)?(?:page\s+of\s+)?(.+?)(?:'s)?(?:\s+page)?\s*[.!?]?\s*$", re.I
)
NEW_CONTACT = re.compile(r"new[- ]contact(?:\s+form)?\s+for\s+([^\s.?!,]+)(?:\s+([^\s.?!,]+))?", re.I)


def _offered(body: Mapping[str, Any]) -> set[str]:
    return {
        tool["function"]["name"]
        for tool in body.get("tools") or ()
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
    }


def _last_results(messages: list[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    """(tool name, envelope) of the tool messages answering the last assistant tool call."""
    names: dict[str, str] = {}
    results: list[tuple[str, Any]] = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            names = {call["id"]: call["function"]["name"] for call in message["tool_calls"]}
            results = []
        elif message.get("role") == "tool":
            try:
                envelope = orjson.loads(message.get("content") or "null")
            except orjson.JSONDecodeError:
                envelope = None
            results.append((names.get(str(message.get("tool_call_id", "")), ""), envelope))
    return results


def open_contact_page(body: Mapping[str, Any], /) -> Reply | None:
    """ "Open <name>'s page": find the contact, then open its page with the page's `navigate`."""
    match = OPEN.match(last_user_text(body))
    offered = _offered(body)
    if match is None or "navigate" not in offered or "search_contacts" not in offered:
        return None
    messages = list(body.get("messages") or [])
    if messages and messages[-1].get("role") == "user":
        name = match.group(1).strip(" \"'")
        return Reply(
            f"Looking for {name}.", tool_calls=[ScriptedToolCall("search_contacts", {"query": name})]
        )
    results = _last_results(messages)
    if (
        not messages
        or messages[-1].get("role") != "tool"
        or [name for name, _ in results] != ["search_contacts"]
    ):
        return None
    envelope = results[0][1]
    data = envelope.get("data") if isinstance(envelope, Mapping) else None
    contacts = data.get("contacts") if isinstance(data, Mapping) else None
    if not contacts:
        return Reply("I found no such contact, so I opened nothing." + NOTE)
    return Reply(
        f"Opening {contacts[0].get('name', 'the contact')}.",
        tool_calls=[ScriptedToolCall("navigate", {"path": f"/contacts/{contacts[0]['id']}"})],
    )


def fill_contact_form(body: Mapping[str, Any], /) -> Reply | None:
    """ "New contact form for <first> <last>": the page's `fill_contact_form` (approved first)."""
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "user" or "fill_contact_form" not in _offered(body):
        return None
    match = NEW_CONTACT.search(last_user_text(body))
    if match is None:
        return None
    fields = {"first_name": match.group(1)}
    if match.group(2):
        fields["last_name"] = match.group(2)
    return Reply(
        "I can open the new-contact form for you.", tool_calls=[ScriptedToolCall("fill_contact_form", fields)]
    )
