"""Infrastructure tools against the seeded demo: voice and text agents and analyzers; which roles get
the infrastructure tools (phone number tools included: the same category)."""

from __future__ import annotations

from typing import Any

from tests.crm.tools._infrastructure import ADMIN, GLOBEX, MEMBER, OWNER, VIEWER, confirmed, snapshot
from tests.crm.tools.conftest import Tools, data, error_code

READS = {"get_phone_numbers", "get_agents", "get_analyzers"}
WRITES = {
    "create_agent",
    "update_agent",
    "create_analyzer",
    "assign_phone_agent",
    "assign_phone_analyzers",
    "assign_phone_text_agent",
}


async def test_roles_are_offered_the_infrastructure_tools_they_may_use(tools: Tools) -> None:
    """Owners and admins get all nine tools; members and viewers only the three reads, and a member's
    infrastructure write is refused as forbidden without changing anything."""
    for email in (OWNER, ADMIN):
        assert await tools.offered(email) >= READS | WRITES
    for email in (MEMBER, VIEWER):
        offered = await tools.offered(email)
        assert offered >= READS
        assert not offered & WRITES
    before = await snapshot(tools)
    ava = str(tools.entity("acme:voice_agent:Front Desk Ava"))
    recall = str(tools.entity("acme:phone_number:Recall line"))
    quality = str(tools.entity("acme:analyzer:Call quality"))
    calls: dict[str, dict[str, Any]] = {
        "create_agent": {"name": "Nina", "voice": "nina"},
        "update_agent": {"agent_id": ava, "active": False},
        "create_analyzer": {"name": "Upsell", "criteria": "Was an upsell offered?"},
        "assign_phone_agent": {"phone_number_id": recall, "agent_id": ava},
        "assign_phone_analyzers": {"phone_number_id": recall, "add": [quality]},
        "assign_phone_text_agent": {"phone_number_id": recall, "text_agent_id": None},
    }
    for name, arguments in calls.items():
        assert error_code(await tools.call(MEMBER, name, arguments)) == "forbidden"
        assert error_code(await tools.call(MEMBER, name, arguments | {"confirmed": True})) == "forbidden"
    assert await snapshot(tools) == before


async def test_get_agents_lists_voice_then_text_agents_of_the_organization(tools: Tools) -> None:
    """Voice agents first, then text agents, with the lines they serve; filters by kind and state;
    one agent in full by id; a Globex agent id is not found for Acme."""
    agents = data(await tools.call(VIEWER, "get_agents", {}))["agents"]
    assert [(agent["kind"], agent["name"]) for agent in agents] == [
        ("voice", "After-hours Max"),
        ("voice", "Front Desk Ava"),
        ("text", "SMS Concierge"),
    ]
    ava, concierge = agents[1], agents[2]
    assert ava["voice"] == "ava"
    assert ava["language"] == "en-US"
    assert ava["phone_numbers"] == ["Main line"]
    assert ava["active"] is True
    assert "voice" not in concierge
    assert concierge["phone_numbers"] == ["Main line", "Recall line"]

    texts = data(await tools.call(VIEWER, "get_agents", {"kind": "text"}))["agents"]
    assert [agent["name"] for agent in texts] == ["SMS Concierge"]
    assert data(await tools.call(VIEWER, "get_agents", {"active": False}))["agents"] == []
    paged = data(await tools.call(VIEWER, "get_agents", {"limit": 1, "offset": 1}))
    assert [agent["name"] for agent in paged["agents"]] == ["Front Desk Ava"]
    assert paged["next_offset"] == 2

    one = data(await tools.call(VIEWER, "get_agents", {"agent_id": ava["id"]}))["agents"]
    assert [agent["name"] for agent in one] == ["Front Desk Ava"]
    assert one[0]["instructions"].startswith("You are the front desk of Acme Dental.")

    foreign = str(tools.entity("globex:voice_agent:Globex Reception"))
    assert error_code(await tools.call(VIEWER, "get_agents", {"agent_id": foreign})) == "not_found"
    globex = data(await tools.call(GLOBEX, "get_agents", {}))["agents"]
    assert [agent["name"] for agent in globex] == ["Globex Reception", "Globex Orders"]


async def test_get_analyzers_lists_the_analyzers_and_their_lines(tools: Tools) -> None:
    """Acme's analyzers by name with the lines they run on; Globex's own are never shown to Acme."""
    result = data(await tools.call(VIEWER, "get_analyzers", {}))
    assert result["has_more"] is False
    assert [(item["name"], item["phone_numbers"]) for item in result["analyzers"]] == [
        ("Appointment intent", ["Main line"]),
        ("Call quality", ["After-hours line", "Main line"]),
    ]
    assert result["analyzers"][1]["criteria"].startswith("Greeting given;")
    page = data(await tools.call(VIEWER, "get_analyzers", {"limit": 1}))
    assert (len(page["analyzers"]), page["has_more"], page["next_offset"]) == (1, True, 1)
    globex = data(await tools.call(GLOBEX, "get_analyzers", {}))["analyzers"]
    assert [item["name"] for item in globex] == ["Lead qualification"]


async def test_create_agent_previews_then_creates_a_voice_agent(tools: Tools) -> None:
    """The preview shows the new agent and writes nothing; the approved write creates exactly it; a
    taken name (any case) is refused in the preview."""
    arguments = {"name": "Weekend Wendy", "voice": "wendy", "instructions": "Take messages on weekends."}
    preview, result = await confirmed(tools, ADMIN, "create_agent", arguments)
    expected = arguments | {"language": "en-US", "active": True}
    assert preview == {"action": "Create a voice agent", "agent": expected}
    assert result["agent"] == {"id": result["agent"]["id"], "kind": "voice"} | expected

    agents = data(await tools.call(VIEWER, "get_agents", {"agent_id": result["agent"]["id"]}))["agents"]
    assert agents == [
        {
            "id": result["agent"]["id"],
            "kind": "voice",
            "name": "Weekend Wendy",
            "voice": "wendy",
            "language": "en-US",
            "active": True,
            "instructions": "Take messages on weekends.",
            "phone_numbers": [],
        }
    ]
    taken = await tools.call(ADMIN, "create_agent", {"name": "front desk ava", "voice": "x"})
    assert error_code(taken) == "conflict"
    # Globex may use a name Acme uses: names are unique per organization.
    assert (await tools.call(GLOBEX, "create_agent", {"name": "Front Desk Ava", "voice": "x"})).status == (
        "needs_confirmation"
    )
    bad = await tools.call(ADMIN, "create_agent", {"name": "X", "voice": "x", "language": "English"})
    assert error_code(bad) == "invalid_arguments"
    extra = await tools.call(ADMIN, "create_agent", {"name": "X", "voice": "x", "phone": "+1"})
    assert error_code(extra) == "invalid_arguments"


async def test_update_agent_previews_each_change_from_to_and_applies_it(tools: Tools) -> None:
    """The preview lists only the fields that change, from → to; the write applies exactly those;
    unchanged values, a Globex agent and a text agent are refused in the preview."""
    ava = str(tools.entity("acme:voice_agent:Front Desk Ava"))
    arguments = {"agent_id": ava, "voice": "aria", "language": "en-US", "active": False}
    preview, result = await confirmed(tools, OWNER, "update_agent", arguments)
    changes = {"voice": {"from": "ava", "to": "aria"}, "active": {"from": True, "to": False}}
    assert preview == {
        "action": "Change a voice agent",
        "agent": {"id": ava, "name": "Front Desk Ava"},
        "changes": changes,
    }
    assert result == {"agent": {"id": ava, "name": "Front Desk Ava"}, "changes": changes}
    [agent] = data(await tools.call(VIEWER, "get_agents", {"agent_id": ava}))["agents"]
    assert (agent["voice"], agent["language"], agent["active"]) == ("aria", "en-US", False)

    same = await tools.call(OWNER, "update_agent", {"agent_id": ava, "voice": "aria"})
    assert error_code(same) == "no_change"
    clash = await tools.call(OWNER, "update_agent", {"agent_id": ava, "name": "After-hours Max"})
    assert error_code(clash) == "conflict"
    foreign = str(tools.entity("globex:voice_agent:Globex Reception"))
    assert (
        error_code(await tools.call(OWNER, "update_agent", {"agent_id": foreign, "active": False}))
        == "not_found"
    )
    text = str(tools.entity("acme:text_agent:SMS Concierge"))
    refused = await tools.call(OWNER, "update_agent", {"agent_id": text, "active": False})
    assert error_code(refused) == "not_found"
    assert "text agent" in refused.envelope["error"]["message"]
    assert error_code(await tools.call(OWNER, "update_agent", {"agent_id": ava})) == "invalid_arguments"


async def test_create_analyzer_previews_then_creates_it(tools: Tools) -> None:
    """The preview shows the analyzer and writes nothing; the write creates exactly it; a taken name is
    refused."""
    arguments = {
        "name": "Upsell",
        "description": "Whether whitening was offered.",
        "criteria": "Offered: yes/no.",
    }
    preview, result = await confirmed(tools, ADMIN, "create_analyzer", arguments)
    assert preview == {"action": "Create an analyzer", "analyzer": arguments}
    assert result["analyzer"] == {"id": result["analyzer"]["id"]} | arguments
    names = [item["name"] for item in data(await tools.call(VIEWER, "get_analyzers", {}))["analyzers"]]
    assert names == ["Appointment intent", "Call quality", "Upsell"]
    taken = await tools.call(ADMIN, "create_analyzer", {"name": "CALL QUALITY", "criteria": "x"})
    assert error_code(taken) == "conflict"
    assert (
        error_code(await tools.call(ADMIN, "create_analyzer", {"name": "No criteria"})) == "invalid_arguments"
    )
