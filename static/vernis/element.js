// <vernis-assistant>: the launcher button and the slide-over panel (400 px, or full screen) with
// the header (title, session picker, new chat, expand, close), the message list and the input bar.
//
// It talks to the Vernis server it was loaded from (or the origin in its `server` attribute) and
// authenticates with the `vernis_token` cookie, or with `element.tokenProvider`, an (async)
// function returning a token, sent as the subprotocol `vernis.token.<jwt>` (never in the URL).
// Shortcuts: Ctrl+/ (⌘/ on a Mac) opens and closes it; Escape closes the picker, then the panel.

import { Connection } from "./connection.js";
import { h, icon } from "./dom.js";
import { loadMarkdown } from "./markdown.js";
import { MessageList } from "./messages.js";
import { Picker } from "./picker.js";
import { pageAction, QUICK_ACTIONS } from "./quick-actions.js";
import { Session } from "./session.js";

const BASE = new URL("./", import.meta.url);
const STORAGE_KEY = "vernis.assistant";
const MAX_CHARS = 8000;
const CONNECTION_TEXT = {
  connecting: "Connecting…",
  connected: "Connected",
  reconnecting: "Reconnecting…",
  offline: "Offline, retrying",
  "signed-out": "Signed out",
};

export class VernisAssistant extends HTMLElement {
  constructor() {
    super();
    /** Optional: `async () => jwt`, for hosts that do not use the `vernis_token` cookie. */
    this.tokenProvider = null;
    this.started = false;
  }

  connectedCallback() {
    if (!this.shadowRoot) {
      this.build();
    }
    document.addEventListener("keydown", this.onDocumentKey);
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
    if (this.connection) {
      this.connection.stop();
      this.connection = null;
      this.started = false;
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

    this.launcher = h(
      "button",
      { type: "button", class: "launcher", "aria-controls": "vernis-panel", "aria-expanded": "false", "aria-keyshortcuts": "Control+/", title: "Ask Vernis (Ctrl+/)" },
      [icon("chat"), h("span", { class: "launcher-label" }, "Ask Vernis")],
    );
    this.launcher.addEventListener("click", () => this.open());

    this.titleElement = h("h2", { id: "vernis-title", class: "title" }, "New conversation");
    this.connText = h("span", { class: "conn-text" }, CONNECTION_TEXT.connecting);
    this.retryButton = h("button", { type: "button", class: "link-button conn-retry", hidden: "" }, "Retry now");
    this.retryButton.addEventListener("click", () => this.connection && this.connection.reconnectNow());
    this.conn = h("div", { class: "conn", "data-state": "connecting", role: "status" }, [
      h("span", { class: "conn-dot", "aria-hidden": "true" }),
      this.connText,
      this.retryButton,
    ]);
    this.pickerToggle = this.iconButton("list", "Conversations", "picker-toggle", () => this.togglePicker());
    this.pickerToggle.setAttribute("aria-expanded", "false");
    this.pickerToggle.setAttribute("aria-controls", "vernis-picker");
    this.newChatButton = this.iconButton("plus", "New chat", "new-chat", () => this.newChat());
    this.expandButton = this.iconButton("expand", "Expand to full screen", "expand", () => this.setExpanded(!this.expanded));
    this.expandButton.setAttribute("aria-pressed", "false");
    this.closeButton = this.iconButton("close", "Close assistant", "close", () => this.close());

    this.scriptedNote = h("p", { class: "scripted-note", role: "note", hidden: "" }, [
      h("strong", {}, "Demo mode: "),
      "answers come from Vernis's scripted model, not from a real AI. They are canned.",
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
      maxlength: String(MAX_CHARS),
      placeholder: "Ask about contacts, calls, tasks…",
      "aria-describedby": "vernis-hint",
    });
    this.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submit();
      }
    });
    this.input.addEventListener("input", () => this.sizeInput());
    this.sendButton = h("button", { type: "submit", class: "icon-button primary send", "aria-label": "Send", title: "Send" }, [icon("send")]);
    this.stopButton = h("button", { type: "button", class: "icon-button stop", "aria-label": "Stop the answer", title: "Stop", hidden: "" }, [icon("stop")]);
    this.stopButton.addEventListener("click", () => this.session.stop());
    const composer = h("form", { class: "composer", "aria-label": "Message the assistant" }, [
      h("label", { class: "sr-only", for: "vernis-input" }, "Message"),
      h("div", { class: "composer-row" }, [this.input, this.sendButton, this.stopButton]),
      h("p", { id: "vernis-hint", class: "hint" }, "Enter to send · Shift+Enter for a new line"),
    ]);
    composer.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });

    this.panel = h(
      "section",
      { class: "panel", id: "vernis-panel", role: "dialog", "aria-modal": "false", "aria-labelledby": "vernis-title" },
      [
        h("header", { class: "header" }, [
          this.pickerToggle,
          h("div", { class: "heading" }, [this.titleElement, this.conn]),
          this.newChatButton,
          this.expandButton,
          this.closeButton,
        ]),
        this.scriptedNote,
        h("div", { class: "body" }, [this.picker.element, this.log]),
        composer,
      ],
    );
    this.panel.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && !event.defaultPrevented) {
        event.preventDefault();
        if (this.picker.isOpen) {
          this.closePicker({ focus: true });
        } else {
          this.close();
        }
      }
    });

    root.append(this.launcher, this.panel);
    shadow.append(stylesheet, root);

    const saved = this.saved();
    this.messages = new MessageList(this.log, (target, text) => (target.textContent = text), {
      confirm: (id, approved) => this.session.confirmTool(id, approved),
      feedback: (id, rating) => this.session.feedback(id, rating),
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
      }
    };
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
    fetch(`${server}/api/assistant/config`, { credentials: "same-origin" })
      .then((response) => (response.ok ? response.json() : {}))
      .then((config) => (this.scriptedNote.hidden = !config.scripted))
      .catch(() => {});
    const render = await loadMarkdown(BASE.href, [location.origin, server]);
    this.messages.setRenderer(render);
    const socketBase = `${server.replace(/^http/, "ws")}/api/assistant/ws`;
    this.connection = new Connection({
      url: () => socketBase + this.session.socketQuery(),
      protocols: async () => {
        const token = this.tokenProvider ? await this.tokenProvider() : null;
        return token ? ["vernis.v1", `vernis.token.${token}`] : ["vernis.v1"];
      },
    });
    this.connection.addEventListener("event", (event) => {
      this.session.handle(event.detail);
      this.updateComposer();
    });
    this.connection.addEventListener("state", (event) => this.connectionState(event.detail));
    this.connection.start();
  }

  // --- open, close, expand -----------------------------------------------------------------------

  get isOpen() {
    return this.panel.hasAttribute("data-open");
  }

  get expanded() {
    return this.panel.hasAttribute("data-expanded");
  }

  open({ focus = true } = {}) {
    this.panel.setAttribute("data-open", "");
    this.launcher.setAttribute("aria-expanded", "true");
    this.persist({ open: true });
    this.start();
    if (focus) {
      // After the panel is visible (it is `visibility: hidden` while closed).
      requestAnimationFrame(() => this.input.focus());
    }
  }

  close() {
    this.closePicker();
    this.panel.removeAttribute("data-open");
    this.launcher.setAttribute("aria-expanded", "false");
    this.persist({ open: false });
    this.launcher.focus();
  }

  setExpanded(expanded, { persist = true } = {}) {
    this.panel.toggleAttribute("data-expanded", expanded);
    this.expandButton.setAttribute("aria-pressed", String(expanded));
    const label = expanded ? "Collapse to side panel" : "Expand to full screen";
    this.expandButton.setAttribute("aria-label", label);
    this.expandButton.title = label;
    this.expandButton.replaceChildren(icon(expanded ? "collapse" : "expand"));
    if (persist) {
      this.persist({ expanded });
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
    }
    this.updateComposer();
  }

  /** Send a message with the page's context; false when it cannot go now (the text stays). */
  send(text) {
    const content = text.trim();
    if (!content || this.session.busy) {
      return false;
    }
    if (content.length > MAX_CHARS) {
      this.messages.notice(`A message can be at most ${MAX_CHARS.toLocaleString()} characters.`, { kind: "error" });
      return false;
    }
    if (!this.session.userMessage(content, this.pageContext())) {
      this.messages.notice("Not connected: your message was not sent. It will be possible again once reconnected.", { kind: "error" });
      return false;
    }
    this.messages.addUser(content, { pending: true });
    this.updateComposer();
    return true;
  }

  /** The page the assistant sits on: its path, and the entity it shows when the host says so. */
  pageContext() {
    const context = { route: location.pathname };
    const body = document.body ? document.body.dataset : {};
    const type = this.getAttribute("entity-type") || this.dataset.entityType || body.entityType;
    const id = this.getAttribute("entity-id") || this.dataset.entityId || body.entityId;
    if (type && id) {
      context.entity_type = type;
      context.entity_id = id;
    }
    return context;
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
    this.sendButton.disabled = !(this.connection && this.connection.connected);
    this.panel.toggleAttribute("data-busy", busy);
    if (stopHadFocus && !busy) {
      this.input.focus();
    }
  }

  emptyState() {
    const actions = QUICK_ACTIONS.slice();
    const here = pageAction(this.pageContext().entity_type);
    const button = (action, extra = "") => {
      const element = h("button", { type: "button", class: `quick-action ${extra}`.trim() }, action.label);
      element.addEventListener("click", () => {
        if (this.send(action.prompt)) {
          this.updateComposer();
        }
      });
      return h("li", {}, element);
    };
    return h("div", { class: "empty" }, [
      h("div", { class: "empty-mark", "aria-hidden": "true" }, icon("chat")),
      h("h3", { class: "empty-title" }, "How can I help?"),
      h("p", { class: "empty-text" }, "Ask about your contacts, calls, messages, tasks and plans. I ask before changing anything."),
      here ? h("ul", { class: "quick-actions page-actions", "aria-label": "About this page" }, [button(here, "page")]) : null,
      h("ul", { class: "quick-actions", "aria-label": "Quick actions" }, actions.map((action) => button(action))),
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
    this.messages.markLastUserRefused(event.message);
    if (!this.input.value.trim()) {
      this.input.value = content;
      this.sizeInput();
    }
  }

  userMessageResent(content) {
    const users = this.log.querySelectorAll(".msg.user .bubble");
    const last = users[users.length - 1];
    if (!last || last.textContent !== content) {
      this.messages.addUser(content, { pending: true });
    }
  }

  answerError(messageId, event) {
    this.messages.answerError(messageId, event.message);
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
