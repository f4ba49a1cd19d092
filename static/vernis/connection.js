// The socket to Vernis, kept open: reconnects by itself with exponential backoff and jitter (the
// n-th retry after a failure at a random moment between half and all of min(30 s, 0.5 s x 2^n): the
// first within 0.5-1 s), resuming with `after_seq`, notices a dead link (no pong) and the browser
// going offline, and reports its state. Tabs cut at once (a deploy, a network blip) so come back
// spread over time, not all in the same instant.
//
// States: "connecting" (first attempt), "connected", "reconnecting" (lost, trying again), "offline"
// (the browser says it is offline), "unavailable" (online, but several attempts in a row failed:
// Vernis is down or unreachable, or the host's `getToken` failed, as `cause` says; it keeps trying
// in the background), "signed-out" (the server ended the session: 4401, and no new token can be had).
//
// After a 4401 (token expired or replaced by a bad one), a connection whose host gives tokens
// (`renewable()`) reconnects at once with a fresh one, at most once per RENEW_INTERVAL_MS: a second
// 4401 soon after means the host's tokens are not accepted, and it stays signed out.
//
// A handshake the server refuses (HTTP 403) looks to a browser like any failed connection: it cannot
// read the status. So when a socket closes before it ever opened, `probe()` asks the server over HTTP
// with the same token; "refused" (HTTP 401) is treated like a 4401: a fresh token from the host, or
// signed out. Anything else (the server unreachable) is a plain failure, retried with backoff.

export const CLOSE_AUTH_EXPIRED = 4401;
const PROTOCOL = "vernis.v1";
const BACKOFF_BASE_MS = 500;
const BACKOFF_MAX_MS = 30000;
// Back online, a tab waits up to this long, at random: every tab of a network comes back at once.
const ONLINE_JITTER_MS = 1000;
const UNAVAILABLE_AFTER_FAILURES = 4;
const IDLE_PING_MS = 25000;
const PONG_TIMEOUT_MS = 10000;
const RENEW_INTERVAL_MS = 10000;

export class Connection extends EventTarget {
  /**
   * `url()`: the socket URL to use for the next attempt (it carries the resume position).
   * `protocols()`: the subprotocols to offer (may add `vernis.token.<jwt>`), sync or async.
   * `renewable()`: whether a new token can be had after a 4401 (the host gives tokens).
   */
  constructor({ url, protocols = () => [PROTOCOL], renewable = () => false, probe = async () => "unknown" }) {
    super();
    this.url = url;
    this.protocols = protocols;
    this.renewable = renewable;
    this.probe = probe;
    this.renewedAt = -Infinity;
    this.state = "connecting";
    this.socket = null;
    this.failures = 0;
    this.retryTimer = null;
    this.pingTimer = null;
    this.pongTimer = null;
    this.nextRetryAt = null;
    this.stopped = false;
    this.opening = false;
    // Why the last attempt failed: "server" (not reached, or closed) or "token" (getToken failed).
    this.cause = null;
    this.onOnline = () => this.reconnectSoon();
    this.onOffline = () => this.drop("offline");
    window.addEventListener("online", this.onOnline);
    window.addEventListener("offline", this.onOffline);
  }

  start() {
    this.stopped = false;
    this.open();
  }

  /** Close for good (the element left the page). */
  stop() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.clearKeepalive();
    window.removeEventListener("online", this.onOnline);
    window.removeEventListener("offline", this.onOffline);
    if (this.socket) {
      this.socket.close(1000);
      this.socket = null;
    }
  }

  get connected() {
    return this.state === "connected";
  }

  /** Send one command; false when the socket is not open (the caller keeps the input). */
  send(command) {
    if (!this.socket || this.socket.readyState !== WebSocket.OPEN) {
      return false;
    }
    this.socket.send(JSON.stringify(command));
    this.armKeepalive();
    return true;
  }

  /** The browser is back online: retry within ONLINE_JITTER_MS, at a random moment. */
  reconnectSoon() {
    if (this.stopped || this.state === "signed-out" || (this.socket && this.socket.readyState <= WebSocket.OPEN)) {
      return;
    }
    clearTimeout(this.retryTimer);
    const delay = Math.round(Math.random() * ONLINE_JITTER_MS);
    this.nextRetryAt = Date.now() + delay;
    this.retryTimer = setTimeout(() => this.connectNow(), delay);
  }

  /** Retry at once (the "retry now" button). */
  reconnectNow() {
    if (this.stopped || this.state === "signed-out") {
      return;
    }
    this.connectNow();
  }

  /** Signed out, and the host has a new way to get tokens: try again. */
  signIn() {
    if (this.state === "signed-out") {
      this.renewedAt = -Infinity;
      this.setState("reconnecting");
    }
    this.connectNow();
  }

  connectNow() {
    if (this.stopped) {
      return;
    }
    if (this.socket && this.socket.readyState <= WebSocket.OPEN) {
      return;
    }
    clearTimeout(this.retryTimer);
    this.open();
  }

  /** Cut the current socket as if the network dropped it; reconnects with the usual backoff. */
  drop(state = "reconnecting") {
    if (this.socket) {
      const socket = this.socket;
      this.socket = null;
      this.detach(socket);
      socket.close(4000, "client reconnecting");
    }
    this.clearKeepalive();
    this.setState(navigator.onLine === false ? "offline" : state);
    this.scheduleRetry();
  }

  async open() {
    if (this.stopped || this.opening || (this.socket && this.socket.readyState <= WebSocket.OPEN)) {
      return;
    }
    this.opening = true;
    let socket;
    try {
      let protocols;
      try {
        protocols = await this.protocols();
      } catch (error) {
        console.warn("Vernis: no token from the host page (getToken failed)", error);
        this.failed("token");
        return;
      }
      socket = new WebSocket(this.url(), protocols);
    } catch (error) {
      console.warn("Vernis: cannot open the socket", error);
      this.failed();
      return;
    } finally {
      this.opening = false;
    }
    this.socket = socket;
    let opened = false;
    socket.onopen = () => {
      opened = true;
      this.failures = 0;
      this.nextRetryAt = null;
      this.setState("connected");
      this.armKeepalive();
    };
    socket.onmessage = (message) => {
      // Anything arriving proves the link is alive.
      if (this.pongTimer !== null) {
        clearTimeout(this.pongTimer);
        this.pongTimer = null;
      }
      this.armKeepalive();
      let event;
      try {
        event = JSON.parse(message.data);
      } catch {
        return;
      }
      if (event.type === "pong") {
        return;
      }
      this.dispatchEvent(new CustomEvent("event", { detail: event }));
    };
    socket.onclose = (close) => {
      if (this.socket !== socket) {
        return;
      }
      this.socket = null;
      this.clearKeepalive();
      if (close.code === CLOSE_AUTH_EXPIRED) {
        this.refused();
        return;
      }
      if (!opened && navigator.onLine !== false) {
        // Refused before accept, or never reached: ask over HTTP which one.
        this.checkRefusal();
        return;
      }
      this.failed();
    };
  }

  async checkRefusal() {
    let verdict = "unknown";
    try {
      verdict = await this.probe();
    } catch {
      verdict = "unknown";
    }
    if (this.stopped || this.socket) {
      return;
    }
    if (verdict === "refused") {
      this.refused();
    } else {
      this.failed();
    }
  }

  /** The server does not accept this token: a fresh one from the host (once in a while), else signed out. */
  refused() {
    if (this.renewable() && Date.now() - this.renewedAt > RENEW_INTERVAL_MS) {
      this.renewedAt = Date.now();
      this.setState("reconnecting");
      this.open();
      return;
    }
    clearTimeout(this.retryTimer);
    this.setState("signed-out");
  }

  detach(socket) {
    socket.onopen = socket.onmessage = socket.onclose = null;
  }

  /** An attempt failed (`cause`: "server" or "token"): retried with backoff. */
  failed(cause = "server") {
    if (this.stopped) {
      return;
    }
    this.failures += 1;
    this.cause = cause;
    if (navigator.onLine === false) {
      this.setState("offline");
    } else {
      this.setState(this.failures >= UNAVAILABLE_AFTER_FAILURES ? "unavailable" : "reconnecting");
    }
    this.scheduleRetry();
  }

  scheduleRetry() {
    clearTimeout(this.retryTimer);
    if (this.stopped) {
      return;
    }
    const exponent = Math.min(this.failures, 10);
    const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** exponent);
    // Full jitter, with a floor, so that many tabs after a server restart do not come back at once.
    const delay = Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
    this.nextRetryAt = Date.now() + delay;
    this.retryTimer = setTimeout(() => this.open(), delay);
    this.dispatchEvent(new CustomEvent("state", { detail: this.snapshot() }));
  }

  /** The link was used now: a ping goes after IDLE_PING_MS of silence. Called for every frame in
   * and out, so it only notes the time; the one timer re-arms itself for what is left. */
  armKeepalive() {
    this.lastActivity = Date.now();
    if (this.pingTimer === null) {
      this.waitForSilence(IDLE_PING_MS);
    }
  }

  waitForSilence(delay) {
    this.pingTimer = setTimeout(() => {
      this.pingTimer = null;
      const quiet = Date.now() - this.lastActivity;
      if (quiet < IDLE_PING_MS) {
        this.waitForSilence(IDLE_PING_MS - quiet);
        return;
      }
      if (this.send({ type: "ping" })) {
        clearTimeout(this.pongTimer);
        this.pongTimer = setTimeout(() => this.drop(), PONG_TIMEOUT_MS);
      }
    }, delay);
  }

  clearKeepalive() {
    clearTimeout(this.pingTimer);
    clearTimeout(this.pongTimer);
    this.pingTimer = this.pongTimer = null;
  }

  setState(state) {
    if (state === "connected") {
      this.nextRetryAt = null;
    }
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: this.snapshot() }));
  }

  snapshot() {
    return { state: this.state, nextRetryAt: this.nextRetryAt, failures: this.failures, cause: this.cause };
  }
}
