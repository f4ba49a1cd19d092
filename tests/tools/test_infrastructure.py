"""Infrastructure tools against the seeded demo: phone numbers, agents, analyzers and assignments."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from tests.tools.conftest import Tools, data, error_code
from vernis.db.crm import Analyzer, PhoneNumber, PhoneNumberAnalyzer, TextAgent, VoiceAgent
from vernis.db.models import AuditEntry, table_of

OWNER = "owner@acme.test"
ADMIN = "admin@acme.test"
MEMBER = "member@acme.test"
VIEWER = "viewer@acme.test"
GLOBEX = "owner@globex.test"

READS = {"get_phone_numbers", "get_agents", "get_analyzers"}
WRITES = {
    "create_agent",
    "update_agent",
    "create_analyzer",
    "assign_phone_agent",
    "assign_phone_analyzers",
    "assign_phone_text_agent",
}
TABLES = [table_of(model) for model in (VoiceAgent, TextAgent, Analyzer, PhoneNumber, PhoneNumberAnalyzer)]
_audit = table_of(AuditEntry)


async def snapshot(tools: Tools) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the infrastructure tables, all organizations."""
    async with tools.engine.connect() as connection:
        return {
            table.name: sorted(tuple(row) for row in await connection.execute(sa.select(table)))
            for table in TABLES
        }


async def audited(tools: Tools, approval_id: Any) -> list[Any]:
    async with tools.engine.connect() as connection:
        return list(await connection.execute(sa.select(_audit).where(_audit.c.approval_id == approval_id)))


async def confirmed(tools: Tools, email: str, name: str, arguments: dict[str, Any]) -> tuple[Any, Any]:
    """The whole flow: a preview that changes nothing, then the approved write and its audit row.
    Returns (preview, result)."""
    before = await snapshot(tools)
    preview = await tools.call(email, name, arguments)
    assert preview.status == "needs_confirmation", preview.envelope
    assert await snapshot(tools) == before
    shown, envelope = await tools.write(email, name, arguments)
    assert shown.preview == preview.preview
    assert envelope["ok"], envelope
    [entry] = await audited(tools, shown.confirmation_id)
    assert (entry.tool_name, entry.outcome) == (name, "ok")
    return preview.preview, envelope["data"]


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
    calls = {
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


async def test_get_phone_numbers_lists_each_line_with_its_agents_and_analyzers(tools: Tools) -> None:
    """Acme's three lines, by label, each with its voice agent, text agent and analyzers; pages of two."""
    result = data(await tools.call(VIEWER, "get_phone_numbers", {}))
    assert result["has_more"] is False
    lines = {line["label"]: line for line in result["phone_numbers"]}
    assert list(lines) == ["After-hours line", "Main line", "Recall line"]
    main = lines["Main line"]
    assert main == {
        "id": str(tools.entity("acme:phone_number:Main line")),
        "label": "Main line",
        "number": "+12125550100",
        "voice_agent": {
            "id": str(tools.entity("acme:voice_agent:Front Desk Ava")),
            "name": "Front Desk Ava",
            "active": True,
        },
        "text_agent": {
            "id": str(tools.entity("acme:text_agent:SMS Concierge")),
            "name": "SMS Concierge",
            "active": True,
        },
        "analyzers": [
            {"id": str(tools.entity("acme:analyzer:Appointment intent")), "name": "Appointment intent"},
            {"id": str(tools.entity("acme:analyzer:Call quality")), "name": "Call quality"},
        ],
    }
    assert lines["Recall line"]["voice_agent"] is None
    assert lines["Recall line"]["analyzers"] == []
    assert lines["After-hours line"]["text_agent"] is None

    first = data(await tools.call(VIEWER, "get_phone_numbers", {"limit": 2}))
    assert [line["label"] for line in first["phone_numbers"]] == ["After-hours line", "Main line"]
    assert (first["has_more"], first["next_offset"]) == (True, 2)
    rest = data(await tools.call(VIEWER, "get_phone_numbers", {"limit": 2, "offset": 2}))
    assert [line["label"] for line in rest["phone_numbers"]] == ["Recall line"]
    assert rest["has_more"] is False
    assert error_code(await tools.call(VIEWER, "get_phone_numbers", {"limit": 51})) == "invalid_arguments"

    globex = data(await tools.call(GLOBEX, "get_phone_numbers", {}))
    assert [line["label"] for line in globex["phone_numbers"]] == ["Zentrale"]


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


async def test_assign_phone_agent_previews_from_to_and_switches_the_agent(tools: Tools) -> None:
    """The Recall line gets Front Desk Ava (from none); the preview names both ends; a Globex agent or
    number is not found, an inactive agent and the current one are refused; null unassigns."""
    recall = str(tools.entity("acme:phone_number:Recall line"))
    ava = str(tools.entity("acme:voice_agent:Front Desk Ava"))
    preview, result = await confirmed(
        tools, OWNER, "assign_phone_agent", {"phone_number_id": recall, "agent_id": ava}
    )
    line = {"id": recall, "label": "Recall line", "number": "+12125550102"}
    changes = {"voice_agent": {"from": None, "to": {"id": ava, "name": "Front Desk Ava"}}}
    assert preview == {
        "action": "Change the voice agent of a phone number",
        "phone_number": line,
        "changes": changes,
    }
    assert result == {"phone_number": line, "changes": changes}
    lines = {
        item["label"]: item
        for item in data(await tools.call(VIEWER, "get_phone_numbers", {}))["phone_numbers"]
    }
    assert lines["Recall line"]["voice_agent"]["name"] == "Front Desk Ava"

    again = await tools.call(OWNER, "assign_phone_agent", {"phone_number_id": recall, "agent_id": ava})
    assert error_code(again) == "no_change"
    foreign_agent = str(tools.entity("globex:voice_agent:Globex Reception"))
    foreign = await tools.call(
        OWNER, "assign_phone_agent", {"phone_number_id": recall, "agent_id": foreign_agent}
    )
    assert error_code(foreign) == "not_found"
    foreign_line = str(tools.entity("globex:phone_number:Zentrale"))
    elsewhere = await tools.call(
        OWNER, "assign_phone_agent", {"phone_number_id": foreign_line, "agent_id": ava}
    )
    assert error_code(elsewhere) == "not_found"
    text = str(tools.entity("acme:text_agent:SMS Concierge"))
    assert (
        error_code(
            await tools.call(OWNER, "assign_phone_agent", {"phone_number_id": recall, "agent_id": text})
        )
        == "not_found"
    )

    max_ = str(tools.entity("acme:voice_agent:After-hours Max"))
    await confirmed(tools, OWNER, "update_agent", {"agent_id": max_, "active": False})
    inactive = await tools.call(OWNER, "assign_phone_agent", {"phone_number_id": recall, "agent_id": max_})
    assert error_code(inactive) == "inactive_agent"

    preview = (
        await tools.call(OWNER, "assign_phone_agent", {"phone_number_id": recall, "agent_id": None})
    ).preview
    assert preview["changes"] == {"voice_agent": {"from": {"id": ava, "name": "Front Desk Ava"}, "to": None}}


async def test_assign_phone_analyzers_previews_the_resulting_set_and_applies_it(tools: Tools) -> None:
    """Adding Appointment intent and removing Call quality on the After-hours line shows the set before
    and after; the write leaves exactly that set; a Globex analyzer is not found, a no-op is refused."""
    line_id = str(tools.entity("acme:phone_number:After-hours line"))
    intent = {"id": str(tools.entity("acme:analyzer:Appointment intent")), "name": "Appointment intent"}
    quality = {"id": str(tools.entity("acme:analyzer:Call quality")), "name": "Call quality"}
    arguments = {"phone_number_id": line_id, "add": [intent["id"]], "remove": [quality["id"]]}
    preview, result = await confirmed(tools, ADMIN, "assign_phone_analyzers", arguments)
    line = {"id": line_id, "label": "After-hours line", "number": "+12125550101"}
    changes = {
        "analyzers": {"from": [quality], "to": [intent]},
        "added": [intent],
        "removed": [quality],
    }
    assert preview == {
        "action": "Change the analyzers of a phone number",
        "phone_number": line,
        "changes": changes,
    }
    assert result == {"phone_number": line, "changes": changes}
    lines = {
        item["label"]: item
        for item in data(await tools.call(VIEWER, "get_phone_numbers", {}))["phone_numbers"]
    }
    assert lines["After-hours line"]["analyzers"] == [intent]
    assert lines["Main line"]["analyzers"] == [intent, quality]

    same = await tools.call(
        ADMIN, "assign_phone_analyzers", {"phone_number_id": line_id, "add": [intent["id"]]}
    )
    assert error_code(same) == "no_change"
    foreign = str(tools.entity("globex:analyzer:Lead qualification"))
    refused = await tools.call(
        ADMIN, "assign_phone_analyzers", {"phone_number_id": line_id, "add": [foreign]}
    )
    assert error_code(refused) == "not_found"
    assert foreign in refused.envelope["error"]["message"]
    both = await tools.call(
        ADMIN,
        "assign_phone_analyzers",
        {"phone_number_id": line_id, "add": [intent["id"]], "remove": [intent["id"]]},
    )
    assert error_code(both) == "invalid_arguments"
    assert error_code(await tools.call(ADMIN, "assign_phone_analyzers", {"phone_number_id": line_id})) == (
        "invalid_arguments"
    )


async def test_assign_phone_text_agent_previews_from_to_and_switches_it(tools: Tools) -> None:
    """The After-hours line gets the SMS Concierge (from none); then the Main line's is taken away;
    a Globex text agent is not found."""
    line_id = str(tools.entity("acme:phone_number:After-hours line"))
    concierge = {"id": str(tools.entity("acme:text_agent:SMS Concierge")), "name": "SMS Concierge"}
    arguments = {"phone_number_id": line_id, "text_agent_id": concierge["id"]}
    preview, result = await confirmed(tools, OWNER, "assign_phone_text_agent", arguments)
    changes = {"text_agent": {"from": None, "to": concierge}}
    assert preview["action"] == "Change the text agent of a phone number"
    assert preview["changes"] == changes
    assert result["changes"] == changes

    main = str(tools.entity("acme:phone_number:Main line"))
    preview = (
        await tools.call(OWNER, "assign_phone_text_agent", {"phone_number_id": main, "text_agent_id": None})
    ).preview
    assert preview["changes"] == {"text_agent": {"from": concierge, "to": None}}
    lines = {
        item["label"]: item
        for item in data(await tools.call(VIEWER, "get_phone_numbers", {}))["phone_numbers"]
    }
    assert lines["After-hours line"]["text_agent"]["name"] == "SMS Concierge"
    assert lines["Main line"]["text_agent"]["name"] == "SMS Concierge"  # only previewed

    foreign = str(tools.entity("globex:text_agent:Globex Orders"))
    refused = await tools.call(
        OWNER, "assign_phone_text_agent", {"phone_number_id": main, "text_agent_id": foreign}
    )
    assert error_code(refused) == "not_found"
