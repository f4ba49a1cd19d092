// The host page's own tools (SPEC §18): what `el.registerTool`, `el.unregisterTool` and
// `el.navigate` give the assistant, declared to the server as `client_tools` on the live socket and
// again on every reconnect, and run here when the server sends `client_tool_call`.
//
// A tool is `{name, description, parameters, write, handler}`: `parameters` is a JSON schema (an
// object of strings, numbers, booleans, enums, arrays; the server checks the model's arguments
// against it before the page sees them), `write: true` makes the user approve each call first (a
// card with the arguments), and `handler(args)` returns (or resolves to) the data the model reads;
// a thrown error is a failed call whose message the model reads.
//
// `navigate`: when the host sets `el.navigate = (url) => ...`, the assistant gets a tool `navigate`
// {path} whose path must match one of the routes the server names (`navigable` in its config:
// `[[pages]]` and `[embed] navigable`). The schema carries that as a pattern, so the server refuses
// any other path (a `javascript:` URL, another origin) before it reaches the page; the page checks
// again before it calls the host.

const NAME = /^[a-z][a-z0-9_]{0,47}$/;
const MAX_TOOLS = 32;
const NAVIGATE = "navigate";
// A route's `{name}` stands for one path segment.
const SEGMENT = "[^/?#\\s]+";

export class ClientTools {
  /** `send(command)`: sends one command on the live socket, false when there is none. */
  constructor(send) {
    this.send = send;
    this.tools = new Map();
    this.navigateTo = null;
    this.routes = [];
  }

  register(tool) {
    const { name, description, parameters, write = false, handler } = tool || {};
    if (typeof name !== "string" || !NAME.test(name) || name === NAVIGATE) {
      throw new TypeError(`registerTool: the name must match ${NAME} and not be "${NAVIGATE}"`);
    }
    if (typeof description !== "string" || !description.trim()) {
      throw new TypeError("registerTool: a description says the model what the tool does");
    }
    if (!parameters || typeof parameters !== "object" || parameters.type !== "object") {
      throw new TypeError('registerTool: parameters is a JSON schema of type "object"');
    }
    if (typeof handler !== "function") {
      throw new TypeError("registerTool: handler is a function (args) => data");
    }
    if (!this.tools.has(name) && this.tools.size >= MAX_TOOLS - 1) {
      throw new RangeError(`registerTool: at most ${MAX_TOOLS - 1} tools besides navigate`);
    }
    this.tools.set(name, { name, description: description.trim(), parameters, write: write === true, handler });
    this.declare();
  }

  unregister(name) {
    if (this.tools.delete(name)) {
      this.declare();
    }
  }

  /** The host's `el.navigate`: a function adds the `navigate` tool, anything else removes it. */
  setNavigate(navigate) {
    this.navigateTo = typeof navigate === "function" ? navigate : null;
    this.declare();
  }

  /** The routes `navigate` may open, from the server's configuration (`navigable`). */
  setRoutes(routes) {
    const next = (Array.isArray(routes) ? routes : []).filter((route) => typeof route === "string" && route.startsWith("/"));
    if (next.join("\n") === this.routes.map((route) => route.route).join("\n")) {
      return;
    }
    this.routes = next.map((route) => ({ route, source: routeSource(route) }));
    this.declare();
  }

  /** What `client_tools` declares: the host's tools, and `navigate` when it can go somewhere. */
  declarations() {
    const tools = [...this.tools.values()].map(({ name, description, parameters, write }) => ({ name, description, parameters, write }));
    if (this.navigateTo && this.routes.length) {
      tools.push({
        name: NAVIGATE,
        description: `Open a page of this application for the user. Paths allowed: ${this.routes.map((r) => r.route).join(", ")} (replace {…} with a value).`,
        parameters: {
          type: "object",
          properties: { path: { type: "string", pattern: this.pathPattern(), description: "The page's path, starting with /." } },
          required: ["path"],
          additionalProperties: false,
        },
        write: false,
      });
    }
    return tools;
  }

  pathPattern() {
    return `^(?:${this.routes.map((route) => route.source).join("|")})(?:\\?[^#\\s]*)?$`;
  }

  /** Send `client_tools` now if the socket is open (on connect it is called again). */
  declare() {
    return this.send({ type: "client_tools", tools: this.declarations() });
  }

  /** Run one `client_tool_call` and answer it with `client_tool_result`. */
  async run({ call_id: callId, tool_name: name, arguments: args }) {
    let result;
    try {
      const data = name === NAVIGATE ? await this.navigate(args) : await this.handle(name, args);
      result = { ok: true, data: data === undefined ? null : data };
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      result = { ok: false, error: (message || "The page could not do it.").slice(0, 2000) };
    }
    this.send({ type: "client_tool_result", call_id: callId, ...result });
  }

  async handle(name, args) {
    const tool = this.tools.get(name);
    if (!tool) {
      throw new Error(`This page has no tool ${name} any more.`);
    }
    return tool.handler(args);
  }

  async navigate(args) {
    const path = args && typeof args.path === "string" ? args.path : "";
    const url = new URL(path, location.origin);
    if (!this.navigateTo || !path.startsWith("/") || url.origin !== location.origin || !new RegExp(this.pathPattern()).test(path)) {
      throw new Error(`${path.slice(0, 200)} is not a page this assistant may open.`);
    }
    await this.navigateTo(path);
    return { navigated: path };
  }
}

/** `/contacts/{id}` as the source of a RegExp matching that path (no anchors). */
function routeSource(route) {
  return route
    .replace(/\/$/, "")
    .split(/(\{[A-Za-z_][A-Za-z0-9_]*\})/)
    .map((part, index) => (index % 2 ? SEGMENT : part.replace(/[.*+?^$()|[\]\\{}]/g, "\\$&")))
    .join("")
    .concat("/?")
    .replace(/^\/\?$/, "/");
}
