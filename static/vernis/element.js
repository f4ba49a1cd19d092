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
//   ("ok", "error", "rejected" or "expired"; not while a write waits for approval or for a reviewer),
//   so the host refreshes what a write changed.
// - `theme` attribute ("light", "dark", "auto") and the `--vernis-*` custom properties: assistant.css.
// - `layout` attribute: "overlay" (default: the open panel covers the page's right edge), "push"
//   (the open side panel narrows the page instead: `<body>` gets a right margin of the panel's width,
//   so the host's own header controls stay in view; not in full screen, nor on a narrow screen), or
//   "float" (a rounded card with a shadow, inset from the corner above the launcher; the page is
//   left as it is; full width on a narrow screen).
// - `element.onSignedOut = () => ...`: called when the server ends the session and no new token
//   can be had (4401), e.g. to send the user to the host's sign-in page; with `getToken`, the panel
//   also offers "Sign in again", which asks it anew.
// - `element.open()`, `element.close()`; `element.send(text)` sends a message as if typed (false
//   when it cannot go now), `element.prefill(text)` puts text in the input without sending it.
// - The host page's own tools (SPEC §18, clienttools.js): `element.registerTool({name, description,
//   parameters, write, handler})`, `element.unregisterTool(name)`, and `element.navigate = (url) =>
//   ...` (also how relative links in UI blocks open), which gives the assistant a `navigate` tool
//   limited to the server's `navigable` routes; `element.registerRenderer(kind, render)`.
// The assistant's name and the quick actions of an empty conversation come from the server
// (`GET /api/assistant/config`); until they arrive, and if they cannot, it is "Vernis" with none.
// So do, when the server gives them, its `avatar_url` and the empty conversation's `greeting`; else
// the avatar is the name's monogram and the greeting "Hi, I'm <name>." over "How can I help?".
// Shortcuts: Ctrl+/ (⌘/ on a Mac) opens and closes it; Escape closes the picker, then the panel.

import { Composer, dataUrl, fetchAttachment } from "./attachments.js";
import { defaultConfig, entityForRoute, fetchConfig, probeSession, quickActionsFor } from "./config.js";
import { ClientTools } from "./clienttools.js";
import { Connection } from "./connection.js";
import { avatar } from "./avatar.js";
import { h, icon } from "./dom.js";
import { TokenRefresher, hostEvent, normalizePageContext, toolSummary } from "./host.js";
import { loadMarkdown } from "./markdown.js";
import { MessageList, prepareDates } from "./messages.js";
import { Picker } from "./picker.js";
import { Questions } from "./questions.js";
import { appendReasoning } from "./reasoning.js";
import { ReviewsView } from "./reviews.js";
import { Session } from "./session.js";

const BASE = new URL("./", import.meta.url);
// The events that carry a streaming answer's pieces.
const STREAMED = new Set(["text_delta", "reasoning_delta"]);
const STORAGE_KEY = "vernis.assistant";
const MAX_CHARS = 8000;
// The general quick actions an empty conversation shows at first (the rest behind "More").
const QUICK_ACTIONS_SHOWN = 4;
// The counter shows from here on (90 % of the limit).
const COUNT_FROM = 7200;
const CONNECTION_TEXT = {
  connecting: "Connecting…",
  connected: "Connected",
  reconnecting: "Reconnecting…",
  offline: "Offline, retrying",
  unavailable: "Can't reach the assistant, retrying",
  "signed-out": "Signed out",
};
// While unavailable because the host page's getToken failed (not the server).
const NO_TOKEN_TEXT = "Can't get a session from this page, retrying";

export class VernisAssistant extends HTMLElement {
  static observedAttributes = ["entity-type", "entity-id", "layout"];

  constructor() {
    super();
    /** Optional, older name of the host's `getToken`: `async () => jwt`. */
    this.tokenProvider = null;
    this.hostGetToken = null;
    this.hostSignedOut = null;
    // The "Your session has ended" notice while signed out (one, gone once connected again).
    this.signedOutNotice = null;
    this.givenPageContext = null;
    // The host's UI block renderers (`registerRenderer`), kept from before the panel is built.
    this.renderers = new Map();
    // The host page's tools (SPEC §18), declared on every (re)connection.
    this.clientTools = new ClientTools((command) => Boolean(this.connection && this.connection.connected && this.connection.send(command)));
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
    for (const name of ["getToken", "pageContext", "navigate", "onSignedOut"]) {
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
    this.panelSize.observe(this.panel);
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
    this.panelSize.disconnect();
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
      body.style.marginRight = `${this.panel.getBoundingClientRect().width}px`;
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

  /** The host's callback when the server ends the session and no new token can be had (4401):
   * `() => void`, e.g. to send the user to the host's sign-in page. */
  get onSignedOut() {
    return this.hostSignedOut;
  }

  set onSignedOut(callback) {
    this.hostSignedOut = typeof callback === "function" ? callback : null;
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
      return { route: location.pathname.slice(0, 256), ...given };
    }
    // The server takes a path of at most 256 characters.
    const context = { route: location.pathname.slice(0, 256) };
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

  /** The host's router, `(url) => void` (SPEC §18): opens relative links, and is the `navigate` tool. */
  get navigate() {
    return this.clientTools.navigateTo;
  }

  set navigate(navigate) {
    this.clientTools.setNavigate(navigate);
  }

  /** Host API (SPEC §18): a tool of this page the assistant may call; see clienttools.js. */
  registerTool(tool) {
    this.clientTools.register(tool);
  }

  unregisterTool(name) {
    this.clientTools.unregister(name);
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
      [icon("chat"), icon("close"), this.launcherLabel],
    );
    // A toggle: with layout="float" it stays below the open card, as its close button.
    this.launcher.addEventListener("click", () => (this.isOpen ? this.close() : this.open()));

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
    // Reviewers only (the server's config says `reviewer`): the writes waiting for their review.
    this.reviewsCount = h("span", { class: "reviews-count", hidden: "" });
    this.reviewsToggle = this.iconButton("review", "Reviews", "reviews-toggle", () => this.toggleReviews());
    this.reviewsToggle.append(this.reviewsCount);
    this.reviewsToggle.setAttribute("aria-expanded", "false");
    this.reviewsToggle.setAttribute("aria-controls", "vernis-reviews");
    this.reviewsToggle.hidden = true;
    this.reviews = new ReviewsView(
      {
        answer: (reviewId, approved, note) => this.session.reviewTool(reviewId, approved, note),
        close: () => this.closeReviews({ focus: true }),
      },
      (count) => {
        this.reviewsCount.textContent = String(count);
        this.reviewsCount.hidden = count === 0;
        this.reviewsToggle.setAttribute("aria-label", count ? `Reviews (${count} waiting)` : "Reviews");
      },
    );
    this.newChatButton = this.iconButton("plus", "New chat", "new-chat", () => this.newChat());
    this.expandButton = this.iconButton("expand", "Expand to full screen", "expand", () => this.setExpanded(!this.expanded));
    this.expandButton.setAttribute("aria-pressed", "false");
    this.closeButton = this.iconButton("close", "Close assistant", "close", () => this.close());

    const dismissNote = h("button", { type: "button", class: "icon-button small dismiss", "aria-label": "Dismiss this note", title: "Dismiss" }, [icon("close")]);
    this.scriptedNote = h("div", { class: "scripted-note", role: "note", hidden: "" }, [
      h("p", {}, [h("strong", {}, "Scripted answers: "), "answers come from a scripted model, not from a real AI. They are canned."]),
      dismissNote,
    ]);
    dismissNote.addEventListener("click", () => {
      // Gone for the rest of the tab's session (the next pages of the host included).
      this.scriptedNote.hidden = true;
      this.persist({ scriptedNoteDismissed: true });
      this.input.focus();
    });

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
    // Files for the next message (SPEC §21): the attach button, a paste, or a drop on the panel.
    this.files = new Composer({ server: () => this.serverOrigin, token: () => this.hostToken(), changed: () => this.updateComposer() });
    this.input.addEventListener("paste", (event) => {
      const files = Array.from((event.clipboardData && event.clipboardData.files) || []);
      if (files.length) {
        event.preventDefault();
        this.files.add(files);
      }
    });
    this.sendButton = h("button", { type: "submit", class: "icon-button primary send", "aria-label": "Send", title: "Send" }, [icon("send")]);
    this.stopButton = h("button", { type: "button", class: "icon-button stop", "aria-label": "Stop the answer", title: "Stop", hidden: "" }, [icon("stop")]);
    this.stopButton.addEventListener("click", () => this.session.stop());
    const composer = h("form", { class: "composer", "aria-label": "Message the assistant" }, [
      h("label", { class: "sr-only", for: "vernis-input" }, "Message"),
      this.files.element,
      h("div", { class: "composer-row" }, [this.files.button, this.input, this.sendButton, this.stopButton]),
      h("div", { class: "composer-foot" }, [
        (this.hint = h("p", { id: "vernis-hint", class: "hint" }, "Enter to send · Shift+Enter for a new line")),
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
          this.reviewsToggle,
          this.newChatButton,
          this.expandButton,
          this.closeButton,
        ]),
        this.scriptedNote,
        h("div", { class: "body" }, [this.picker.element, this.reviews.element, this.log]),
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
    shadow.append(stylesheet, h("link", { rel: "stylesheet", href: new URL("attachments.css", BASE).href }), root);
    const dragged = (event) => Boolean(event.dataTransfer) && Array.from(event.dataTransfer.types || []).includes("Files");
    this.panel.addEventListener("dragover", (event) => {
      if (dragged(event)) {
        event.preventDefault();
        event.dataTransfer.dropEffect = "copy";
        this.panel.setAttribute("data-dropping", "");
      }
    });
    this.panel.addEventListener("dragleave", (event) => {
      if (!this.panel.contains(event.relatedTarget)) {
        this.panel.removeAttribute("data-dropping");
      }
    });
    this.panel.addEventListener("drop", (event) => {
      this.panel.removeAttribute("data-dropping");
      if (dragged(event)) {
        event.preventDefault();
        this.files.add(Array.from(event.dataTransfer.files || []));
      }
    });

    const saved = this.saved();
    this.messages = new MessageList(this.log, (target, text) => (target.textContent = text), {
      // A sent message's files (SPEC §21): images drawn from the server, any file opened by a click.
      attachment: (id) => this.hostToken().then((token) => fetchAttachment(this.serverOrigin, token, id)).then(dataUrl),
      openAttachment: (attachment) => this.openAttachment(attachment),
      confirm: (id, approved) => this.session.confirmTool(id, approved),
      feedback: (id, rating, comment) => this.session.feedback(id, rating, comment),
      regenerate: () => this.regenerate(),
      edit: (messageId, content) => this.editMessage(messageId, content),
      // A relative link in a UI block: the host page routes it when it set `el.navigate`.
      navigate: (url) => {
        if (typeof this.navigate !== "function") {
          return false;
        }
        this.navigate(url);
        return true;
      },
    });
    this.messages.renderers = this.renderers;
    this.messages.questions = new Questions(this.messages, (id, answers, cancelled) => this.session.answerQuestion(id, answers, cancelled));
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
    // The push margin follows the panel's own width as it changes: read once when full screen
    // collapsed, it was the width the panel still had then (the whole window), and it stayed so.
    this.panelSize = new ResizeObserver(() => this.updatePush());
    // Full screen covers the host page: focus does not go behind it (a click, a script, Tab).
    this.onDocumentFocus = (event) => {
      if (this.isModal && event.target !== this) {
        this.focusFirst();
      }
    };
    // The name this tab last had from the server: no "Vernis" flashing on each page of the host.
    this.showName(typeof saved.name === "string" && saved.name ? saved.name : this.config.name);
    this.messages.setIdentity(this.identity());
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
    // Images load from the Vernis server and the configured origins only (not the host page's own
    // unless it is listed): an image is a request to wherever the model pointed it.
    const render = await loadMarkdown(BASE.href, () => [server, ...this.config.imageOrigins]);
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
      if (event.detail.type === "client_tool_call") {
        this.clientTools.run(event.detail);
        return;
      }
      this.session.handle(event.detail);
      // A streamed piece of text changes nothing the composer shows (its buttons follow the
      // session's state, which other events change): not redone for each of an answer's thousands.
      if (!STREAMED.has(event.detail.type)) {
        this.updateComposer();
      }
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
    const imagesBefore = this.config.imageOrigins.join(" ");
    this.config = config;
    this.clientTools.setRoutes(config.navigable);
    if (config.imageOrigins.join(" ") !== imagesBefore && this.messages) {
      // What was rendered before the configuration arrived, again with its image origins.
      this.messages.setRenderer(this.messages.render);
    }
    this.showName(config.name);
    this.messages.setIdentity(this.identity());
    this.persist({ name: config.name });
    this.scriptedNote.hidden = !config.scripted || Boolean(this.saved().scriptedNoteDismissed);
    this.reviewsToggle.hidden = !config.reviewer;
    if (config.reviewer && this.connection && this.connection.connected) {
      this.session.listReviews();
    }
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

  /** Who answers, as the messages show it: the name, and the avatar's image when it may load. */
  identity() {
    return { name: this.nameElement.textContent || this.config.name, avatarUrl: this.avatarSource() };
  }

  /** The configured avatar's URL when it is on the server's origin or an image origin, else "". */
  avatarSource() {
    if (!this.config.avatarUrl) {
      return "";
    }
    try {
      const url = new URL(this.config.avatarUrl, this.serverOrigin);
      return url.origin === this.serverOrigin || this.config.imageOrigins.includes(url.origin) ? url.href : "";
    } catch {
      return "";
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
    prepareDates();
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
    this.closeReviews();
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

  // --- the Reviews view (reviewers) ---------------------------------------------------------------

  toggleReviews() {
    if (this.reviews.isOpen) {
      this.closeReviews({ focus: true });
    } else {
      this.openReviews();
    }
  }

  openReviews() {
    this.closePicker();
    this.reviews.open();
    this.panel.setAttribute("data-reviews", "");
    this.reviewsToggle.setAttribute("aria-expanded", "true");
    this.session.listReviews();
    this.reviews.element.querySelector("h3").setAttribute("tabindex", "-1");
    this.reviews.element.querySelector("h3").focus();
  }

  closeReviews({ focus = false } = {}) {
    if (!this.reviews.isOpen) {
      return;
    }
    this.reviews.close();
    this.panel.removeAttribute("data-reviews");
    this.reviewsToggle.setAttribute("aria-expanded", "false");
    if (focus) {
      this.reviewsToggle.focus();
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
    this.input.toggleAttribute("aria-invalid", over);
    this.updateComposer();
    if (this.counter.hidden) {
      // Numbers are formatted only when shown: the first toLocaleString of a page loads its
      // locale's data (tens of milliseconds, at the first key typed or the first message sent).
      return;
    }
    this.counter.textContent = over
      ? `${count.toLocaleString("en-US")} / ${MAX_CHARS.toLocaleString("en-US")} characters: ${(count - MAX_CHARS).toLocaleString("en-US")} too many. Shorten the message to send it.`
      : `${count.toLocaleString("en-US")} / ${MAX_CHARS.toLocaleString("en-US")} characters`;
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

  /**
   * Host API (SPEC §18): render UI blocks of `kind` (a toolkit's own, e.g. "crm.call_transcript")
   * with `render(data, container)`; blocks already shown are drawn again with it.
   */
  registerRenderer(kind, render) {
    if (typeof kind !== "string" || !kind || typeof render !== "function") {
      throw new TypeError("registerRenderer(kind, render): a kind name and a function");
    }
    this.renderers.set(kind, render);
    if (this.messages) {
      this.messages.registerRenderer(kind, render);
    }
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
    if (this.files.uploading) {
      return false;
    }
    if (!this.session.userMessage(content, this.pageContext, this.files.ids())) {
      this.messages.notice("Not connected: your message was not sent. It will be possible again once reconnected.", { kind: "error" });
      return false;
    }
    this.messages.addUser(content, { pending: true, attachments: this.files.sent() });
    this.messages.showThinking();
    this.files.clear();
    this.persist({ sent: true });
    this.sentBefore = true;
    this.updateComposer();
    return true;
  }

  /** Download one of the member's files (a click on it in the conversation). */
  async openAttachment(attachment) {
    try {
      const blob = await fetchAttachment(this.serverOrigin, await this.hostToken(), attachment.attachment_id);
      const link = h("a", { href: URL.createObjectURL(blob), download: attachment.name, hidden: "" });
      this.shadowRoot.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
    } catch (error) {
      this.messages.notice(`${attachment.name} could not be opened.`, { kind: "error" });
      console.warn("Vernis: attachment not opened", error);
    }
  }

  /** Host API (SPEC §18): `text` in the input, not sent, for the user to finish. */
  prefill(text) {
    this.input.value = String(text ?? "");
    this.sizeInput();
    this.updateCounter();
    this.input.focus();
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
    const uploading = Boolean(this.files && this.files.uploading);
    // Nothing to send (a message needs text): Send is visibly off rather than doing nothing when pressed.
    const empty = this.input.value.trim() === "";
    this.sendButton.disabled = !(this.connection && this.connection.connected) || waiting || tooLong || uploading || empty;
    // The keyboard hint, until the first message of this tab's session is sent (kept in a field:
    // this runs at every keystroke and streamed answer's end, the storage's JSON need not be read).
    this.sentBefore ??= Boolean(this.saved().sent);
    this.hint.hidden = this.sentBefore;
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
    // The server's greeting, or one from the name: "Hi, I'm Ada." over "How can I help?".
    const greeting = this.config.greeting
      ? [h("h3", { class: "empty-title", dir: "auto" }, this.config.greeting)]
      : [h("p", { class: "empty-hello" }, `Hi, I'm ${this.identity().name}.`), h("h3", { class: "empty-title" }, "How can I help?")];
    return h("div", { class: "empty" }, [
      avatar(this.identity(), "large"),
      h("div", { class: "empty-greeting" }, greeting),
      h("p", { class: "empty-text" }, "Ask me anything about your work here. I ask before changing anything."),
      page.length ? h("ul", { class: "quick-actions page-actions", "aria-label": "About this page" }, page.map((action) => button(action, "page"))) : null,
      general.length ? this.quickActionList(general.map((action) => button(action))) : null,
    ]);
  }

  /** The general quick actions: the first QUICK_ACTIONS_SHOWN, the rest behind "More". */
  quickActionList(items) {
    const list = h("ul", { class: "quick-actions", "aria-label": "Quick actions" }, items.slice(0, QUICK_ACTIONS_SHOWN));
    const rest = items.slice(QUICK_ACTIONS_SHOWN);
    if (rest.length === 0) {
      return list;
    }
    const more = h("button", { type: "button", class: "link-button more-actions", "aria-expanded": "false" }, `More (${rest.length})`);
    more.addEventListener("click", () => {
      list.append(...rest);
      more.remove();
      // Focus stays in the list: on the first action just shown.
      rest[0].querySelector("button").focus();
    });
    return h("div", { class: "quick-actions-group" }, [list, more]);
  }

  // --- connection state ----------------------------------------------------------------------------

  connectionState({ state, cause }) {
    const previous = this.conn.getAttribute("data-state");
    this.conn.setAttribute("data-state", state);
    this.connText.textContent = state === "unavailable" && cause === "token" ? NO_TOKEN_TEXT : CONNECTION_TEXT[state] || state;
    this.retryButton.hidden = !(state === "reconnecting" || state === "offline" || state === "unavailable");
    this.panel.setAttribute("data-connection", state);
    if (state === "connected" && previous !== "connected") {
      this.clientTools.declare();
      this.loadConfig();
      this.session.connected();
      if (this.picker.isOpen) {
        this.session.listConversations();
      }
      if (this.config.reviewer) {
        this.session.listReviews();
      }
    }
    if (state === "signed-out" && previous !== "signed-out") {
      this.signedOut();
    } else if (state === "connected" && this.signedOutNotice) {
      this.signedOutNotice.remove();
      this.signedOutNotice = null;
    }
    // Signed out, nothing can be sent: the composer says so once, in the notice above it.
    this.input.disabled = state === "signed-out";
    this.updateComposer();
  }

  /** The server ended the session: one notice, with "Sign in again" when the host gives tokens
   * (it asks `getToken` anew and reconnects), and the host's `onSignedOut`. */
  signedOut() {
    if (this.signedOutNotice) {
      this.signedOutNotice.remove();
    }
    const renewable = Boolean(this.hostGetToken || this.tokenProvider);
    this.signedOutNotice = this.messages.notice(
      renewable ? "Your session has ended." : "Your session has ended. Sign in again to keep using the assistant.",
      { kind: "error" },
    );
    if (renewable) {
      const again = h("button", { type: "button", class: "button small sign-in-again" }, "Sign in again");
      again.addEventListener("click", () => {
        if (this.connection) {
          this.connection.signIn();
        }
      });
      this.signedOutNotice.append(" ", again);
    }
    if (this.hostSignedOut) {
      try {
        this.hostSignedOut();
      } catch (error) {
        console.error("Vernis: onSignedOut failed", error);
      }
    }
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

  compacted() {
    this.messages.compacted();
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

  assistantStart(messageId, resumed, continues) {
    this.messages.startAnswer(messageId, { streaming: true, continues });
  }

  textDelta(messageId, text) {
    this.messages.appendText(this.messages.answer(messageId), text);
  }

  reasoningDelta(messageId, text) {
    appendReasoning(this.messages.answer(messageId), text);
  }

  toolStarted(messageId, event) {
    this.messages.toolStarted(messageId, event);
  }

  toolCompleted(messageId, event) {
    this.messages.toolCompleted(messageId, event);
    if (event.status !== "needs_confirmation" && event.status !== "review_requested" && event.status !== "needs_answer") {
      // Waiting for approval is not an end: the host hears of the call once it has run (or not).
      this.dispatchEvent(
        hostEvent("vernis:tool-completed", {
          toolName: event.tool_name,
          status: event.status,
          summary: toolSummary(event.tool_name, event.status, event.result),
          callId: event.call_id,
          conversationId: this.session.conversationId,
        }),
      );
    }
  }

  questionRequired(messageId, event) {
    this.messages.questions.required(messageId, event);
  }

  confirmationRequired(messageId, event) {
    this.messages.confirmationRequired(messageId, event);
  }

  reviewRequested(event) {
    this.messages.reviewRequested(event);
  }

  reviewList(reviews) {
    this.reviews.setReviews(reviews);
  }

  reviewRequired(review) {
    this.reviews.add(review);
  }

  reviewResolved(reviewId) {
    this.reviews.remove(reviewId);
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
    // After the edited message, which messages.js adds once this returns.
    queueMicrotask(() => this.messages.showThinking());
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
    this.messages.showThinking();
    this.updateComposer();
    return true;
  }

  commandError(event) {
    if (this.messages.questions.commandFailed(event)) {
      // An answer to a form did not go through: the form says why, next to the field it names.
      return;
    }
    this.messages.commandFailed();
    this.reviews.commandFailed();
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
