// The session picker: recent conversations (more load as the list scrolls), switch, new chat,
// rename, delete. Keyboard: ↑/↓ (Home/End) move between conversations, Enter opens, F2 renames,
// Delete asks to delete, Escape leaves a rename or the picker.

import { h, icon, relativeTime } from "./dom.js";

export class Picker {
  /** `actions`: {open(id), create(), rename(id, title), remove(id), more(before), close()}. */
  constructor(actions) {
    this.actions = actions;
    this.conversations = [];
    this.nextBefore = null;
    this.loading = false;
    this.currentId = null;

    // The conversations, grouped by when they last changed (Today, Yesterday, ...), each group a
    // list under its heading; `query` filters them by title.
    this.list = h("div", { class: "picker-groups" });
    this.query = "";
    this.search = h("input", {
      type: "search",
      class: "picker-search",
      "aria-label": "Search conversations by title",
      placeholder: "Search conversations",
      maxlength: "100",
    });
    this.search.addEventListener("input", () => {
      this.query = this.search.value.trim().toLocaleLowerCase();
      this.render();
    });
    this.status = h("div", { class: "picker-status", role: "status" });
    this.more = h("button", { type: "button", class: "button subtle picker-more", hidden: "" }, "Load more");
    this.more.addEventListener("click", () => this.loadMore());
    this.newButton = h("button", { type: "button", class: "button primary picker-new" }, [icon("plus"), "New chat"]);
    this.newButton.addEventListener("click", () => this.actions.create());
    this.scroller = h("div", { class: "picker-scroll" }, [this.list, this.status, this.more]);
    this.element = h("section", { class: "picker", id: "vernis-picker", "aria-labelledby": "vernis-picker-title", hidden: "" }, [
      h("div", { class: "picker-head" }, [
        h("h3", { id: "vernis-picker-title", class: "picker-title" }, "Conversations"),
        this.newButton,
      ]),
      this.search,
      this.scroller,
    ]);
    this.element.addEventListener("keydown", (event) => this.keydown(event));
    this.observer = new IntersectionObserver(
      (entries) => {
        if (entries.some((entry) => entry.isIntersecting)) {
          this.loadMore();
        }
      },
      { root: this.scroller, rootMargin: "80px" },
    );
    this.observer.observe(this.more);
  }

  get isOpen() {
    return !this.element.hidden;
  }

  open() {
    this.element.hidden = false;
    this.loading = true;
    this.render();
  }

  close() {
    this.element.hidden = true;
  }

  /** Focus the shown conversation's row, or the first one, or "New chat". */
  focus() {
    const rows = this.openButtons();
    const current = rows.find((button) => button.closest(".conv").dataset.id === this.currentId);
    (current || rows[0] || this.newButton).focus();
  }

  setCurrent(conversationId) {
    this.currentId = conversationId;
    for (const row of this.rows()) {
      if (row.dataset.id === conversationId) {
        row.setAttribute("aria-current", "true");
      } else {
        row.removeAttribute("aria-current");
      }
    }
  }

  setConversations(conversations, nextBefore, mode) {
    if (mode === "append") {
      const known = new Set(this.conversations.map((c) => c.conversation_id));
      this.conversations.push(...conversations.filter((c) => !known.has(c.conversation_id)));
    } else {
      this.conversations = conversations.slice();
    }
    this.nextBefore = nextBefore;
    this.loading = false;
    const focused = this.element.getRootNode().activeElement;
    const focusedId = focused && focused.closest && focused.closest(".conv") ? focused.closest(".conv").dataset.id : null;
    this.render();
    if (focused && focused.isConnected && focused.closest(".conv[data-editing]")) {
      // A rename or a delete being confirmed is kept by render(); moving it took its focus.
      focused.focus();
    } else if (focusedId) {
      const row = this.row(focusedId);
      (row ? row.querySelector(".conv-open") : this.openButtons()[0] || this.newButton).focus();
    }
  }

  updateTitle(conversationId, title) {
    const conversation = this.conversations.find((c) => c.conversation_id === conversationId);
    if (conversation) {
      conversation.title = title;
      const row = this.row(conversationId);
      const label = row && row.querySelector(".conv-title");
      if (label) {
        label.textContent = title;
      }
    }
  }

  loadMore() {
    if (this.loading || !this.nextBefore || !this.isOpen) {
      return;
    }
    this.loading = true;
    this.status.textContent = "Loading more…";
    if (!this.actions.more(this.nextBefore)) {
      this.loading = false;
      this.status.textContent = "";
    }
  }

  /**
   * Lay out the conversations again. A row being renamed or asked to delete (`data-editing`) is
   * kept as it is, so a list that arrives meanwhile (the picker's own refresh, another tab's
   * change) never takes away what the user is typing or confirming.
   */
  render() {
    const editing = new Map(this.rows().filter((row) => row.hasAttribute("data-editing")).map((row) => [row.dataset.id, row]));
    const shown = this.query
      ? this.conversations.filter((c) => (c.title || "Untitled conversation").toLocaleLowerCase().includes(this.query))
      : this.conversations;
    const groups = new Map();
    for (const conversation of shown) {
      const name = dateGroup(conversation.updated_at);
      if (!groups.has(name)) {
        groups.set(name, []);
      }
      groups.get(name).push(conversation);
    }
    this.list.replaceChildren(
      ...[...groups].flatMap(([name, conversations], index) => {
        const id = `vernis-picker-group-${index}`;
        return [
          h("h4", { class: "picker-group", id }, name),
          h("ul", { class: "picker-list", "aria-labelledby": id }, conversations.map((c) => editing.get(c.conversation_id) || this.renderRow(c))),
        ];
      }),
    );
    this.more.hidden = !this.nextBefore;
    if (this.loading && !this.conversations.length) {
      this.status.textContent = "Loading conversations…";
    } else if (!this.conversations.length) {
      this.status.textContent = "No conversations yet. Start one with “New chat”.";
    } else if (!shown.length) {
      this.status.textContent = `No conversation title has “${this.search.value.trim()}”${this.nextBefore ? " among those loaded" : ""}.`;
    } else {
      this.status.textContent = "";
    }
  }

  rows() {
    return Array.from(this.list.querySelectorAll(".conv"));
  }

  renderRow(conversation) {
    const id = conversation.conversation_id;
    const title = conversation.title || "Untitled conversation";
    const count = conversation.message_count;
    const meta = `${relativeTime(conversation.updated_at)} · ${count} message${count === 1 ? "" : "s"}`;
    const open = h("button", { type: "button", class: "conv-open" }, [
      h("span", { class: "conv-title", dir: "auto" }, title),
      h("span", { class: "conv-meta" }, meta),
    ]);
    open.addEventListener("click", () => this.actions.open(id));
    const rename = h("button", { type: "button", class: "icon-button small conv-rename", "aria-label": `Rename “${title}”`, title: "Rename" }, [icon("pencil")]);
    rename.addEventListener("click", () => this.startRename(id));
    const remove = h("button", { type: "button", class: "icon-button small conv-delete", "aria-label": `Delete “${title}”`, title: "Delete" }, [icon("trash")]);
    remove.addEventListener("click", () => this.askDelete(id));
    return h("li", { class: "conv", "data-id": id, "aria-current": id === this.currentId ? "true" : null }, [
      open,
      h("div", { class: "conv-actions" }, [rename, remove]),
    ]);
  }

  /** The list's current entry for `conversation` (a list that came since replaced it), or itself. */
  latest(conversation) {
    return this.conversations.find((c) => c.conversation_id === conversation.conversation_id) || conversation;
  }

  row(conversationId) {
    return this.rows().find((row) => row.dataset.id === conversationId) || null;
  }

  openButtons() {
    return Array.from(this.list.querySelectorAll(".conv-open"));
  }

  startRename(conversationId) {
    const row = this.row(conversationId);
    const conversation = this.conversations.find((c) => c.conversation_id === conversationId);
    if (!row || !conversation) {
      return;
    }
    const input = h("input", {
      type: "text",
      class: "conv-input",
      value: conversation.title || "",
      maxlength: "255",
      "aria-label": "New title",
      required: "",
    });
    const save = h("button", { type: "submit", class: "button primary small" }, "Save");
    const cancel = h("button", { type: "button", class: "button small" }, "Cancel");
    const form = h("form", { class: "conv-form", "aria-label": "Rename conversation" }, [input, h("div", { class: "conv-form-actions" }, [save, cancel])]);
    const restore = () => {
      const fresh = this.renderRow(this.latest(conversation));
      row.replaceWith(fresh);
      fresh.querySelector(".conv-open").focus();
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const title = input.value.trim();
      if (!title) {
        input.focus();
        return;
      }
      if (title !== this.latest(conversation).title && this.actions.rename(conversationId, title)) {
        this.latest(conversation).title = title;
      }
      restore();
    });
    cancel.addEventListener("click", restore);
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        restore();
      }
    });
    row.replaceChildren(form);
    row.setAttribute("data-editing", "");
    input.focus();
    input.select();
  }

  askDelete(conversationId) {
    const row = this.row(conversationId);
    const conversation = this.conversations.find((c) => c.conversation_id === conversationId);
    if (!row || !conversation) {
      return;
    }
    const title = conversation.title || "Untitled conversation";
    const confirm = h("button", { type: "button", class: "button danger small conv-confirm-delete" }, "Delete");
    const cancel = h("button", { type: "button", class: "button small" }, "Cancel");
    const restore = () => {
      const fresh = this.renderRow(this.latest(conversation));
      row.replaceWith(fresh);
      fresh.querySelector(".conv-open").focus();
    };
    confirm.addEventListener("click", () => {
      if (this.actions.remove(conversationId)) {
        row.setAttribute("data-deleting", "");
        confirm.disabled = cancel.disabled = true;
        // Keep the keyboard in the list while the row goes away.
        const neighbour = row.nextElementSibling || row.previousElementSibling;
        (neighbour ? neighbour.querySelector(".conv-open") || this.newButton : this.newButton).focus();
      }
    });
    cancel.addEventListener("click", restore);
    row.replaceChildren(
      h("div", { class: "conv-confirm", role: "group", "aria-label": "Confirm delete" }, [
        h("p", {}, ["Delete ", h("strong", {}, `“${title}”`), "? This cannot be undone."]),
        h("div", { class: "conv-form-actions" }, [confirm, cancel]),
      ]),
    );
    row.setAttribute("data-editing", "");
    row.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        restore();
      }
    });
    cancel.focus();
  }

  keydown(event) {
    const target = event.target;
    if (target.matches("input, textarea")) {
      return;
    }
    const rows = this.openButtons();
    const index = rows.indexOf(target);
    let next = null;
    switch (event.key) {
      case "ArrowDown":
        next = index < 0 ? rows[0] : rows[Math.min(index + 1, rows.length - 1)];
        break;
      case "ArrowUp":
        next = index <= 0 ? this.newButton : rows[index - 1];
        break;
      case "Home":
        next = rows[0];
        break;
      case "End":
        next = rows[rows.length - 1];
        break;
      case "F2":
        if (index >= 0) {
          event.preventDefault();
          this.startRename(target.closest(".conv").dataset.id);
        }
        return;
      case "Delete":
        if (index >= 0) {
          event.preventDefault();
          this.askDelete(target.closest(".conv").dataset.id);
        }
        return;
      case "Escape":
        event.preventDefault();
        event.stopPropagation();
        this.actions.close();
        return;
      default:
        return;
    }
    if (next) {
      event.preventDefault();
      next.focus();
      if (next === rows[rows.length - 1]) {
        this.loadMore();
      }
    }
  }
}

/** The picker's group of a conversation last changed at `iso`: by calendar day, in local time. */
function dateGroup(iso) {
  const when = new Date(iso);
  if (Number.isNaN(when.getTime())) {
    return "Older";
  }
  const startOfToday = new Date();
  startOfToday.setHours(0, 0, 0, 0);
  const day = 24 * 60 * 60 * 1000;
  if (when >= startOfToday) {
    return "Today";
  }
  if (when >= startOfToday.getTime() - day) {
    return "Yesterday";
  }
  if (when >= startOfToday.getTime() - 7 * day) {
    return "Previous 7 days";
  }
  return "Older";
}
