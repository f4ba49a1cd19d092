// What passes between the assistant and the page that embeds it (SPEC §11): the host's token and
// when to ask for the next one, the page context the host gives, and the DOM events it listens to.
// No DOM here beyond building events: the element is the glue.

import { humanize } from "./dom.js";

// Ask for the next token this long before the current one expires, at most (a fifth of the token's
// lifetime for short-lived tokens), and never sooner than MIN_REFRESH_MS from now.
const REFRESH_MARGIN_MS = 60_000;
const MIN_REFRESH_MS = 1_000;
// setTimeout's longest delay (about 24.8 days): a longer one fires at once.
const MAX_TIMER_MS = 2 ** 31 - 1;
// When asking the host for the next token fails, ask again this much later (until the token expires).
const TOKEN_RETRY_MS = 5000;
// The server's limits on a page context (protocol v1 `page_context`): longer values are refused.
const MAX_ROUTE = 2048;
const MAX_ENTITY_TYPE = 64;
const MAX_ENTITY_ID = 128;
const MAX_SUMMARY = 200;

/**
 * The claims of a JWT, decoded and NOT verified (the server verifies; the client only reads `exp`
 * and `iat` to know when to ask the host again), or null when it is not a readable JWT.
 */
export function tokenClaims(token) {
  const parts = typeof token === "string" ? token.split(".") : [];
  if (parts.length !== 3) {
    return null;
  }
  try {
    const base64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const bytes = Uint8Array.from(atob(base64.padEnd(Math.ceil(base64.length / 4) * 4, "=")), (c) => c.charCodeAt(0));
    const claims = JSON.parse(new TextDecoder().decode(bytes));
    return claims && typeof claims === "object" ? claims : null;
  } catch {
    return null;
  }
}

/**
 * Milliseconds from `now` until the host should be asked for the token that replaces `token`, or
 * null when it has no `exp` (it never needs replacing).
 *
 * The lifetime (`exp - iat`) bounds the wait, so a browser clock behind the server's cannot make
 * the refresh late; a token that looks expired by this clock but has a lifetime left is taken as a
 * clock ahead of the server's (the server closes with 4401 at its own `exp` if it really is stale).
 */
export function refreshDelay(token, now = Date.now()) {
  const claims = tokenClaims(token);
  if (!claims || typeof claims.exp !== "number") {
    return null;
  }
  const left = claims.exp * 1000 - now;
  const lifetime = typeof claims.iat === "number" && claims.exp > claims.iat ? (claims.exp - claims.iat) * 1000 : left;
  const margin = Math.min(REFRESH_MARGIN_MS, lifetime / 5);
  const remaining = left > margin ? Math.min(left, lifetime) : lifetime;
  return Math.min(Math.max(remaining - margin, MIN_REFRESH_MS), MAX_TIMER_MS);
}

/**
 * Keeps the live socket's token fresh: `schedule(token)` (each time a socket opens with `token`) asks
 * `fetchToken()` for the next one shortly before `token` expires and hands it to `send(token)`, which
 * sends it on the socket (`authenticate`) and returns false when there is no live socket (the next
 * one asks for a token of its own). A failed `fetchToken()` is retried every TOKEN_RETRY_MS.
 */
export class TokenRefresher {
  constructor(fetchToken, send) {
    this.fetchToken = fetchToken;
    this.send = send;
    this.timer = null;
  }

  schedule(token) {
    clearTimeout(this.timer);
    const delay = token ? refreshDelay(token) : null;
    if (delay !== null) {
      this.timer = setTimeout(() => this.refresh(), delay);
    }
  }

  stop() {
    clearTimeout(this.timer);
  }

  async refresh() {
    let token;
    try {
      token = await this.fetchToken();
    } catch (error) {
      console.warn("Vernis: getToken() failed; asking again shortly", error);
      this.timer = setTimeout(() => this.refresh(), TOKEN_RETRY_MS);
      return;
    }
    if (token && this.send(token)) {
      this.schedule(token);
    }
  }
}

/**
 * The host's page context (`element.pageContext = {route, entity_type, entity_id}`) as the protocol
 * takes it: strings within the server's limits, an entity only with both its type and its id.
 * Null or undefined: none (the element's attributes, then the page's route, apply). Anything the
 * server would refuse is left out, with a warning for the host's developer.
 */
export function normalizePageContext(value) {
  if (value === null || value === undefined) {
    return null;
  }
  if (typeof value !== "object") {
    console.warn("Vernis: pageContext must be an object {route, entity_type, entity_id}; ignored", value);
    return null;
  }
  const context = {};
  const route = text(value.route, MAX_ROUTE, "route");
  if (route) {
    context.route = route;
  }
  const type = text(value.entity_type, MAX_ENTITY_TYPE, "entity_type");
  const id = text(value.entity_id, MAX_ENTITY_ID, "entity_id");
  if (type && id) {
    context.entity_type = type;
    context.entity_id = id;
  }
  return context;
}

function text(value, limit, name) {
  if (value === null || value === undefined || value === "") {
    return null;
  }
  const string = typeof value === "number" ? String(value) : value;
  if (typeof string !== "string" || string.length > limit) {
    console.warn(`Vernis: pageContext.${name} must be a string of at most ${limit} characters; ignored`);
    return null;
  }
  return string;
}

/** A one-line account of a finished tool call, for the host (`vernis:tool-completed`): the
 * tool's own sentence when its result has one ("Created contact Rowan Tanaka"), else the tool's
 * name and how the call ended ("Update contact: done."), never the raw result. */
export function toolSummary(toolName, status, result) {
  const name = humanize(toolName);
  if (status === "rejected") {
    return `${name}: rejected, nothing was changed.`;
  }
  const message = result && result.error && typeof result.error.message === "string" ? result.error.message : "";
  if (status === "expired") {
    return shorten(`${name}: ${message || "the approval expired, nothing was changed."}`);
  }
  if (status === "error") {
    return shorten(message ? `${name} failed: ${message}` : `${name} failed.`);
  }
  if (result && typeof result.summary === "string" && result.summary.trim()) {
    return shorten(result.summary);
  }
  return `${name}: done.`;
}

function shorten(line) {
  const flat = line.replace(/\s+/g, " ").trim();
  return flat.length > MAX_SUMMARY ? `${flat.slice(0, MAX_SUMMARY - 1)}…` : flat;
}

/** An event the host page can listen to anywhere above the element: it bubbles out of the shadow root. */
export function hostEvent(name, detail = {}) {
  return new CustomEvent(name, { bubbles: true, composed: true, detail });
}
