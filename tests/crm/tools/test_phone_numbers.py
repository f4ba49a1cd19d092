"""Phone number tools against the seeded demo: listing the lines, and assigning their voice agent,
text agent and analyzers."""

from __future__ import annotations

from tests.crm.tools._infrastructure import ADMIN, GLOBEX, OWNER, VIEWER, confirmed
from tests.crm.tools.conftest import Tools, data, error_code


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
