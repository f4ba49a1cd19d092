// A page that drives Vernis from CopilotKit's open-source chat: CopilotKit's provider gets Vernis as
// an AG-UI agent (an `HttpAgent` in the browser, no CopilotKit runtime server), its `<CopilotChat>`
// streams the answers, and `useInterrupt` shows Vernis's approval interrupts in the chat.

import { StrictMode, useEffect, useMemo, useState } from "react";
import { createRoot } from "react-dom/client";
import { CopilotChat, CopilotKitProvider, useDefaultRenderTool, useInterrupt } from "@copilotkit/react-core/v2";
import "@copilotkit/react-core/v2/styles.css";

import { VernisAgent } from "./agent.js";
import { addressOf, readConfig } from "./config.js";
import "./page.css";

const AGENT_ID = "vernis";

/** Ask Vernis who the agent is: the token and the CORS of this origin are checked before any chat. */
async function probe({ vernis, token }) {
  let response;
  try {
    response = await fetch(`${vernis}/api/agui/info`, { headers: { Authorization: `Bearer ${token}` } });
  } catch {
    return {
      problem:
        `Cannot reach Vernis at ${vernis}. Is it running, and does its VERNIS_ALLOWED_ORIGINS ` +
        `list this page's origin (${window.location.origin})?`,
    };
  }
  if (response.status === 401) {
    return { problem: "Vernis refused the token (expired, or signed with another secret). Get a new one: `vernis token member@acme.test`." };
  }
  if (!response.ok) {
    return { problem: `Vernis answered ${response.status} to ${vernis}/api/agui/info.` };
  }
  return { info: await response.json() };
}

/** What a failed run says, in words: Vernis's error message when it sent one. */
function describe(error) {
  const message = error?.payload?.error?.message;
  if (message) return message;
  if (error instanceof TypeError) return "Vernis could not be reached: is it running?";
  return error?.message || String(error);
}

function Change({ field, change }) {
  const shown =
    change && typeof change === "object" && "from" in change
      ? `${JSON.stringify(change.from)} → ${JSON.stringify(change.to)}`
      : JSON.stringify(change);
  return (
    <li>
      <code>{field}</code>: {shown}
    </li>
  );
}

/** Vernis's preview of a write (`metadata.preview`): an update's `changes` (from → to), or an
 * `action` and the record it would make. */
function Preview({ preview }) {
  if (!preview || typeof preview !== "object") return null;
  const { action, changes, ...rest } = preview;
  return (
    <>
      {action && <p className="approval-action">{action}</p>}
      {changes && (
        <ul className="approval-changes">
          {Object.entries(changes).map(([field, change]) => (
            <Change key={field} field={field} change={change} />
          ))}
        </ul>
      )}
      {Object.keys(rest).length > 0 && (
        <details>
          <summary>Details</summary>
          <pre>{JSON.stringify(rest, null, 2)}</pre>
        </details>
      )}
    </>
  );
}

/** A write Vernis holds until the user decides: an AG-UI interrupt with reason `tool_approval`.
 * Approve resumes the thread with `{interruptId, status: "resolved"}`, Reject with `"cancelled"`. */
function Approval({ interrupt, resolve, cancel }) {
  const [decided, setDecided] = useState(null);
  const decide = (approved) => {
    setDecided(approved ? "Approved." : "Rejected.");
    return approved ? resolve() : cancel();
  };
  return (
    <section className="approval" aria-label="Approval" data-interrupt={interrupt?.id}>
      <p className="approval-title">{interrupt?.message ?? "Approve this change?"}</p>
      <Preview preview={interrupt?.metadata?.preview} />
      {decided ? (
        <p className="approval-decided">{decided}</p>
      ) : (
        <div className="approval-actions">
          <button type="button" onClick={() => decide(true)}>
            Approve
          </button>
          <button type="button" className="secondary" onClick={() => decide(false)}>
            Reject
          </button>
        </div>
      )}
    </section>
  );
}

/** Any other interrupt (an `ask_user` form): this example only lets the user close it. */
function OtherInterrupt({ interrupt, cancel }) {
  return (
    <section className="approval" aria-label="Question">
      <p className="approval-title">{interrupt?.message ?? "The assistant asks a question."}</p>
      <p>This example answers approvals only; the Vernis panel answers questions.</p>
      <div className="approval-actions">
        <button type="button" className="secondary" onClick={() => cancel()}>
          Close the question
        </button>
      </div>
    </section>
  );
}

function Interrupts() {
  useInterrupt({
    agentId: AGENT_ID,
    render: (props) =>
      props.interrupt?.reason === "tool_approval" ? <Approval {...props} /> : <OtherInterrupt {...props} />,
  });
  // Vernis's server tools stream as AG-UI tool calls: CopilotKit's default card shows each one.
  useDefaultRenderTool();
  return null;
}

function Chat({ config, info, thread }) {
  const [failure, setFailure] = useState(null);
  const agent = useMemo(
    () => new VernisAgent({ ...config, resumable: thread === config.thread && config.resumed ? [thread] : [] }),
    [config, thread],
  );
  const agents = useMemo(() => ({ [AGENT_ID]: agent }), [agent]);
  useEffect(() => {
    // A new run clears the last one's failure (Vernis may be back).
    const subscription = agent.subscribe({ onRunInitialized: () => setFailure(null) });
    return () => subscription.unsubscribe();
  }, [agent]);
  return (
    <CopilotKitProvider
      agents__unsafe_dev_only={agents}
      agentId={AGENT_ID}
      enableInspector={false}
      onError={({ error }) => setFailure(describe(error))}
    >
      <Interrupts />
      {failure && (
        <p className="notice" role="alert">
          {failure}
        </p>
      )}
      <CopilotChat
        className="chat"
        threadId={thread}
        labels={{
          chatInputPlaceholder: `Ask ${info.name}…`,
          welcomeMessageText: `${info.name} answers here, through AG-UI. Conversations are stored by Vernis.`,
        }}
      />
    </CopilotKitProvider>
  );
}

function App({ config }) {
  const [probed, setProbed] = useState(null);
  const [thread, setThread] = useState(config.thread);
  useEffect(() => {
    probe(config).then(setProbed);
  }, [config]);
  useEffect(() => {
    // The address names the thread, so a reload rejoins it (its history comes from Vernis).
    window.history.replaceState(null, "", addressOf(window.location, config, thread));
  }, [config, thread]);
  if (probed === null) {
    return <p className="status">Connecting to {config.vernis}…</p>;
  }
  if (probed.problem) {
    return <Problem text={probed.problem} />;
  }
  return (
    <>
      <header>
        <h1>{probed.info.name}</h1>
        <span className="thread" data-thread={thread} title="The Vernis conversation id (AG-UI threadId)">
          {thread}
        </span>
        <button type="button" onClick={() => setThread(crypto.randomUUID())}>
          New conversation
        </button>
      </header>
      <Chat key={thread} config={config} info={probed.info} thread={thread} />
    </>
  );
}

function Problem({ text }) {
  return (
    <p className="problem" role="alert">
      {text}
    </p>
  );
}

const config = readConfig(window.location);
createRoot(document.getElementById("root")).render(
  <StrictMode>{config.problem ? <Problem text={config.problem} /> : <App config={config} />}</StrictMode>,
);
