// <vernis-assistant>: the launcher button and the slide-over panel (400 px, or full screen) with
// the header (title, session picker, new chat, expand, close), the message list and the input bar.
//
// The host page's side of it (SPEC §11):
// - `server` attribute: the Vernis origin (default: the one this script came from).
// - `element.getToken = () => Promise<jwt>` (`element.tokenProvider` is its older name): called at
//   connect, shortly before the token expires (its `exp`, read without verifying), then sent on the
//   live socket as `authenticate`, and after a 4401 close (then it reconnects). The token travels as
//   the subprotocol `vernis.token.<jwt>` (never in the URL), as `Authorization: Bearer` over HTTP.
//   Without it, the `vernis_token` cookie authenticates (same-site hosts).
// - `element.pageContext = {route, entity_type, entity_id}` (null to unset), else the `entity-type`
//   / `entity-id` attributes, else the page's route: sent with each message; the quick actions of an
//   empty conversation follow it.
// - Events on the element (they bubble out of the shadow root): `vernis:open` (also when the panel
//   reopens itself on the next page of the same tab), `vernis:close`, and
//   `vernis:tool-completed` {toolName, status, summary, callId, conversationId} when a tool call ends
//   ("ok", "error" or "rejected"), so the host refreshes what a write changed.
// - `theme` attribute ("light", "dark", "auto") and the `--vernis-*` custom properties: assistant.css.
// - `layout` attribute: "overlay" (default: the open panel covers the page's right edge) or "push"
//   (the open side panel narrows the page instead: `<body>` gets a right margin of the panel's width,
//   so the host's own header controls stay in view; not in full screen, nor on a narrow screen).
// - `element.open()`, `element.close()`.
// The assistant's name and the quick actions of an empty conversation come from the server
// (`GET /api/assistant/config`); until they arrive, and if they cannot, it is "Vernis" with none.
// Shortcuts: Ctrl+/ (⌘/ on a Mac) opens and closes it; Escape closes the picker, then the panel.

import { defaultConfig, entityForRoute, fetchConfig, probeSession, quickActionsFor } from "./config.js";
import { Connection } from "./connection.js";
import { h, icon } from "./dom.js";
import { TokenRefresher, hostEvent, normalizePageContext, toolSummary } from "./host.js";
import { loadMarkdown } from "./markdown.js";
import { MessageList } from "./messages.js";
import { Picker } from "./picker.js";
import { Session } from "./session.js";

const BASE = new URL("./", import.meta.url);
const STORAGE_KEY = "vernis.assistant";
const MAX_CHARS = 8000;
// The counter shows from here on (90 % of the limit).
const COUNT_FROM = 7200;
const CONNECTION_TEXT = {
  connecting: "Connecting…",
  connected: "Connected",
  reconnecting: "Reconnecting…",
  offline: "Offline, retrying",
  "signed-out": "Signed out",
};

export class VernisAssistant extends HTMLElement {
  static observedAttributes = ["entity-type", "entity-id", "layout"];

  constructor() {
    super();
    /** Optional, older name of the host's `getToken`: `async () => jwt`. */
    this.tokenProvider = null;
    this.hostGetToken = null;
    this.givenPageContext = null;
    this.started = false;
    this.config = defaultConfig();
    // Whether `config` is the server's; while it is not, each (re)connection asks again.
    this.configLoaded = false;
    this.configRequest = null;
    this.configAgain = false;
    // The live socket's token, renewed before it expires (`authenticate`).
    this.tokens = new TokenRefresher(
      () => this.hostToken(),
      (token) => Boolean(this.connection && this.connection.connected && this.connection.send({ type: "authenticate", token })),
    );
    // A host may set these before this element's module ran (an inline script after the tag): the
    // values sit on the instance then, shadowing the class's accessors. Put them through the setters.
    for (const name of ["getToken", "pageContext"]) {
      if (Object.prototype.hasOwnProperty.call(this, name)) {
        const value = this[name];
        delete this[name];
        this[name] = value;
      }
    }
  }

  connectedCallback() {
    if (!this.shadowRoot) {
      this.build();
    }
    document.addEventListener("keydown", this.onDocumentKey);
    document.addEventListener("focusin", this.onDocumentFocus);
    window.addEventListener("resize", this.onResize);
    // After the host's own code in this task, which may set `getToken` right after adding the element.
    queueMicrotask(() => this.loadConfig());
    const saved = this.saved();
    if (saved.expanded) {
      this.setExpanded(true, { persist: false });
    }
    if (saved.open) {
      this.open({ focus: false });
    }
  }

  disconnectedCallback() {
    document.removeEventListener("keydown", this.onDocumentKey);
    document.removeEventListener("focusin", this.onDocumentFocus);
    window.removeEventListener("resize", this.onResize);
    this.updatePush();
    this.tokens.stop();
    if (this.connection) {
      this.connection.stop();
      this.connection = null;
      this.started = false;
    }
  }

  attributeChangedCallback(name) {
    if (name === "layout") {
      this.updatePush();
      return;
    }
    this.pageContextChanged();
  }

  /** `layout="push"`: while the side panel is open, the page is narrowed by its width. */
  updatePush() {
    if (!this.panel || !document.body) {
      return;
    }
    const wide = window.matchMedia("(min-width: 521px)").matches;
    const push = this.getAttribute("layout") === "push" && this.isOpen && !this.expanded && wide && this.isConnected;
    const body = document.body;
    if (push) {
      if (this.pushedFrom === undefined) {
        this.pushedFrom = body.style.marginRight;
        this.pushTransition = body.style.transition;
        if (!window.matchMedia("(prefers-reduced-motion: reduce)").matches) {
          body.style.transition = "margin-right 0.24s cubic-bezier(0.2, 0.7, 0.2, 1)";
        }
      }
      body.style.marginRight = getComputedStyle(this.panel).width;
      document.documentElement.setAttribute("data-vernis-pushed", "");
    } else if (this.pushedFrom !== undefined) {
      body.style.marginRight = this.pushedFrom;
      body.style.transition = this.pushTransition;
      this.pushedFrom = undefined;
      document.documentElement.removeAttribute("data-vernis-pushed");
    }
  }

  // --- what the host gives ---------------------------------------------------------------------

  /** The host's token source, `async () => jwt` (SPEC §11); see the top of this file. */
  get getToken() {
    return this.hostGetToken;
  }

  set getToken(provider) {
    this.hostGetToken = typeof provider === "function" ? provider : null;
    if (!this.shadowRoot || !this.isConnected) {
      return;
    }
    // Set after the element started: the configuration and the socket may have gone without it.
    this.loadConfig();
    if (this.connection && !this.connection.connected) {
      // Also out of "signed out": the host has a new way to get tokens.
      this.connection.signIn();
    }
  }

  /**
   * What the page shows, as sent with each message: the host's `pageContext` when it set one (its
   * route, else the page's), else the element's `entity-type` / `entity-id` attributes (or
   * `data-entity-*` on the element or `<body>`) with the page's route, else what the page's route
   * names by the server's route patterns (`pages` in the config).
   */
  get pageContext() {
    const given = this.givenPageContext;
    if (given) {
      return { route: location.pathname, ...given };
    }
    const context = { route: location.pathname };
    const body = document.body ? document.body.dataset : {};
    const type = this.getAttribute("entity-type") || this.dataset.entityType || body.entityType;
    const id = this.getAttribute("entity-id") || this.dataset.entityId || body.entityId;
    if (type && id) {
      context.entity_type = type;
      context.entity_id = id;
    } else {
      // Else the entity the route names, by the server's route patterns (as it reads them itself).
      const found = entityForRoute(this.config.pages || [], location.pathname);
      if (found) {
        context.entity_type = found.entityType;
        context.entity_id = found.entityId;
      }
    }
    return context;
  }

  set pageContext(value) {
    this.givenPageContext = normalizePageContext(value);
    this.pageContextChanged();
  }

  /** The page changed: an empty conversation shows the quick actions of the new page. */
  pageContextChanged() {
    if (this.messages && this.messages.empty) {
      this.showEmptyState();
    }
  }

  // --- set-up --------------------------------------------------------------------------------

  get serverOrigin() {
    return new URL(this.getAttribute("server") || BASE.href, location.href).origin;
  }

  build() {
    const shadow = this.attachShadow({ mode: "open" });
    const root = h("div", { class: "root", hidden: "" });
    const stylesheet = h("link", { rel: "stylesheet", href: new URL("assistant.css", BASE).href });
    // Shown once styled: no flash of an unstyled panel on the host page.
    stylesheet.addEventListener("load", () => (root.hidden = false));
    stylesheet.addEventListener("error", () => (root.hidden = false));

    this.launcherLabel = h("span", { class: "launcher-label" });
    this.launcher = h(
      "button",
      { type: "button", class: "launcher", "aria-controls": "vernis-panel", "aria-expanded": "false", "aria-keyshortcuts": "Control+/" },
      [icon("chat"), this.launcherLabel],
    );
    this.launcher.addEventListener("click", () => this.open());

    this.titleElement = h("h2", { id: "vernis-title", class: "title", dir: "auto" }, "New conversation");
    this.connText = h("span", { class: "conn-text" }, CONNECTION_TEXT.connecting);
    this.retryButton = h("button", { type: "button", class: "link-button conn-retry", hidden: "" }, "Retry now");
    this.retryButton.addEventListener("click", () => this.connection && this.connection.reconnectNow());
    this.conn = h("div", { class: "conn", "data-state": "connecting", role: "status" }, [
      h("span", { class: "conn-dot", "aria-hidden": "true" }),
      this.connText,
      this.retryButton,
    ]);
    this.nameElement = h("span", { class: "assistant-name" });
    this.subline = h("div", { class: "subline" }, [this.nameElement, h("span", { "aria-hidden": "true" }, "·"), this.conn]);
    this.pickerToggle = this.iconButton("list", "Conversations", "picker-toggle", () => this.togglePicker());
    this.pickerToggle.setAttribute("aria-expanded", "false");
    this.pickerToggle.setAttribute("aria-controls", "vernis-picker");
    this.newChatButton = this.iconButton("plus", "New chat", "new-chat", () => this.newChat());
    this.expandButton = this.iconButton("expand", "Expand to full screen", "expand", () => this.setExpanded(!this.expanded));
    this.expandButton.setAttribute("aria-pressed", "false");
    this.closeButton = this.iconButton("close", "Close assistant", "close", () => this.close());

    this.scriptedNote = h("p", { class: "scripted-note", role: "note", hidden: "" }, [
      h("strong", {}, "Demo mode: "),
      "answers come from a scripted model, not from a real AI. They are canned.",
    ]);

    this.log = h("div", { class: "log", role: "log", "aria-label": "Conversation", tabindex: "0" });
    this.picker = new Picker({
      open: (id) => this.pickConversation(id),
      create: () => this.newChat(),
      rename: (id, title) => this.session.renameConversation(id, title),
      remove: (id) => this.session.deleteConversation(id),
      more: (before) => this.session.listConversations(before),
      close: () => this.closePicker({ focus: true }),
    });

    this.input = h("textarea", {
      id: "vernis-input",
      class: "input",
      rows: "1",
      dir: "auto",
      // No `maxlength`: a long paste is kept whole (never cut silently) and the counter says how much is over.
      "aria-describedby": "vernis-hint vernis-counter",
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submit();
      }
    });
    this.input.addEventListener("input", () => {
      this.sizeInput();
      this.updateCounter();
    });
    this.sendButton = h("button", { type: "submit", class: "icon-button primary send", "aria-label": "Send", title: "Send" }, [icon("send")]);
    this.stopButton = h("button", { type: "button", class: "icon-button stop", "aria-label": "Stop the answer", title: "Stop", hidden: "" }, [icon("stop")]);
    this.stopButton.addEventListener("click", () => this.session.stop());
    const composer = h("form", { class: "composer", "aria-label": "Message the assistant" }, [
      h("label", { class: "sr-only", for: "vernis-input" }, "Message"),
      h("div", { class: "composer-row" }, [this.input, this.sendButton, this.stopButton]),
      h("div", { class: "composer-foot" }, [
        h("p", { id: "vernis-hint", class: "hint" }, "Enter to send · Shift+Enter for a new line"),
        (this.counter = h("p", { id: "vernis-counter", class: "counter", "aria-live": "polite", hidden: "" })),
      ]),
    ]);
    composer.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });

    this.panel = h(
      "section",
      { class: "panel", id: "vernis-panel", role: "dialog", "aria-modal": "false", "aria-labelledby": "vernis-title" },
      [
        h("div", { class: "header" }, [
          this.pickerToggle,
          h("div", { class: "heading" }, [this.titleElement, this.subline]),
          this.newChatButton,
          this.expandButton,
          this.closeButton,
        ]),
        this.scriptedNote,
        h("div", { class: "body" }, [this.picker.element, this.log]),
        composer,
      ],
    );
    // On the whole component, launcher included: right after Ctrl+/ opens the panel, focus may
    // still be on the launcher (the input takes it on the next frame).
    root.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.isOpen && !event.defaultPrevented) {
        event.preventDefault();
        if (this.picker.isOpen) {
          this.closePicker({ focus: true });
        } else if (this.expanded) {
          this.setExpanded(false);
        } else {
          this.close();
        }
      } else if (event.key === "Tab" && this.isModal) {
        this.cycleFocus(event);
      }
    });

    root.append(this.launcher, this.panel);
    shadow.append(stylesheet, root);

    const saved = this.saved();
    this.messages = new MessageList(this.log, (target, text) => (target.textContent = text), {
      confirm: (id, approved) => this.session.confirmTool(id, approved),
      feedback: (id, rating) => this.session.feedback(id, rating),
      regenerate: () => this.regenerate(),
      edit: (messageId, content) => this.editMessage(messageId, content),
    });
    this.session = new Session(this, (command) => (this.connection ? this.connection.send(command) : false), {
      conversationId: saved.conversationId || null,
      pending: saved.pending === true,
    });
    this.onDocumentKey = (event) => {
      if ((event.ctrlKey || event.metaKey) && !event.altKey && event.key === "/") {
        event.preventDefault();
        if (this.isOpen) {
          this.close();
        } else {
          this.open();
        }
      } else if (event.key === "Escape" && this.isModal && event.target !== this && !event.defaultPrevented) {
        // Full screen is a modal dialog: Escape collapses it wherever focus was.
        event.preventDefault();
        this.setExpanded(false);
      }
    };
    this.onResize = () => this.updatePush();
    // Full screen covers the host page: focus does not go behind it (a click, a script, Tab).
    this.onDocumentFocus = (event) => {
      if (this.isModal && event.target !== this) {
        this.focusFirst();
      }
    };
    // The name this tab last had from the server: no "Vernis" flashing on each page of the host.
    this.showName(typeof saved.name === "string" && saved.name ? saved.name : this.config.name);
    this.updateComposer();
  }

  iconButton(name, label, className, onClick) {
    const button = h("button", { type: "button", class: `icon-button ${className}`, "aria-label": label, title: label }, [icon(name)]);
    button.addEventListener("click", onClick);
    return button;
  }

  /** Connect (once): the markdown renderer first, so that the history renders as markdown. */
  async start() {
    if (this.started) {
      return;
    }
    this.started = true;
    const server = this.serverOrigin;
    const render = await loadMarkdown(BASE.href, [location.origin, server]);
    this.messages.setRenderer(render);
    const socketBase = `${server.replace(/^http/, "ws")}/api/assistant/ws`;
    this.connection = new Connection({
      url: () => socketBase + this.session.socketQuery(),
      protocols: async () => {
        const token = await this.hostToken();
        this.socketToken = token;
        this.tokens.schedule(token);
        return token ? ["vernis.v1", `vernis.token.${token}`] : ["vernis.v1"];
      },
      renewable: () => this.tokenSource() !== null,
      // A socket refused before it opened: was it this token (or cookie)? The browser cannot tell.
      probe: () => {
        const token = this.socketToken || null;
        if (!token && server !== location.origin) {
          return "unknown";
        }
        return probeSession(server, token);
      },
    });
    this.connection.addEventListener("event", (event) => {
      this.session.handle(event.detail);
      this.updateComposer();
    });
    this.connection.addEventListener("state", (event) => this.connectionState(event.detail));
    this.connection.start();
  }

  tokenSource() {
    return this.hostGetToken || (typeof this.tokenProvider === "function" ? this.tokenProvider : null);
  }

  /** The host's token (`getToken()`, SPEC §11), or null: the `vernis_token` cookie goes instead. */
  async hostToken() {
    const provider = this.tokenSource();
    return provider ? (await provider.call(this)) || null : null;
  }

  // --- the server's configuration -----------------------------------------------------------------

  /** Ask the server for the name and the quick actions, once at a time, until it has answered. */
  loadConfig() {
    if (this.configLoaded) {
      return;
    }
    if (!this.tokenSource() && this.serverOrigin !== location.origin) {
      // Cookies never go cross-origin: this needs the host's getToken, whose setter calls back.
      return;
    }
    if (this.configRequest) {
      // The token source changed while a request was out: ask again once it is done.
      this.configAgain = true;
      return;
    }
    this.configAgain = false;
    this.configRequest = this.hostToken()
      .then((token) => fetchConfig(this.serverOrigin, token))
      .then(
        (config) => {
          this.configLoaded = true;
          this.applyConfig(config);
        },
        (error) => console.warn("Vernis: no assistant configuration, so no quick actions", error),
      )
      .finally(() => {
        this.configRequest = null;
        if (this.configAgain) {
          this.loadConfig();
        }
      });
  }

  applyConfig(config) {
    this.config = config;
    this.showName(config.name);
    this.persist({ name: config.name });
    this.scriptedNote.hidden = !config.scripted;
    if (this.messages.empty) {
      this.showEmptyState();
    }
  }

  /** (Re)draw the empty conversation's welcome; focus on a quick action that went goes to the input. */
  showEmptyState() {
    const hadFocus = this.messages.empty !== null && this.messages.empty.contains(this.shadowRoot.activeElement);
    this.messages.showEmpty(this.emptyState());
    if (hadFocus) {
      this.input.focus();
    }
  }

  showName(name) {
    this.launcherLabel.textContent = `Ask ${name}`;
    this.launcher.title = `Ask ${name} (Ctrl+/)`;
    this.nameElement.textContent = name;
    this.input.placeholder = `Message ${name}…`;
  }

  // --- open, close, expand -----------------------------------------------------------------------

  get isOpen() {
    return this.panel.hasAttribute("data-open");
  }

  get expanded() {
    return this.panel.hasAttribute("data-expanded");
  }

  open({ focus = true } = {}) {
    const wasOpen = this.isOpen;
    this.panel.setAttribute("data-open", "");
    this.launcher.setAttribute("aria-expanded", "true");
    this.persist({ open: true });
    this.start();
    if (focus) {
      // After the panel is visible (it is `visibility: hidden` while closed).
      requestAnimationFrame(() => this.input.focus());
    }
    this.updatePush();
    if (!wasOpen) {
      this.dispatchEvent(hostEvent("vernis:open"));
    }
  }

  close() {
    const wasOpen = this.isOpen;
    this.closePicker();
    this.panel.removeAttribute("data-open");
    this.launcher.setAttribute("aria-expanded", "false");
    this.persist({ open: false });
    this.launcher.focus();
    this.updatePush();
    if (wasOpen) {
      this.dispatchEvent(hostEvent("vernis:close"));
    }
  }

  /** Open and full screen: a modal dialog (focus kept inside, Escape collapses it). */
  get isModal() {
    return this.isOpen && this.expanded;
  }

  /** The focusable elements of the panel, in order, that are shown now. */
  focusables() {
    const selector = 'button:not([disabled]), textarea:not([disabled]), input:not([disabled]), a[href], summary, [tabindex]:not([tabindex="-1"])';
    return Array.from(this.panel.querySelectorAll(selector)).filter(
      (element) => element.getClientRects().length > 0 && !element.closest("[hidden], [inert]"),
    );
  }

  focusFirst() {
    (this.isOpen ? this.input : this.launcher).focus();
  }

  /** Tab from the last focusable goes to the first, Shift+Tab from the first to the last. */
  cycleFocus(event) {
    const items = this.focusables();
    if (!items.length) {
      return;
    }
    const active = this.shadowRoot.activeElement;
    const index = items.indexOf(active);
    if (event.shiftKey && (index <= 0)) {
      event.preventDefault();
      items[items.length - 1].focus();
    } else if (!event.shiftKey && (index === -1 || index === items.length - 1)) {
      event.preventDefault();
      items[0].focus();
    }
  }

  setExpanded(expanded, { persist = true } = {}) {
    const was = this.expanded;
    if (expanded && !was) {
      // Given back on collapse: where focus was when full screen began.
      this.focusBeforeExpand = this.shadowRoot.activeElement || document.activeElement;
    }
    this.panel.toggleAttribute("data-expanded", expanded);
    this.panel.setAttribute("aria-modal", String(expanded));
    this.updatePush();
    this.expandButton.setAttribute("aria-pressed", String(expanded));
    const label = expanded ? "Collapse to side panel" : "Expand to full screen";
    this.expandButton.setAttribute("aria-label", label);
    this.expandButton.title = label;
    this.expandButton.replaceChildren(icon(expanded ? "collapse" : "expand"));
    if (persist) {
      this.persist({ expanded });
    }
    if (was && !expanded && this.isOpen) {
      const back = this.focusBeforeExpand;
      this.focusBeforeExpand = null;
      const inside = back && back.isConnected && (this.shadowRoot.contains(back) ? back.getClientRects().length > 0 : true);
      (inside && back !== document.body ? back : this.expandButton).focus();
    }
  }

  // --- the picker --------------------------------------------------------------------------------

  togglePicker() {
    if (this.picker.isOpen) {
      this.closePicker({ focus: true });
    } else {
      this.openPicker();
    }
  }

  openPicker() {
    this.picker.open();
    this.panel.setAttribute("data-picker", "");
    this.pickerToggle.setAttribute("aria-expanded", "true");
    this.focusPickerOnLoad = true;
    this.picker.newButton.focus();
    this.session.listConversations();
  }

  closePicker({ focus = false } = {}) {
    if (!this.picker.isOpen) {
      return;
    }
    this.picker.close();
    this.panel.removeAttribute("data-picker");
    this.pickerToggle.setAttribute("aria-expanded", "false");
    if (focus) {
      this.pickerToggle.focus();
    }
  }

  pickConversation(conversationId) {
    if (conversationId !== this.session.conversationId) {
      if (!this.session.loadConversation(conversationId)) {
        return;
      }
    }
    if (!this.expanded) {
      this.closePicker();
    }
    this.input.focus();
  }

  newChat() {
    if (this.session.newConversation()) {
      this.persist({ conversationId: null, pending: true });
      if (!this.expanded) {
        this.closePicker();
      }
      this.input.focus();
    }
  }

  // --- sending -----------------------------------------------------------------------------------

  submit() {
    if (this.send(this.input.value)) {
      this.input.value = "";
      this.sizeInput();
      this.updateCounter();
    }
    this.updateComposer();
  }

  /** Near the limit: "7,950 / 8,000"; over it: by how much, and Send waits until it is shorter. */
  updateCounter() {
    const count = charCount(this.input.value);
    const over = count > MAX_CHARS;
    this.counter.hidden = count < COUNT_FROM;
    this.counter.toggleAttribute("data-over", over);
    this.counter.textContent = over
      ? `${count.toLocaleString("en-US")} / ${MAX_CHARS.toLocaleString("en-US")} characters: ${(count - MAX_CHARS).toLocaleString("en-US")} too many. Shorten the message to send it.`
      : `${count.toLocaleString("en-US")} / ${MAX_CHARS.toLocaleString("en-US")} characters`;
    this.input.toggleAttribute("aria-invalid", over);
    this.updateComposer();
  }

  /** Refused for the rate limit: Send comes back when `retryAfterMs` has passed, counted down. */
  rateLimited(retryAfterMs, note) {
    clearInterval(this.rateTimer);
    this.rateLimitedUntil = Date.now() + Math.max(0, retryAfterMs);
    const tick = () => {
      const left = Math.ceil((this.rateLimitedUntil - Date.now()) / 1000);
      if (left <= 0) {
        clearInterval(this.rateTimer);
        this.rateLimitedUntil = 0;
        note.textContent = "Not sent: too many messages at once. You can send it again now.";
        this.updateComposer();
        return;
      }
      note.textContent = `Not sent: too many messages at once. You can send again in ${left} s.`;
    };
    tick();
    this.rateTimer = setInterval(tick, 1000);
    this.updateComposer();
  }

  /** Send a message with the page's context; false when it cannot go now (the text stays). */
  send(text) {
    const content = text.trim();
    if (!content || this.session.busy) {
      return false;
    }
    if (charCount(content) > MAX_CHARS) {
      this.updateCounter();
      this.counter.hidden = false;
      return false;
    }
    if (this.rateLimitedUntil && Date.now() < this.rateLimitedUntil) {
      return false;
    }
    if (!this.session.userMessage(content, this.pageContext)) {
      this.messages.notice("Not connected: your message was not sent. It will be possible again once reconnected.", { kind: "error" });
      return false;
    }
    this.messages.addUser(content, { pending: true });
    this.updateComposer();
    return true;
  }

  sizeInput() {
    this.input.style.height = "auto";
    this.input.style.height = `${Math.min(this.input.scrollHeight, 200)}px`;
  }

  updateComposer() {
    const busy = this.session.busy;
    const stopHadFocus = this.shadowRoot.activeElement === this.stopButton;
    this.stopButton.hidden = !busy;
    this.sendButton.hidden = busy;
    const waiting = Boolean(this.rateLimitedUntil && Date.now() < this.rateLimitedUntil);
    const tooLong = this.counter ? this.counter.hasAttribute("data-over") : false;
    this.sendButton.disabled = !(this.connection && this.connection.connected) || waiting || tooLong;
    this.panel.toggleAttribute("data-busy", busy);
    if (stopHadFocus && !busy) {
      this.input.focus();
    }
  }

  emptyState() {
    const { general, page } = quickActionsFor(this.config.quickActions, this.pageContext.entity_type);
    const button = (action, extra = "") => {
      const element = h("button", { type: "button", class: `quick-action ${extra}`.trim() }, action.label);
      element.addEventListener("click", () => {
        if (this.send(action.prompt)) {
          this.updateComposer();
        }
        // The button is gone with the empty state: focus goes on in the composer, not to <body>.
        this.input.focus();
      });
      return h("li", {}, element);
    };
    return h("div", { class: "empty" }, [
      h("div", { class: "empty-mark", "aria-hidden": "true" }, icon("chat")),
      h("h3", { class: "empty-title" }, "How can I help?"),
      h("p", { class: "empty-text" }, "Ask me anything about your work here. I ask before changing anything."),
      page.length ? h("ul", { class: "quick-actions page-actions", "aria-label": "About this page" }, page.map((action) => button(action, "page"))) : null,
      general.length ? h("ul", { class: "quick-actions", "aria-label": "Quick actions" }, general.map((action) => button(action))) : null,
    ]);
  }

  // --- connection state ----------------------------------------------------------------------------

  connectionState({ state }) {
    const previous = this.conn.getAttribute("data-state");
    this.conn.setAttribute("data-state", state);
    this.connText.textContent = CONNECTION_TEXT[state] || state;
    this.retryButton.hidden = !(state === "reconnecting" || state === "offline");
    this.panel.setAttribute("data-connection", state);
    if (state === "connected" && previous !== "connected") {
      this.loadConfig();
      this.session.connected();
      if (this.picker.isOpen) {
        this.session.listConversations();
      }
    }
    if (state === "signed-out") {
      this.messages.notice("Your session has ended. Sign in again to keep using the assistant.", { kind: "error" });
    }
    this.updateComposer();
  }

  // --- the session's view ------------------------------------------------------------------------

  reset(conversationId, title, { rolledOverFrom, carried }) {
    this.messages.clear();
    this.setTitle(title);
    this.picker.setCurrent(conversationId);
    // A pending conversation stays pending across pages only if the user asked for a new chat.
    this.persist(conversationId === null ? { conversationId } : { conversationId, pending: false });
    if (rolledOverFrom) {
      this.messages.notice("That conversation was full, so it continues here. The assistant still has the earlier context.");
    }
    if (carried) {
      this.messages.addUser(carried, { pending: true });
    }
  }

  historyMessage(message) {
    this.messages.historyMessage(message);
  }

  historyEnd() {
    if (this.messages.isEmpty) {
      this.messages.showEmpty(this.emptyState());
    }
    this.messages.scrollToBottom();
  }

  resumed(conversationId, title) {
    this.setTitle(title);
  }

  conversationChanged(conversationId) {
    this.picker.setCurrent(conversationId);
    this.persist({ conversationId, pending: false });
    if (this.picker.isOpen) {
      // The new conversation belongs at the top of the list.
      this.session.listConversations();
    }
  }

  assistantStart(messageId) {
    this.messages.startAnswer(messageId, { streaming: true });
  }

  textDelta(messageId, text) {
    this.messages.appendText(this.messages.answer(messageId), text);
  }

  toolStarted(messageId, event) {
    this.messages.toolStarted(messageId, event);
  }

  toolCompleted(messageId, event) {
    this.messages.toolCompleted(messageId, event);
    if (event.status !== "needs_confirmation") {
      // Waiting for approval is not an end: the host hears of the call once it has run (or not).
      this.dispatchEvent(
        hostEvent("vernis:tool-completed", {
          toolName: event.tool_name,
          status: event.status,
          summary: toolSummary(event.status, event.result),
          callId: event.call_id,
          conversationId: this.session.conversationId,
        }),
      );
    }
  }

  confirmationRequired(messageId, event) {
    this.messages.confirmationRequired(messageId, event);
  }

  assistantEnd(messageId, stopped) {
    this.messages.finish(this.messages.answer(messageId), { stopped });
  }

  titleUpdated(conversationId, title, current) {
    if (current) {
      this.setTitle(title);
    }
    this.picker.updateTitle(conversationId, title);
  }

  conversationList(conversations, nextBefore, mode) {
    this.picker.setConversations(conversations, nextBefore, mode);
    if (this.focusPickerOnLoad && this.picker.isOpen) {
      this.focusPickerOnLoad = false;
      if (this.shadowRoot.activeElement === this.picker.newButton) {
        this.picker.focus();
      }
    }
  }

  userMessageAccepted() {
    this.messages.acceptPendingUser();
  }

  userMessageRefused(content, event) {
    const note = this.messages.markLastUserRefused(event.message);
    if (event.code === "rate_limited" && typeof event.retry_after_ms === "number" && note) {
      this.rateLimited(event.retry_after_ms, note);
    }
    if (!this.input.value.trim()) {
      this.input.value = content;
      this.sizeInput();
    }
  }

  /** A message sent and not yet answered, drawn again after the view was redrawn. */
  userMessagePending(content) {
    this.messages.addUser(content, { pending: true });
  }

  userMessageResent(content) {
    const users = this.log.querySelectorAll(".msg.user .bubble");
    const last = users[users.length - 1];
    if (!last || last.textContent !== content) {
      this.messages.addUser(content, { pending: true });
    }
  }

  answerError(messageId, event) {
    // A failure of the model or the server (not of the user's message): Retry asks again.
    const retryable = ["llm_unavailable", "llm_not_configured", "unavailable", "internal"].includes(event.code);
    this.messages.answerError(messageId, event.message, retryable ? () => this.regenerate() : null);
  }

  /** Send an edit of the last user message (`edit_message`); false when it cannot go now. */
  editMessage(messageId, content) {
    if (this.session.busy) {
      return false;
    }
    if (charCount(content) > MAX_CHARS) {
      this.messages.notice(`A message can be at most ${MAX_CHARS.toLocaleString("en-US")} characters.`, { kind: "error" });
      return false;
    }
    if (!this.session.editMessage(messageId, content)) {
      this.messages.notice("Not connected: your edit was not sent.", { kind: "error" });
      return false;
    }
    this.updateComposer();
    return true;
  }

  editRefused(content, event) {
    this.messages.editRefused();
    this.messages.notice(event.message, { kind: "error" });
    this.updateComposer();
  }

  /** Write the last answer again (`regenerate`): the failed or unwanted one stays as an earlier version. */
  regenerate() {
    if (this.session.busy || !this.session.regenerate()) {
      return false;
    }
    this.updateComposer();
    return true;
  }

  commandError(event) {
    this.messages.commandFailed();
    this.messages.notice(event.message, { kind: "error" });
  }

  setTitle(title) {
    this.titleElement.textContent = title || "New conversation";
  }

  // --- what survives a page change (same tab) ------------------------------------------------------

  saved() {
    try {
      return JSON.parse(sessionStorage.getItem(STORAGE_KEY) || "{}") || {};
    } catch {
      return {};
    }
  }

  persist(changes) {
    try {
      sessionStorage.setItem(STORAGE_KEY, JSON.stringify({ ...this.saved(), ...changes }));
    } catch {
      // Storage may be disabled; the panel works without it.
    }
  }
}

/** Characters as the server counts them (code points, not UTF-16 units). */
function charCount(text) {
  let count = 0;
  for (const _ of text) {
    count += 1;
  }
  return count;
}

export function define() {
  if (!customElements.get("vernis-assistant")) {
    customElements.define("vernis-assistant", VernisAssistant);
  }
}

/** Define the element and add one to the page unless the page has its own. */
export function mount() {
  define();
  if (!document.querySelector("vernis-assistant")) {
    document.body.append(document.createElement("vernis-assistant"));
  }
}

define();
