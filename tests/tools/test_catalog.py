"""Putting toolkits and the configuration together: collisions refused, roles merged, hooks run in order."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.identity import ASSISTANT_USE
from vernis.tools import (
    Entity,
    PagePattern,
    QuickAction,
    Tool,
    ToolContext,
    Toolkit,
    ToolkitEnv,
    ToolkitError,
)
from vernis.tools.catalog import DEFAULT_PERSONA, Catalog


class NoArgs(BaseModel):
    pass


async def nothing(ctx: ToolContext[Any], args: NoArgs) -> dict[str, Any]:
    return {}


async def name_it(ctx: ToolContext[Any], entity_id: str) -> Entity | None:
    return Entity(entity_id)


def kit(name: str, *tools: str, **options: Any) -> Toolkit[Any]:
    return Toolkit(
        name,
        tools=[Tool(t, "Test", f"{t}.", NoArgs, f"{name}:use", False, nothing) for t in tools],
        **options,
    )


def test_two_toolkits_offering_one_tool_name_stop_the_start() -> None:
    """The same tool name in two toolkits is refused with a message naming the tool and both toolkits."""
    with pytest.raises(ToolkitError, match=r"'lookup' is offered by two toolkits, 'one' and 'two'"):
        Catalog([kit("one", "lookup"), kit("two", "lookup")])


def test_two_resolvers_for_one_entity_type_stop_the_start() -> None:
    """Two toolkits resolving the same entity type are refused, naming both."""
    with pytest.raises(ToolkitError, match=r"'ticket' is resolved by two toolkits, 'one' and 'two'"):
        Catalog([kit("one", resolvers={"ticket": name_it}), kit("two", resolvers={"ticket": name_it})])


def test_role_table_merges_core_toolkit_grants_and_configuration() -> None:
    """Core roles hold assistant:use; toolkits add their grants; a configured role replaces a role's set whole."""
    catalog = Catalog(
        [
            kit("one", "a", role_grants={"member": ["one:use"], "agent": ["one:use"]}),
            kit("two", "b", role_grants={"member": ["two:use"]}),
        ],
        roles={"admin": ["assistant:use", "two:use"], "auditor": ["one:use"]},
    )
    roles = catalog.roles
    assert roles.permissions("member") == {ASSISTANT_USE, "one:use", "two:use"}
    assert roles.permissions("agent") == {ASSISTANT_USE, "one:use"}
    assert roles.permissions("admin") == {ASSISTANT_USE, "two:use"}
    assert roles.permissions("auditor") == {"one:use"}
    assert roles.permissions("stranger") == frozenset()
    assert roles.permissions("member", revoked=["two:use"]) == {ASSISTANT_USE, "one:use"}
    assert catalog.tools_by_role()["member"] == ["a", "b"]
    assert catalog.tools_by_role()["auditor"] == ["a"]


def test_persona_comes_from_the_configuration_then_a_toolkit_then_the_default() -> None:
    """The configuration's instructions win; else the first toolkit persona; else the default; each with the assistant's name."""
    assert Catalog([]).persona == DEFAULT_PERSONA.replace("{name}", "Vernis")
    with_persona = kit("one", persona="You are {name}, the CRM's assistant.")
    assert Catalog([with_persona], assistant_name="Ada").persona == "You are Ada, the CRM's assistant."
    configured = Catalog([with_persona], assistant_name="Ada", instructions="Answer in French.")
    assert configured.persona.startswith("You are Ada, the assistant built into this product.")
    assert configured.persona.endswith("\n\nAnswer in French.")


def test_quick_actions_follow_permissions_and_pages() -> None:
    """A member sees the actions their permissions allow, page actions only on their entity's pages, none without assistant:use."""
    catalog = Catalog(
        [kit("one", quick_actions=[QuickAction("Mine", "List mine.", permission="one:use")])],
        quick_actions=[
            QuickAction("Anyone", "Hello."),
            QuickAction("This ticket", "Summarize it.", entity_types=("ticket",)),
        ],
    )
    member = frozenset({ASSISTANT_USE, "one:use"})
    assert [a.label for a in catalog.quick_actions_for(member, None)] == ["Mine", "Anyone"]
    assert [a.label for a in catalog.quick_actions_for(member, "ticket")] == ["Mine", "Anyone", "This ticket"]
    assert [a.label for a in catalog.quick_actions_for(frozenset({ASSISTANT_USE}), "ticket")] == [
        "Anyone",
        "This ticket",
    ]
    assert catalog.quick_actions_for(frozenset({"one:use"}), None) == []


def test_configured_pages_come_before_the_toolkits() -> None:
    """The host's own route patterns are tried before the toolkits' (a host may map a route differently)."""
    catalog = Catalog(
        [kit("one", pages=[PagePattern("/tickets/{id}", "ticket")])],
        pages=[PagePattern("/tickets/{id}", "incident")],
    )
    assert [p.entity_type for p in catalog.pages] == ["incident", "ticket"]


async def test_hooks_start_in_order_stop_in_reverse_and_a_failed_start_stops_the_rest(
    engine: AsyncEngine,
) -> None:
    """Startup hooks run in order with their options and give each toolkit's resources; a failing one stops those already started."""
    log: list[str] = []

    def hooks(name: str, fail: bool = False) -> dict[str, Any]:
        async def startup(env: ToolkitEnv) -> str:
            log.append(f"start {name} {dict(env.options)}")
            if fail:
                raise RuntimeError("no API")
            return f"{name}-resources"

        async def shutdown(resources: str) -> None:
            log.append(f"stop {resources}")

        return {"startup": startup, "shutdown": shutdown}

    catalog = Catalog([kit("one", "a", **hooks("one")), kit("two", "b", **hooks("two"))])
    await catalog.start(engine, {"two": {"api_url": "http://api"}})
    assert catalog.registry.resources == {"one": "one-resources", "two": "two-resources"}
    await catalog.stop()
    assert log == [
        "start one {}",
        "start two {'api_url': 'http://api'}",
        "stop two-resources",
        "stop one-resources",
    ]
    assert catalog.registry.resources == {}

    log.clear()
    failing = Catalog([kit("one", "a", **hooks("one")), kit("two", "b", **hooks("two", fail=True))])
    with pytest.raises(ToolkitError, match="'two' failed to start"):
        await failing.start(engine, {})
    assert log == ["start one {}", "start two {}", "stop one-resources"]
