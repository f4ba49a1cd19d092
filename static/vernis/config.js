// The assistant's configuration, from the server it talks to (SPEC §11, §14): its name (and, when the
// server gives them, its avatar image and the empty conversation's greeting), whether the
// answers are scripted, the origins images may load from besides the server's, and the quick
// actions this member may use (the server has already left out
// those their permissions do not allow). An action with entity types belongs only on pages showing
// one of them ("Summarize this contact"); one without belongs everywhere.

export const DEFAULT_NAME = "Vernis";
const MAX_NAME_CHARS = 60;
const MAX_GREETING_CHARS = 200;

/** The configuration until the server's arrives, and when it cannot be had: no quick actions. */
export function defaultConfig() {
  return { name: DEFAULT_NAME, greeting: "", avatarUrl: "", scripted: false, quickActions: [], pages: [], imageOrigins: [], reviewer: false, navigable: [] };
}

/**
 * GET `<server>/api/assistant/config`: with `Authorization: Bearer <token>` when the host gave a
 * token, else with the `vernis_token` cookie. Rejects when the request fails or is refused.
 */
export async function fetchConfig(server, token) {
  const headers = { Accept: "application/json" };
  if (token) {
    headers.Authorization = `Bearer ${token}`;
  }
  const response = await fetch(`${server}/api/assistant/config`, {
    headers,
    credentials: token ? "omit" : "same-origin",
    cache: "no-store",
  });
  if (!response.ok) {
    throw new Error(`the assistant's configuration was refused (HTTP ${response.status})`);
  }
  return parseConfig(await response.json());
}

/**
 * Whether the server accepts `token` (or, without one, the `vernis_token` cookie): the same check as
 * the socket's handshake, over HTTP, where the browser can read the answer. "refused" (HTTP 401 or
 * 403), "ok", or "unknown" (unreachable, or any other answer).
 */
export async function probeSession(server, token) {
  const headers = { Accept: "application/json" };
  if (token) {
    headers.Authorization = `Bearer ${token}`;
  }
  try {
    const response = await fetch(`${server}/api/assistant/config`, {
      headers,
      credentials: token ? "omit" : "same-origin",
      cache: "no-store",
    });
    if (response.status === 401 || response.status === 403) {
      return "refused";
    }
    return response.ok ? "ok" : "unknown";
  } catch {
    return "unknown";
  }
}

/** The server's JSON as a configuration; what is malformed is left out, never fatal. */
export function parseConfig(body) {
  const config = defaultConfig();
  if (!body || typeof body !== "object") {
    return config;
  }
  if (typeof body.name === "string" && body.name.trim()) {
    config.name = body.name.trim().slice(0, MAX_NAME_CHARS);
  }
  // Optional: the welcome of an empty conversation ("" gives the panel's own, from the name), and
  // the avatar's image, a path on the server or an http(s) URL (the panel draws it only from the
  // server's origin or an image origin; else, and until then, the name's monogram).
  if (typeof body.greeting === "string" && body.greeting.trim()) {
    config.greeting = body.greeting.trim().slice(0, MAX_GREETING_CHARS);
  }
  if (typeof body.avatar_url === "string" && /^(\/(?!\/)|https?:\/\/)/i.test(body.avatar_url.trim())) {
    config.avatarUrl = body.avatar_url.trim();
  }
  config.scripted = body.scripted === true;
  // Whether this member reviews others' writes: the panel shows its Reviews view.
  config.reviewer = body.reviewer === true;
  const actions = Array.isArray(body.quick_actions) ? body.quick_actions : [];
  for (const action of actions) {
    if (!action || typeof action.label !== "string" || typeof action.prompt !== "string") {
      continue;
    }
    if (!action.label.trim() || !action.prompt.trim()) {
      continue;
    }
    const types = Array.isArray(action.entity_types) ? action.entity_types.filter((type) => typeof type === "string") : [];
    config.quickActions.push({ label: action.label, prompt: action.prompt, entityTypes: types });
  }
  // Origins only (`https://cdn.example.com`), as the server checked them: anything else is left out.
  const origins = Array.isArray(body.image_origins) ? body.image_origins : [];
  config.imageOrigins = origins.filter((origin) => typeof origin === "string" && originOf(origin) === origin);
  // The routes the page's `navigate` tool may open (SPEC §18): paths, `{name}` for one segment.
  config.navigable = (Array.isArray(body.navigable) ? body.navigable : []).filter((route) => typeof route === "string" && route.startsWith("/"));
  const pages = Array.isArray(body.pages) ? body.pages : [];
  for (const page of pages) {
    const pattern = page && typeof page.route === "string" && typeof page.entity_type === "string" ? routePattern(page.route) : null;
    if (pattern) {
      config.pages.push({ pattern, entityType: page.entity_type });
    }
  }
  return config;
}

function originOf(text) {
  try {
    const url = new URL(text);
    return /^https?:$/.test(url.protocol) ? url.origin : null;
  } catch {
    return null;
  }
}

const ID_PART = "[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}";

/** `/tickets/{id}` as a RegExp matching a whole path, as the server matches it (null if not one). */
function routePattern(route) {
  if (!route.startsWith("/") || (route.match(/\{id\}/g) || []).length !== 1) {
    return null;
  }
  let source = "";
  let last = 0;
  for (const match of route.matchAll(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g)) {
    source += route.slice(last, match.index).replace(/[.*+?^$()|[\]\\]/g, "\\$&");
    source += match[1] === "id" ? `(${ID_PART})` : "[^/]+";
    last = match.index + match[0].length;
  }
  source += route.slice(last).replace(/\/$/, "").replace(/[.*+?^$()|[\]\\]/g, "\\$&");
  try {
    return new RegExp(`^${source}/?$`, "i");
  } catch {
    return null;
  }
}

/** The entity a page shows, from its route alone: `{entityType, entityId}` of the first matching pattern, or null. */
export function entityForRoute(pages, path) {
  for (const page of pages) {
    const match = page.pattern.exec(path);
    if (match) {
      return { entityType: page.entityType, entityId: match[1] };
    }
  }
  return null;
}

/**
 * The quick actions for a page showing `entityType` (or nothing): `general`, those for every page,
 * and `page`, those about the entity the page shows. Both keep the server's order.
 */
export function quickActionsFor(actions, entityType) {
  const general = [];
  const page = [];
  for (const action of actions) {
    if (action.entityTypes.length === 0) {
      general.push(action);
    } else if (entityType && action.entityTypes.includes(entityType)) {
      page.push(action);
    }
  }
  return { general, page };
}
