"""AG-UI (SPEC §20) through the running server: `POST /api/agui/run` as SSE, its bad inputs,
approvals as interrupts resumed, `stop` and `info`; every event checked against `ag-ui-protocol`."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import orjson
from ag_ui.core import Event
from pydantic import TypeAdapter

from tests.data import add_notification, is_read
from tests.fixtures.server import Vernis, VernisFactory
from vernis.model.scripted import Reply, ScriptedToolCall

EVENT = TypeAdapter(Event)
ADMIN_TOKEN = "an-admin-token-for-the-agui-tests"


def run_input(thread_id: str, *messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A run's input as a 1.x client sends it (with its protocol version)."""
    return {
        "threadId": thread_id,
        "runId": uuid.uuid4().hex,
        "protocolVersion": "1.0",
        "messages": list(messages),
        **fields,
    }


def user(content: str, message_id: str | None = None) -> dict[str, Any]:
    return {"id": message_id or uuid.uuid4().hex, "role": "user", "content": content}


def parse_sse(body: str) -> list[tuple[int, dict[str, Any]]]:
    """Each SSE event's id and JSON, checked: `\\n\\n` between events, an id on each, no null anywhere
    in an optional field, and a valid `ag-ui-protocol` event."""
    assert "\r" not in body
    assert body.endswith("\n\n")
    parsed = []
    for block in body.removesuffix("\n\n").split("\n\n"):
        id_line, data_line = block.split("\n")
        assert id_line.startswith("id: "), block
        assert data_line.startswith("data: "), block
        data = orjson.loads(data_line.removeprefix("data: "))
        assert "null" not in data_line, data_line
        EVENT.validate_python(data)
        parsed.append((int(id_line.removeprefix("id: ")), data))
    return parsed


async def post_run(vernis: Vernis, body: dict[str, Any], email: str = "member@acme.test") -> httpx.Response:
    async with httpx.AsyncClient(base_url=vernis.http_url, timeout=10) as client:
        return await client.post(
            "/api/agui/run", json=body, headers={"Authorization": f"Bearer {vernis.token(email)}"}
        )


async def run(vernis: Vernis, body: dict[str, Any], email: str = "member@acme.test") -> list[dict[str, Any]]:
    """A run that must be streamed: its events, in order, with ids that never go down."""
    response = await post_run(vernis, body, email)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    parsed = parse_sse(response.text)
    ids = [seq for seq, _ in parsed]
    assert ids == sorted(ids)
    return [data for _, data in parsed]


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def test_run_streams_the_answer_as_agui_events_and_stores_it_under_the_thread(vernis: Vernis) -> None:
    """A new thread id starts a conversation with that id; the answer streams as RUN_STARTED, TEXT_MESSAGE_*, RUN_FINISHED, each a valid AG-UI event with its seq as SSE id."""
    thread = str(uuid.uuid4())
    events = await run(vernis, run_input(thread, user("hello over AG-UI")))
    kinds = types(events)
    assert kinds[0] == "RUN_STARTED"
    assert kinds[-1] == "RUN_FINISHED"
    assert kinds[1] == "TEXT_MESSAGE_START"
    assert kinds[-2] == "TEXT_MESSAGE_END"
    assert set(kinds[2:-2]) == {"TEXT_MESSAGE_CONTENT"}
    assert events[0]["threadId"] == events[-1]["threadId"] == thread
    assert "hello over AG-UI" in text(events)
    async with vernis.connect(query=f"?conversation_id={thread}") as client:
        (loaded, *history) = await client.until("history_end")
    assert loaded["conversation_id"] == thread
    assert [m["role"] for m in history if m["type"] == "history_message"] == ["user", "assistant"]


async def test_server_tool_calls_stream_as_tool_call_events_with_their_result(vernis: Vernis) -> None:
    """A server tool the model calls shows as TOOL_CALL_START/ARGS/END under the answer's message, then TOOL_CALL_RESULT with its result."""
    vernis.scripted.add(Reply(tool_calls=[ScriptedToolCall("get_unread_count", {})]), match="how many unread")
    events = await run(vernis, run_input(str(uuid.uuid4()), user("how many unread?")))
    kinds = types(events)
    start = kinds.index("TOOL_CALL_START")
    assert kinds[start : start + 4] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
    ]
    call = events[start]
    assert call["toolCallName"] == "get_unread_count"
    assert orjson.loads(events[start + 1]["delta"]) == {}
    result = events[start + 3]
    assert result["toolCallId"] == call["toolCallId"]
    assert orjson.loads(result["content"])["ok"] is True
    assert kinds[-1] == "RUN_FINISHED"


async def test_the_message_id_makes_a_run_idempotent(vernis: Vernis) -> None:
    """Posting the same user message id again starts no second answer: the run just finishes, and the message is stored once."""
    thread = str(uuid.uuid4())
    message = user("only once", "msg-once-1")
    first = await run(vernis, run_input(thread, message))
    assert "TEXT_MESSAGE_START" in types(first)
    again = await run(vernis, run_input(thread, message))
    assert types(again) == ["RUN_STARTED", "RUN_FINISHED"]
    async with vernis.connect(query=f"?conversation_id={thread}") as client:
        history = await client.until("history_end")
    assert [m["role"] for m in history if m["type"] == "history_message"] == ["user", "assistant"]


async def test_bad_requests_are_refused_before_any_stream(vernis: Vernis) -> None:
    """No token is 401, a body that is not RunAgentInput 422 naming the field, a non-UUID threadId 400, no user message 400, and another member's thread 404 that says nothing of it."""
    thread = str(uuid.uuid4())
    await run(vernis, run_input(thread, user("mine")), email="member@acme.test")
    async with httpx.AsyncClient(base_url=vernis.http_url, timeout=10) as client:
        anonymous = await client.post("/api/agui/run", json=run_input(thread, user("hi")))
        assert anonymous.status_code == 401
        expired = await client.post(
            "/api/agui/run",
            json=run_input(thread, user("hi")),
            headers={"Authorization": f"Bearer {vernis.token(ttl=-120)}"},
        )
        assert expired.status_code == 401
    malformed = await post_run(vernis, {"threadId": thread, "messages": []})
    assert malformed.status_code == 422
    assert "runId" in malformed.json()["error"]["message"]
    not_uuid = await post_run(vernis, run_input("thread-1", user("hi")))
    assert not_uuid.status_code == 400
    nothing = await post_run(vernis, run_input(thread, {"id": "a1", "role": "assistant", "content": "x"}))
    assert nothing.status_code == 400
    foreign = await post_run(vernis, run_input(thread, user("let me in")), email="owner@acme.test")
    assert foreign.status_code == 404
    assert foreign.json()["error"]["code"] == "not_found"
    other_org = await post_run(vernis, run_input(thread, user("let me in")), email="owner@globex.test")
    assert other_org.status_code == 404


async def test_a_run_while_an_answer_is_running_is_409(vernis: Vernis) -> None:
    """A second run on a thread whose answer still streams is refused with 409 response_in_progress, and the first run still finishes."""
    thread = str(uuid.uuid4())
    vernis.scripted.add(Reply("slow " * 40, chunk_delay=0.02), match="take your time")
    headers = {"Authorization": f"Bearer {vernis.token()}"}
    body = ""
    async with (
        httpx.AsyncClient(base_url=vernis.http_url, timeout=10) as client,
        client.stream(
            "POST", "/api/agui/run", json=run_input(thread, user("take your time")), headers=headers
        ) as response,
    ):
        async for chunk in response.aiter_text():
            if "TEXT_MESSAGE_CONTENT" in chunk and "TEXT_MESSAGE_CONTENT" not in body:
                second = await post_run(vernis, run_input(thread, user("me too")))
            body += chunk
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "response_in_progress"
    assert [data for _, data in parse_sse(body)][-1]["type"] == "RUN_FINISHED"


async def test_a_write_ends_the_run_with_an_approval_interrupt_and_resume_runs_it(vernis: Vernis) -> None:
    """A write awaiting approval ends the run with an interrupt (tool_approval, the preview in metadata); a run resuming it as resolved runs the write once and streams its result, then the answer that reads it; resuming it again is 404."""
    notification_id = await add_notification(vernis)
    vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("mark_notification_read", {"notification_id": notification_id})]),
        match="mark it read",
    )
    thread = str(uuid.uuid4())
    message = user("mark it read please")
    events = await run(vernis, run_input(thread, message))
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED"
    (interrupt,) = finished["outcome"]["interrupts"]
    assert finished["outcome"]["type"] == "interrupt"
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["metadata"]["preview"]["changes"] == {"read": {"from": False, "to": True}}
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert interrupt["toolCallId"] == start["toolCallId"]
    assert "TOOL_CALL_RESULT" not in types(events)
    assert not await is_read(vernis, notification_id)

    resume = [{"interruptId": interrupt["id"], "status": "resolved"}]
    vernis.scripted.add(
        "It is marked read.", match=lambda body: "The user approved" in str(body["messages"][0]["content"])
    )
    resumed = await run(vernis, run_input(thread, message, resume=resume))
    kinds = types(resumed)
    assert kinds[:3] == ["RUN_STARTED", "TOOL_CALL_RESULT", "TEXT_MESSAGE_START"]
    assert kinds[-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert text(resumed) == "It is marked read."
    result = resumed[1]
    assert result["toolCallId"] == interrupt["toolCallId"]
    assert orjson.loads(result["content"])["data"]["read"] is True
    assert "outcome" not in resumed[-1]
    assert await is_read(vernis, notification_id)
    twice = await post_run(vernis, run_input(thread, message, resume=resume))
    assert twice.status_code == 404


async def test_stop_ends_the_run_as_cancelled(vernis: Vernis) -> None:
    """`POST /api/agui/stop` stops the thread's answer: the run ends with RUN_FINISHED outcome cancelled; another member's thread is 404."""
    thread = str(uuid.uuid4())
    vernis.scripted.add(Reply("word " * 400, chunk_delay=0.02), match="talk a lot")
    headers = {"Authorization": f"Bearer {vernis.token()}"}
    body = ""
    async with httpx.AsyncClient(base_url=vernis.http_url, timeout=10) as client:
        async with client.stream(
            "POST", "/api/agui/run", json=run_input(thread, user("talk a lot")), headers=headers
        ) as response:
            async for chunk in response.aiter_text():
                if "TEXT_MESSAGE_CONTENT" in chunk and "TEXT_MESSAGE_CONTENT" not in body:
                    stopped = await client.post("/api/agui/stop", json={"threadId": thread}, headers=headers)
                    assert stopped.status_code == 204
                body += chunk
        foreign = await client.post(
            "/api/agui/stop",
            json={"threadId": thread},
            headers={"Authorization": f"Bearer {vernis.token('owner@acme.test')}"},
        )
        assert foreign.status_code == 404
    events = [data for _, data in parse_sse(body)]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "cancelled"}
    assert len(text(events)) < len("word " * 400)


async def test_info_describes_the_agent_and_cors_allows_configured_origins(vernis: Vernis) -> None:
    """`GET /api/agui/info` names the agent and its capabilities for a member; the run's preflight from an allowed origin is answered, another origin gets no CORS header."""
    async with httpx.AsyncClient(base_url=vernis.http_url, timeout=10) as client:
        info = await client.get("/api/agui/info", headers={"Authorization": f"Bearer {vernis.token()}"})
        assert info.status_code == 200
        assert info.json()["capabilities"]["resumable"] is True
        assert (await client.get("/api/agui/info")).status_code == 401
        own = vernis.http_url
        preflight = await client.options(
            "/api/agui/run",
            headers={"Origin": own, "Access-Control-Request-Method": "POST"},
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == own
        assert "Content-Type" in preflight.headers["access-control-allow-headers"]
        evil = await client.options(
            "/api/agui/run",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in evil.headers


SELECTION = {
    "name": "selected_rows",
    "description": "The rows the user selected in the page's table.",
    "parameters": {
        "type": "object",
        "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 50}},
        "required": ["limit"],
    },
}


async def test_a_page_tool_call_ends_the_run_and_its_tool_message_continues_the_answer(
    vernis: Vernis,
) -> None:
    """A call of one of the run's `tools` ends the run after its TOOL_CALL_END (a plain RUN_FINISHED); the next run's `tool` message is its result, the model reads it, and the answer streams on; the same result again is 404."""
    vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("selected_rows", {"limit": 2})]), match="which rows"
    )
    thread = str(uuid.uuid4())
    message = user("which rows did I select?")
    events = await run(vernis, run_input(thread, message, tools=[SELECTION]))
    assert types(events)[-4:] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED"]
    call = events[-4]
    assert call["toolCallName"] == "selected_rows"
    assert orjson.loads(events[-3]["delta"]) == {"limit": 2}
    assert "outcome" not in events[-1]
    assert "selected_rows" in {t["function"]["name"] for t in vernis.scripted.requests[-1]["tools"]}

    assistant = {
        "id": uuid.uuid4().hex,
        "role": "assistant",
        "toolCalls": [
            {
                "id": call["toolCallId"],
                "type": "function",
                "function": {"name": "selected_rows", "arguments": "{}"},
            }
        ],
    }
    result = {
        "id": uuid.uuid4().hex,
        "role": "tool",
        "toolCallId": call["toolCallId"],
        "content": '{"rows": ["Grace"]}',
    }
    after = await run(vernis, run_input(thread, message, assistant, result, tools=[SELECTION]))
    assert "TOOL_CALL_RESULT" not in types(after)
    assert "TEXT_MESSAGE_CONTENT" in types(after)
    assert after[-1]["type"] == "RUN_FINISHED"
    chat = [body for body in vernis.scripted.requests if body.get("tools")]
    tool_messages = [m for m in chat[-1]["messages"] if m["role"] == "tool"]
    assert '"Grace"' in tool_messages[-1]["content"]
    again = await post_run(vernis, run_input(thread, message, assistant, result, tools=[SELECTION]))
    assert again.status_code == 404


async def test_a_page_tool_named_like_a_server_tool_is_refused(vernis: Vernis) -> None:
    """A run whose `tools` reuse a server tool's name is refused with 400 naming it, before any stream."""
    tools = [{**SELECTION, "name": "search_contacts"}]
    refused = await post_run(vernis, run_input(str(uuid.uuid4()), user("hi"), tools=tools))
    assert refused.status_code == 400
    assert "search_contacts" in refused.json()["error"]["message"]


async def test_an_ask_user_question_is_an_input_required_interrupt_resumed_with_answers(
    vernis: Vernis,
) -> None:
    """ask_user ends the run with an input_required interrupt and a responseSchema; resuming it with answers continues the answer, which reads them."""
    questions = [
        {"id": "topic", "label": "What is it about?", "type": "text", "required": True},
        {"id": "channel", "label": "How?", "type": "choice", "options": ["Call", "SMS"], "required": True},
    ]
    vernis.scripted.add(
        Reply(
            "A few questions first.",
            tool_calls=[ScriptedToolCall("ask_user", {"title": "Follow-up", "questions": questions})],
        ),
        match="plan the call",
    )
    thread = str(uuid.uuid4())
    message = user("plan the call")
    events = await run(vernis, run_input(thread, message))
    outcome = events[-1]["outcome"]
    (interrupt,) = outcome["interrupts"]
    assert interrupt["reason"] == "input_required"
    answers = interrupt["responseSchema"]["properties"]["answers"]
    assert answers["properties"]["channel"]["enum"] == ["Call", "SMS"]
    assert answers["required"] == ["topic", "channel"]
    resume = [
        {
            "interruptId": interrupt["id"],
            "status": "resolved",
            "payload": {"answers": {"topic": "Renewal", "channel": "SMS"}},
        }
    ]
    resumed = await run(vernis, run_input(thread, message, resume=resume))
    assert resumed[-1]["type"] == "RUN_FINISHED"
    assert "outcome" not in resumed[-1]
    assert "Renewal" in text(resumed)


async def test_context_is_bounded_guarded_page_context_and_the_rest_is_dropped_with_a_note(
    vernis: Vernis,
) -> None:
    """100 context entries, one of them 1 MB, are run: the model reads the first entries (the long one cut) in the turn's context with a note that the rest was left out; a secret in one is redacted."""
    context = [{"description": f"fact {i}", "value": f"value number {i}"} for i in range(100)]
    context[1] = {"description": "big", "value": "x" * 1_000_000}
    context[2] = {"description": "card", "value": "card 4111 1111 1111 1111"}
    await run(vernis, run_input(str(uuid.uuid4()), user("what do you see?"), context=context))
    request = next(body for body in reversed(vernis.scripted.requests) if body.get("tools"))
    prompt = orjson.dumps(request["messages"]).decode()
    assert "value number 0" in prompt
    assert "value number 19" in prompt
    assert "value number 20" not in prompt
    assert "were left out" in prompt
    assert "x" * 2_000 in prompt
    assert "x" * 2_001 not in prompt
    assert "4111 1111 1111 1111" not in prompt
    assert len(prompt) < 100_000


async def test_a_route_in_context_is_the_page_the_user_is_on(vernis: Vernis) -> None:
    """A context entry `route` with a path becomes the answer's page context, resolved like the panel's (the model reads the current page)."""
    page = {"description": "route", "value": "/contacts"}
    await run(vernis, run_input(str(uuid.uuid4()), user("where am I?"), context=[page]))
    request = next(body for body in reversed(vernis.scripted.requests) if body.get("tools"))
    assert "/contacts" in orjson.dumps(request["messages"][-1]).decode()


async def test_a_resume_of_an_unknown_interrupt_is_404(vernis: Vernis) -> None:
    """Resuming an interrupt nobody raised (or one that is not a UUID) is 404 before any stream."""
    thread = str(uuid.uuid4())
    await run(vernis, run_input(thread, user("hi")))
    for interrupt_id in (str(uuid.uuid4()), "nope"):
        resume = [{"interruptId": interrupt_id, "status": "resolved", "payload": {"answers": {}}}]
        response = await post_run(vernis, run_input(thread, resume=resume))
        assert response.status_code == 404, response.text


async def test_a_socket_tab_sees_an_agui_run_in_step(vernis: Vernis) -> None:
    """A socket tab showing the thread receives the AG-UI run's answer as it streams: the same text and seqs as the run's SSE ids."""
    thread = str(uuid.uuid4())
    await run(vernis, run_input(thread, user("first")))
    async with vernis.connect(query=f"?conversation_id={thread}") as tab:
        await tab.until("history_end")
        response = await post_run(vernis, run_input(thread, user("second, seen by both")))
        seen = await tab.until("assistant_end")
    parsed = parse_sse(response.text)
    agui_text = text([data for _, data in parsed])
    assert "".join(e["content"] for e in seen if e["type"] == "text_delta") == agui_text
    deltas = {e["seq"] for e in seen if e["type"] == "text_delta"}
    assert deltas == {seq for seq, data in parsed if data["type"] == "TEXT_MESSAGE_CONTENT"}


async def test_a_revoked_token_is_401(vernis_factory: VernisFactory) -> None:
    """After the admin API revokes a member's tokens, a run with their old token is refused with 401, though that token's identity was just used for a run (HTTP requests reuse it for a while, a revocation drops it at once)."""
    async with vernis_factory(admin_token=ADMIN_TOKEN) as vernis:
        old = vernis.token()
        async with httpx.AsyncClient(base_url=vernis.http_url, timeout=10) as client:
            before = await client.post(
                "/api/agui/run",
                json=run_input(str(uuid.uuid4()), user("hi")),
                headers={"Authorization": f"Bearer {old}"},
            )
            assert before.status_code == 200
            assert "RUN_FINISHED" in before.text
            revoked = await client.post(
                "/api/admin/members/revoke",
                json={"org": "acme", "sub": "member@acme.test"},
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            )
            assert revoked.status_code == 200
            response = await client.post(
                "/api/agui/run",
                json=run_input(str(uuid.uuid4()), user("hi")),
                headers={"Authorization": f"Bearer {old}"},
            )
        assert response.status_code == 401


async def test_a_thread_that_rolled_over_goes_on_in_its_new_conversation(
    vernis_factory: VernisFactory,
) -> None:
    """Once a thread's conversation is full it rolls over once; the thread's later runs, its connect and its stop go to the new conversation, which keeps them (no new conversation per message)."""
    async with vernis_factory(rollover_messages=4) as vernis:
        thread = str(uuid.uuid4())
        for number in range(4):
            events = await run(vernis, run_input(thread, user(f"message {number}")))
            assert events[-1]["type"] == "RUN_FINISHED"
            assert f"message {number}" in text(events)
        conversations = await list_conversations(vernis)
        assert len(conversations) == 2
        latest = next(c for c in conversations if c["conversation_id"] != thread)
        assert latest["message_count"] == 4
        headers = {"Authorization": f"Bearer {vernis.token()}"}
        async with httpx.AsyncClient(base_url=vernis.http_url, timeout=10) as client:
            joined = await client.post("/api/agui/connect", json={"threadId": thread}, headers=headers)
        snapshot = [data for _, data in parse_sse(joined.text)][1]
        assert [m["content"] for m in snapshot["messages"] if m["role"] == "user"] == [
            "message 2",
            "message 3",
        ]


async def list_conversations(vernis: Vernis) -> list[dict[str, Any]]:
    async with vernis.opened() as client:
        await client.send("list_conversations")
        # A title may still arrive first (the rolled-over conversation's first exchange).
        listed = (await client.until("conversation_list"))[-1]
    conversations: list[dict[str, Any]] = listed["conversations"]
    return conversations
