"""The tenant matrix (SPEC §3, §5, §6, §8): every command, route and tool argument that takes an id,
given the id of a record of another organization or of another member of the same organization,
answers exactly as it answers a missing id (`not_found`, no oracle), returns and changes no row, and
puts nothing of that record in front of the model.

Three parties: the actor `owner@acme.test` (holds every permission), another member of the same
organization (`member@acme.test`), and another organization's member (`owner@globex.test`).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy.engine import make_url

from tests.data import add_notification, is_read
from tests.e2e.test_approvals import mark_read, sql
from tests.fixtures.server import Vernis, VernisFactory
from tests.proofs.conftest import Figures
from tests.proofs.test_wire_fuzz import UNLIMITED
from vernis.identity import COOKIE_NAME
from vernis.model.scripted import SCRIPTED_TITLE_MODEL, Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import context_text
from vernis_crm import toolkit as crm_toolkit

ACTOR = "owner@acme.test"
SAME_ORG = "member@acme.test"
OTHER_ORG = "owner@globex.test"
# Words that name globex records and nothing of acme's: none may reach acme's model requests.
GLOBEX_ONLY = [
    "Jonas Becker",
    "Globex",
    "Zentrale",
    "Quote follow-up",
    "Globex Reception",
    "Globex Orders",
    "Lead qualification",
    "renewal quote",
    "Katrin Vogel",
]
# The kind of globex record each id argument names, and a record of that kind.
FOREIGN_KIND = {
    "contact_id": "contact:Jonas Becker",
    "call_id": "call:Jane Cooper",
    "template_id": "plan_template:Quote follow-up",
    "agent_id": "voice_agent:Globex Reception",
    "phone_number_id": "phone_number:Zentrale",
    "text_agent_id": "text_agent:Globex Orders",
    "task_id": "task:Send Jane Cooper the renewal quote",
    "add": "analyzer:Lead qualification",
    "remove": "analyzer:Lead qualification",
}
# Every CRM tool argument naming a record, with the other arguments a valid call needs.
TOOL_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("get_contact_details", "contact_id", {}),
    ("update_contact", "contact_id", {"company": "Pwned Inc"}),
    ("add_contact_note", "contact_id", {"body": "pwned"}),
    ("manage_contact_tags", "contact_id", {"add": ["pwned"]}),
    ("manage_contact_emails", "contact_id", {"remove": ["jonas@example.com"]}),
    ("manage_contact_phones", "contact_id", {"remove": ["+4930123456"]}),
    ("get_recent_calls", "contact_id", {}),
    ("get_call_details", "call_id", {}),
    ("get_contact_messages", "contact_id", {}),
    ("send_sms", "contact_id", {"body": "pwned"}),
    ("create_plan", "template_id", {"contact_id": "acme:contact:Jane Cooper"}),
    ("create_plan", "contact_id", {"template_id": "acme:plan_template:Recall reminder"}),
    (
        "create_plan",
        "assignee_id",
        {"template_id": "acme:plan_template:Recall reminder", "contact_id": "acme:contact:Jane Cooper"},
    ),
    ("update_plan_template", "template_id", {"active": False}),
    ("get_agents", "agent_id", {}),
    ("update_agent", "agent_id", {"active": False}),
    ("assign_phone_agent", "phone_number_id", {"agent_id": None}),
    ("assign_phone_agent", "agent_id", {"phone_number_id": "acme:phone_number:Main line"}),
    ("assign_phone_analyzers", "phone_number_id", {"add": ["acme:analyzer:Call quality"]}),
    ("assign_phone_analyzers", "add", {"phone_number_id": "acme:phone_number:Main line"}),
    ("assign_phone_analyzers", "remove", {"phone_number_id": "acme:phone_number:Main line"}),
    ("assign_phone_text_agent", "phone_number_id", {"text_agent_id": None}),
    ("assign_phone_text_agent", "text_agent_id", {"phone_number_id": "acme:phone_number:Main line"}),
    ("get_tasks", "contact_id", {}),
    ("create_task", "contact_id", {"title": "pwned"}),
    ("create_task", "assignee", {"title": "pwned"}),
    ("get_tasks", "assignee", {}),
    ("update_task", "task_id", {"title": "pwned"}),
    ("update_task", "contact_id", {"task_id": "acme:task:Call Jane Cooper about her crown fitting"}),
    ("update_task", "assignee", {"task_id": "acme:task:Call Jane Cooper about her crown fitting"}),
    ("complete_task", "task_id", {}),
    ("dismiss_task", "task_id", {}),
    ("reopen_task", "task_id", {}),
    ("mark_notification_read", "notification_id", {}),
]
CORE_TABLES = ("assistant_", "audit_log", "token_usage", "member", "organization", "alembic_version")


def crm_fingerprint(vernis: Vernis) -> str:
    """A digest of every row of the CRM's tables (everything but the assistant's own records)."""
    path = make_url(vernis.settings.database_url).database
    assert path is not None
    assert Path(path).exists()
    digest = hashlib.sha256()
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in sorted(t for t in tables if not t.startswith(CORE_TABLES)):
            digest.update(table.encode())
            for row in connection.execute(f'SELECT * FROM "{table}" ORDER BY 1'):
                digest.update(repr(row).encode())
    return digest.hexdigest()


def normal(value: Any, *ids: str) -> str:
    """The value as JSON with the given ids (and `seq`) blanked out, to compare two answers."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in ("seq", "created_at", "updated_at")}
    text = orjson.dumps(value).decode()
    for id_ in ids:
        text = text.replace(id_, "<id>")
    return text


def call(tool: str, base: dict[str, Any], argument: str, value: str) -> ScriptedToolCall:
    """The tool called with `argument` naming `value` (in a list for the list arguments)."""
    named: Any = [value] if argument in ("add", "remove") else value
    return ScriptedToolCall(tool, {**base, argument: named})


async def conversation_of(vernis: Vernis, email: str) -> dict[str, str]:
    """A stored exchange of `email`, with a pending preview: its conversation, answer and approval ids."""
    notification_id = await add_notification(vernis, email=email)
    vernis.scripted.add(mark_read(notification_id), match=f"mark {notification_id}")
    async with vernis.opened(email) as client:
        events = await client.answer(f"mark {notification_id} read")
        await client.until("title_updated")
    (required,) = [e for e in events if e["type"] == "confirmation_required"]
    end = events[-1]
    return {
        "conversation": end["conversation_id"],
        "message": end["message_id"],
        "approval": required["confirmation_id"],
        "notification": notification_id,
    }


async def test_every_command_taking_an_id_answers_a_foreign_id_as_a_missing_one(
    vernis_factory: VernisFactory, figures: Figures
) -> None:
    """load, rename, delete, feedback, confirm_tool and the socket's conversation_id, given another organization's or another member's id: the same not_found as a missing id, and nothing changes."""
    async with vernis_factory(**UNLIMITED) as vernis:
        targets = {"other_org": await conversation_of(vernis, OTHER_ORG)}
        targets["same_org"] = await conversation_of(vernis, SAME_ORG)
        missing = {key: str(uuid.uuid4()) for key in ("conversation", "message", "approval")}
        targets["missing"] = missing
        before = await sql(vernis, "SELECT id, title, updated_at FROM assistant_conversation ORDER BY id")
        commands: list[tuple[str, str, dict[str, Any]]] = [
            ("load_conversation", "conversation", {}),
            ("rename_conversation", "conversation", {"title": "pwned"}),
            ("delete_conversation", "conversation", {}),
            ("feedback", "message", {"rating": "down"}),
            ("confirm_tool", "approval", {"approved": True}),
        ]
        fields = {"conversation": "conversation_id", "message": "message_id", "approval": "confirmation_id"}
        answers: dict[tuple[str, str], str] = {}
        async with vernis.opened(ACTOR) as client:
            for command, kind, extra in commands:
                for who, ids in targets.items():
                    await client.send(command, **{fields[kind]: ids[kind]}, **extra)
                    (error,) = await client.expect("error")
                    assert error["code"] == "not_found", (command, who, error)
                    answers[command, who] = normal(error, ids[kind])
        for who, ids in targets.items():
            async with vernis.connect(ACTOR, query=f"?conversation_id={ids['conversation']}") as client:
                opening = await client.until("history_end")
            answers["connect", who] = normal(
                [e for e in opening if e["type"] != "history_message"], ids["conversation"]
            )
        for command in [c for c, _, _ in commands] + ["connect"]:
            assert answers[command, "other_org"] == answers[command, "missing"], command
            assert answers[command, "same_org"] == answers[command, "missing"], command
        assert (
            await sql(vernis, "SELECT id, title, updated_at FROM assistant_conversation ORDER BY id")
            == before
        )
        feedback = await sql(vernis, "SELECT id FROM assistant_message WHERE feedback_rating IS NOT NULL")
        assert feedback == []
        statuses = await sql(vernis, "SELECT status FROM assistant_approval")
        assert sorted(row.status for row in statuses) == ["pending", "pending"]
        for who in ("other_org", "same_org"):
            assert not await is_read(vernis, targets[who]["notification"])
    figures(cases=len(answers))


async def test_every_tool_argument_naming_a_record_answers_a_foreign_id_as_a_missing_one(
    vernis_factory: VernisFactory, figures: Figures
) -> None:
    """Each CRM tool argument that names a record, given another organization's record (or another member's notification): the same result as a missing id, no row changed, no preview stored, and nothing of the record in any model request."""
    async with vernis_factory(**UNLIMITED) as vernis:
        entities = vernis.seed.entities

        def resolve(value: Any) -> Any:
            if isinstance(value, list):
                return [resolve(item) for item in value]
            return str(entities[value]) if isinstance(value, str) and value.startswith("acme:") else value

        foreign_notification = await add_notification(vernis, email=SAME_ORG, title="Private to the member")
        crm_before = crm_fingerprint(vernis)
        declared = {
            (t.name, n)
            for t in crm_toolkit.tools
            for n, f in t.args.model_fields.items()
            if "UUID" in str(f.annotation)
        }
        covered = set()
        compared = 0
        async with vernis.opened(ACTOR) as client:
            for number, (tool, argument, extra) in enumerate(TOOL_CASES):
                covered.add((tool, argument))
                if argument == "notification_id":
                    foreign = foreign_notification
                elif argument in ("assignee", "assignee_id"):
                    foreign = str(vernis.seed.members[OTHER_ORG]) if argument == "assignee_id" else OTHER_ORG
                else:
                    foreign = str(entities[f"globex:{FOREIGN_KIND[argument]}"])
                absent = str(uuid.uuid4()) if argument != "assignee" else "nobody@globex.test"
                base = {key: resolve(value) for key, value in extra.items()}

                prompt = f"case {number} {tool} {argument}"
                vernis.scripted.add(
                    Reply(
                        tool_calls=[call(tool, base, argument, foreign), call(tool, base, argument, absent)]
                    ),
                    match=prompt,
                )
                events = await client.answer(prompt, timeout=20)
                results = {e["call_id"]: e for e in events if e["type"] == "tool_call_completed"}
                started = [e["call_id"] for e in events if e["type"] == "tool_call_started"]
                assert len(started) == 2, (tool, argument, events)
                first, second = (results[c] for c in started)
                assert first["status"] == "error", (tool, argument, first)
                assert first["result"]["error"]["code"] == "not_found", (tool, argument, first)
                assert normal(first["result"], foreign) == normal(second["result"], absent), (tool, argument)
                compared += 1
        assert declared <= covered, declared - covered
        assert crm_fingerprint(vernis) == crm_before
        assert await sql(vernis, "SELECT id FROM assistant_approval") == []
        assert not await is_read(vernis, foreign_notification)
        leaked = [
            word
            for body in vernis.scripted.requests
            for word in GLOBEX_ONLY
            if word in orjson.dumps(body).decode()
        ]
        assert leaked == []
    figures(tool_arguments=compared)


async def test_a_page_showing_a_foreign_entity_is_left_out_of_the_prompt_like_a_missing_one(
    vernis_factory: VernisFactory,
) -> None:
    """page_context naming another organization's contact gives the same prompt (system message and turn context) as a missing contact (no "Current page"); the member's own contact does appear."""
    async with vernis_factory(**UNLIMITED) as vernis:
        foreign = str(vernis.seed.entities["globex:contact:Jonas Becker"])
        own = str(vernis.seed.entities["acme:contact:Jane Cooper"])
        absent = str(uuid.uuid4())
        prompts: dict[str, str] = {}
        async with vernis.opened(ACTOR) as client:
            for name, contact_id in (("foreign", foreign), ("own", own), ("missing", absent)):
                await client.send("new_conversation")
                await client.until("history_end")
                page = {"route": f"/contacts/{contact_id}", "entity_type": "contact", "entity_id": contact_id}
                await client.answer(f"who is this {name}", page_context=page)
                # The answer's request: the title's, made after the first exchange, may come after it.
                asked = [r for r in vernis.scripted.requests if r.get("model") != SCRIPTED_TITLE_MODEL][-1]
                (system,) = [m for m in asked["messages"] if m["role"] == "system"]
                # The turn's context (SPEC §19), its clock left out: a minute may turn between two.
                context = re.sub(r"local time \d\d:\d\d", "local time <now>", context_text(asked))
                prompts[name] = normal(system["content"] + context, contact_id).replace(name, "<name>")
        assert "Jane Cooper" in prompts["own"]
        assert prompts["foreign"] == prompts["missing"]
        assert not [word for word in GLOBEX_ONLY if word in prompts["foreign"]]


async def test_the_contact_page_answers_a_foreign_id_as_a_missing_one(vernis: Vernis) -> None:
    """GET /contacts/{id} of another organization's contact: the same 404 page as a missing id; the member's own contact is shown."""
    foreign = str(vernis.seed.entities["globex:contact:Jonas Becker"])
    own = str(vernis.seed.entities["acme:contact:Jane Cooper"])
    absent = str(uuid.uuid4())
    cookies = {COOKIE_NAME: vernis.token(SAME_ORG)}
    async with httpx.AsyncClient(base_url=vernis.http_url, cookies=cookies) as http:
        pages = {
            name: await http.get(f"/contacts/{id_}")
            for name, id_ in (("foreign", foreign), ("own", own), ("missing", absent))
        }
    assert pages["own"].status_code == 200
    assert "Jane Cooper" in pages["own"].text
    assert pages["foreign"].status_code == pages["missing"].status_code == 404
    assert pages["foreign"].text.replace(foreign, "<id>") == pages["missing"].text.replace(absent, "<id>")
    assert "Jonas Becker" not in pages["foreign"].text
