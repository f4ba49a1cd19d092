// Vernis as an AG-UI agent: the official `HttpAgent` on `POST /api/agui/run`, plus
// - `connect` (`POST /api/agui/connect`), which @ag-ui/client 0.0.x leaves unimplemented, so that
//   CopilotKit's chat shows a stored conversation's history when the page rejoins it;
// - `abortRun` (CopilotKit's stop button) also asks Vernis to stop (`POST /api/agui/stop`): a
//   request that is merely dropped does not stop Vernis's answer, which goes on and is stored, as
//   when a tab goes away.

import { AGUIConnectNotImplementedError, HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

export class VernisAgent extends HttpAgent {
  /**
   * `vernis`: Vernis's base URL; `token`: the host's token for the member; `resumable`: the thread
   * ids that exist in Vernis (a thread the page has not run yet has nothing to connect to).
   */
  constructor({ vernis, token, resumable = [] }) {
    super({ url: `${vernis}/api/agui/run`, headers: { Authorization: `Bearer ${token}` } });
    this.connectUrl = `${vernis}/api/agui/connect`;
    this.stopUrl = `${vernis}/api/agui/stop`;
    this.resumable = new Set(resumable);
  }

  run(input) {
    this.resumable.add(input.threadId);
    return super.run(input);
  }

  connect(input) {
    if (!this.resumable.has(input.threadId)) {
      // AbstractAgent.connectAgent takes this error as "nothing to join" and ends quietly.
      throw new AGUIConnectNotImplementedError();
    }
    const request = () =>
      this.fetch(this.connectUrl, {
        method: "POST",
        headers: { ...this.headers, "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify({ threadId: input.threadId, runId: input.runId }),
        signal: this.abortController.signal,
      });
    return transformHttpEventStream(runHttpRequest(request), this.debugLogger);
  }

  abortRun() {
    if (this.isRunning) {
      this.fetch(this.stopUrl, {
        method: "POST",
        headers: { ...this.headers, "Content-Type": "application/json" },
        body: JSON.stringify({ threadId: this.threadId }),
      }).catch(() => {});
    }
    super.abortRun();
  }

  clone() {
    const copy = super.clone();
    copy.connectUrl = this.connectUrl;
    copy.stopUrl = this.stopUrl;
    copy.resumable = this.resumable;
    return copy;
  }
}
