// The official AG-UI client (`@ag-ui/client`'s HttpAgent, from package-lock.json) against a running
// Vernis (SPEC §20), driven by tests/e2e/test_agui_client.py, which starts the server and scripts
// the model. Each step asserts what the client saw; any failure exits non-zero with the reason.
// VERNIS_URL, VERNIS_TOKEN and LONG_TEXT come from the environment; AGUI_CLIENT names the client
// package: `@ag-ui/client` (1.x), or `agui-client-legacy`, the 0.x client CopilotKit pins (0.0.59,
// an npm alias in package.json), which sends no protocolVersion and so gets no `cancelled` outcome.
//
// Steps: a streamed answer; a server tool; a frontend tool round trip; an approval interrupt
// resumed; a stop; a reconnect with Last-Event-ID in the middle of an answer.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

const client = process.env.AGUI_CLIENT ?? "@ag-ui/client";
const { HttpAgent } = await import(client);
const legacy = client !== "@ag-ui/client";

const base = process.env.VERNIS_URL;
const headers = { Authorization: `Bearer ${process.env.VERNIS_TOKEN}` };
const steps = [];

/** Fetch that records the SSE id and type of every event, in order, as the client reads them. */
function recordingFetch(ids) {
    return async (url, init) => {
        const response = await fetch(url, init);
        if (!response.body) return response;
        const decoder = new TextDecoder();
        let buffered = "";
        const body = response.body.pipeThrough(
            new TransformStream({
                transform(chunk, controller) {
                    buffered += decoder.decode(chunk, { stream: true });
                    let end;
                    while ((end = buffered.indexOf("\n\n")) >= 0) {
                        const block = buffered.slice(0, end);
                        buffered = buffered.slice(end + 2);
                        const lines = block.split("\n");
                        const id = lines.find((line) => line.startsWith("id: "));
                        const data = lines.find((line) => line.startsWith("data: "));
                        ids.push({
                            id: id === undefined ? null : Number(id.slice(4)),
                            type: data === undefined ? null : JSON.parse(data.slice(6)).type,
                        });
                    }
                    controller.enqueue(chunk);
                },
            }),
        );
        return new Response(body, { status: response.status, headers: response.headers });
    };
}

function agent(threadId, options = {}) {
    return new HttpAgent({ url: `${base}/api/agui/run`, headers, threadId, ...options });
}

function say(target, content) {
    target.addMessage({ id: randomUUID(), role: "user", content });
}

/** Run and collect every event the client applied, with the run's result. */
async function run(target, parameters = {}, extra = {}) {
    const events = [];
    const result = await target.runAgent(parameters, {
        onEvent: ({ event }) => {
            events.push(event);
        },
        ...extra,
    });
    return { events, result };
}

const kinds = (events) => events.map((event) => event.type);
const text = (events) =>
    events
        .filter((event) => event.type === "TEXT_MESSAGE_CONTENT")
        .map((event) => event.delta)
        .join("");

// 1. A streamed answer: the client's messages hold the user message and the assistant's answer.
{
    const chat = agent(randomUUID());
    say(chat, "hello from the official client");
    const { events } = await run(chat);
    assert.equal(kinds(events)[0], "RUN_STARTED");
    assert.equal(kinds(events).at(-1), "RUN_FINISHED");
    assert.match(text(events), /hello from the official client/);
    const last = chat.messages.at(-1);
    assert.equal(last.role, "assistant");
    assert.equal(last.content, text(events));
    steps.push("answer");
}

// 2. A server tool: its call and its result arrive as the client's assistant tool call and tool message.
{
    const chat = agent(randomUUID());
    say(chat, "how many unread notifications?");
    const { events } = await run(chat);
    const start = events.find((event) => event.type === "TOOL_CALL_START");
    assert.equal(start.toolCallName, "get_unread_count");
    const result = chat.messages.find((message) => message.role === "tool");
    assert.equal(result.toolCallId, start.toolCallId);
    assert.equal(JSON.parse(result.content).ok, true);
    steps.push("server tool");
}

// 3. A frontend tool: the run ends after its TOOL_CALL_END; the client runs it and sends its result
// as a tool message in the next run, whose answer reads it.
{
    const tools = [
        {
            name: "selected_rows",
            description: "The rows the user selected in the page's table.",
            parameters: {
                type: "object",
                properties: { limit: { type: "integer" } },
                required: ["limit"],
            },
        },
    ];
    const chat = agent(randomUUID());
    say(chat, "which rows did I select?");
    const first = await run(chat, { tools });
    const finished = first.events.at(-1);
    assert.equal(finished.type, "RUN_FINISHED");
    const call = first.events.find((event) => event.type === "TOOL_CALL_START");
    assert.equal(call.toolCallName, "selected_rows");
    assert.equal(finished.outcome, undefined);
    const assistant = chat.messages.at(-1);
    assert.equal(assistant.toolCalls[0].id, call.toolCallId);
    assert.deepEqual(JSON.parse(assistant.toolCalls[0].function.arguments), { limit: 2 });
    chat.addMessage({
        id: randomUUID(),
        role: "tool",
        toolCallId: call.toolCallId,
        content: JSON.stringify({ rows: ["Ada", "Grace"] }),
    });
    const second = await run(chat, { tools });
    assert.equal(second.events.at(-1).type, "RUN_FINISHED");
    assert.match(text(second.events), /Grace/);
    steps.push("frontend tool");
}

// 4. An approval: the write ends the run with an interrupt; resuming it runs the write.
{
    const chat = agent(randomUUID());
    say(chat, "mark it read please");
    const first = await run(chat);
    const outcome = first.events.at(-1).outcome;
    assert.equal(outcome.type, "interrupt");
    const [interrupt] = outcome.interrupts;
    assert.equal(interrupt.reason, "tool_approval");
    assert.deepEqual(interrupt.metadata.preview.changes, { read: { from: false, to: true } });
    const second = await run(chat, { resume: [{ interruptId: interrupt.id, status: "resolved" }] });
    const result = second.events.find((event) => event.type === "TOOL_CALL_RESULT");
    assert.equal(result.toolCallId, interrupt.toolCallId);
    assert.equal(JSON.parse(result.content).data.read, true);
    assert.equal(second.events.at(-1).type, "RUN_FINISHED");
    steps.push("approval");
}

// 5. A stop: POST /api/agui/stop while the answer streams ends the run as cancelled.
{
    const threadId = randomUUID();
    const chat = agent(threadId);
    say(chat, "talk a lot please");
    let stopping;
    const { events } = await run(
        chat,
        {},
        {
            onTextMessageContentEvent: () => {
                stopping ??= fetch(`${base}/api/agui/stop`, {
                    method: "POST",
                    headers: { ...headers, "Content-Type": "application/json" },
                    body: JSON.stringify({ threadId }),
                });
            },
        },
    );
    assert.equal((await stopping).status, 204);
    assert.equal(events.at(-1).type, "RUN_FINISHED");
    assert.deepEqual(events.at(-1).outcome, legacy ? undefined : { type: "cancelled" });
    assert.ok(text(events).length < process.env.LONG_TEXT.length);
    steps.push("stop");
}

// 6. A reconnect: the client drops its run mid-answer, then connects with the id of the last event
// it applied (Last-Event-ID); what it had and what came after make the answer, nothing twice.
{
    const threadId = randomUUID();
    const ids = [];
    const chat = agent(threadId, { fetch: recordingFetch(ids) });
    say(chat, "tell me a long story");
    const seen = [];
    const DELTAS = 5;
    await chat
        .runAgent(
            {},
            {
                onEvent: ({ event }) => {
                    seen.push(event);
                    if (seen.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").length === DELTAS) chat.abortRun();
                },
            },
        )
        .catch(() => {});
    // The client applied events up to its DELTAS-th text fragment, and no further.
    const lastEventId = ids.filter((event) => event.type === "TEXT_MESSAGE_CONTENT")[DELTAS - 1].id;
    assert.ok(Number.isInteger(lastEventId), JSON.stringify(ids));
    const rejoin = new HttpAgent({
        url: `${base}/api/agui/connect`,
        headers: { ...headers, "Last-Event-ID": String(lastEventId) },
        threadId,
        initialMessages: chat.messages,
    });
    rejoin.connect = (input) => rejoin.run(input);
    const after = [];
    await rejoin.connectAgent({}, { onEvent: ({ event }) => after.push(event) });
    assert.equal(after.at(-1).type, "RUN_FINISHED");
    assert.equal(text(seen) + text(after), process.env.LONG_TEXT);
    const answer = rejoin.messages.filter((message) => message.role === "assistant");
    assert.equal(answer.length, 1);
    assert.equal(answer[0].content, process.env.LONG_TEXT);
    steps.push("reconnect");
}

console.log(JSON.stringify({ steps }));
