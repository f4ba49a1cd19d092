"""Declaring tools and toolkits, page routes, and loading toolkits by entry point (SPEC §14 item 3)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from vernis.tools import PagePattern, Tool, ToolContext, Toolkit, ToolkitError, load_toolkits, tool


class FindArgs(BaseModel):
    query: str = Field(description="Words from the subject.")


async def find(ctx: ToolContext[None], args: FindArgs) -> dict[str, Any]:
    """Find tickets by subject.

    Matches any word, case-insensitively.
    """
    return {"query": args.query}


def test_decorator_takes_name_description_and_arguments_from_the_function() -> None:
    """`@tool` names the tool after the function, describes it by the docstring's first paragraph and types it by the annotation."""
    declared = tool(permission="ticket:view", category="Tickets")(find)
    assert (declared.name, declared.description, declared.args) == (
        "find",
        "Find tickets by subject.",
        FindArgs,
    )
    assert (declared.permission, declared.category, declared.writes) == ("ticket:view", "Tickets", False)
    parameters = declared.definition()["function"]["parameters"]
    assert parameters["properties"]["query"]["description"] == "Words from the subject."
    assert "confirmed" not in parameters["properties"]


def test_decorator_refuses_what_the_framework_cannot_offer() -> None:
    """A sync function, one without a pydantic argument model, or one without a description is refused at declaration."""

    def not_async(ctx: ToolContext[None], args: FindArgs) -> None:
        """Sync."""

    async def untyped(ctx: ToolContext[None], args: dict[str, Any]) -> None:
        """Untyped."""

    async def silent(ctx: ToolContext[None], args: FindArgs) -> None:
        pass

    with pytest.raises(TypeError, match="async"):
        tool(permission="p")(not_async)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pydantic"):
        tool(permission="p")(untyped)
    with pytest.raises(TypeError, match="description"):
        tool(permission="p")(silent)
    with pytest.raises(ValueError, match="preview"):
        tool(permission="p", writes=True)(find)


def test_toolkit_owns_the_tools_it_declares() -> None:
    """A toolkit's decorator and `add` mark each tool as its own (its resources go to it); a name twice is refused."""
    kit: Toolkit[None] = Toolkit("helpdesk_test")
    declared = kit.tool(permission="ticket:view")(find)
    added = kit.add(Tool("other", "Misc", "Other.", FindArgs, "ticket:view", False, find))
    assert (declared.toolkit, added.toolkit) == ("helpdesk_test", "helpdesk_test")
    assert declared.category == "Helpdesk Test"
    assert [t.name for t in kit.tools] == ["find", "other"]
    with pytest.raises(ToolkitError, match="twice"):
        kit.tool(permission="ticket:view")(find)
    with pytest.raises(ToolkitError, match="lowercase"):
        Toolkit("Bad Name")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/tickets/T-1001", "T-1001"),
        ("/tickets/T-1001/", "T-1001"),
        ("/TICKETS/abc_9", "abc_9"),
        ("/tickets", None),
        ("/tickets/T-1/comments", None),
        ("/tickets/../etc", None),
        ("/other/T-1", None),
    ],
)
def test_page_pattern_reads_the_id_from_the_route(path: str, expected: str | None) -> None:
    """`/tickets/{id}` matches exactly that shape and yields the id; anything else is no match."""
    assert PagePattern("/tickets/{id}", "ticket").match(path) == expected


def test_page_pattern_needs_exactly_one_id() -> None:
    """A route pattern without `{id}`, with two, or not starting with / is refused."""
    for route in ("/tickets", "/a/{id}/b/{id}", "tickets/{id}"):
        with pytest.raises(ValueError, match="id"):
            PagePattern(route, "ticket")
    assert PagePattern("/orgs/{org}/tickets/{id}", "ticket").match("/orgs/acme/tickets/7") == "7"


def test_installed_toolkits_load_by_entry_point_name() -> None:
    """The CRM and the helpdesk example load through the `vernis.toolkits` entry points; an unknown name lists what is there."""
    crm, helpdesk = load_toolkits(["crm", "helpdesk", "crm"])
    assert (crm.name, helpdesk.name) == ("crm", "helpdesk")
    assert len(crm.tools) == 40
    with pytest.raises(ToolkitError, match=r"no toolkit named 'nope'.*installed: crm, helpdesk"):
        load_toolkits(["nope"])
