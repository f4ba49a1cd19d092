"""The offline demo's scenarios for the host page's own tools (SPEC §18), on request bodies as the
server sends them."""

from __future__ import annotations

from typing import Any

import orjson

from vernis_crm.demo.page_tools import fill_contact_form, open_contact_page
from vernis_crm.demo.scripted import demo_scenarios


def tools(*names: str) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
        for name in names
    ]


def body(*messages: dict[str, Any], offered: tuple[str, ...]) -> dict[str, Any]:
    return {
        "model": "vernis-scripted",
        "messages": [{"role": "system", "content": "..."}, *messages],
        "tools": tools(*offered),
    }


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def searched(contacts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "search_contacts", "arguments": "{}"}}
    envelope = {"ok": True, "data": {"contacts": contacts, "total": len(contacts)}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": orjson.dumps(envelope).decode()},
    ]


PAGE = ("search_contacts", "navigate", "fill_contact_form")


def test_open_a_page_searches_then_navigates_to_the_first_contact() -> None:
    """ "Open Jane Cooper's page" searches for the name, then navigates to the first contact found."""
    first = open_contact_page(body(user("Open Jane Cooper's page"), offered=PAGE))
    assert first is not None
    assert [(c.name, c.arguments) for c in first.tool_calls] == [
        ("search_contacts", {"query": "Jane Cooper"})
    ]
    found = [{"id": "abc-1", "name": "Jane Cooper"}, {"id": "abc-2", "name": "Jane Coopers"}]
    then = open_contact_page(body(user("Open Jane Cooper's page"), *searched(found), offered=PAGE))
    assert then is not None
    assert [(c.name, c.arguments) for c in then.tool_calls] == [("navigate", {"path": "/contacts/abc-1"})]
    nothing = open_contact_page(body(user("Open Jane Cooper's page"), *searched([]), offered=PAGE))
    assert nothing is not None
    assert not nothing.tool_calls


def test_page_tool_scenarios_need_the_page_to_offer_them() -> None:
    """Without the page's navigate or fill_contact_form (the CRM's own pages), neither scenario applies."""
    assert open_contact_page(body(user("Open Jane Cooper's page"), offered=("search_contacts",))) is None
    assert (
        fill_contact_form(body(user("New contact form for Ada Lovelace"), offered=("search_contacts",)))
        is None
    )


def test_new_contact_form_calls_the_page_write_with_the_names() -> None:
    """ "New contact form for Ada Lovelace" calls the page's fill_contact_form with the first and last name."""
    reply = fill_contact_form(body(user("New contact form for Ada Lovelace, please"), offered=PAGE))
    assert reply is not None
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("fill_contact_form", {"first_name": "Ada", "last_name": "Lovelace"})
    ]


def test_the_demo_runs_them_before_the_summary_of_results() -> None:
    """In the demo's scenario list the page-tool scenarios come before the summary of tool results (which would end the search)."""
    names = [getattr(scenario, "__name__", "") for scenario in demo_scenarios()]
    assert names.index("open_contact_page") < names.index("summarize_tool_results")
    assert names.index("fill_contact_form") < names.index("quick_action")
