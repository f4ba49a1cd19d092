// The message list: user messages, assistant answers (markdown, streamed), tool call cards with
// their approve / reject buttons, notices. Plain DOM; all text from the server goes in as text,
// except the answer's markdown, which goes through the sanitizing renderer.

import { filledIcon, h, humanize, icon } from "./dom.js";

const STATUS_LABELS = {
  running: "Running…",
  ok: "Done",
  error: "Failed",
  needs_confirmation: "Needs your approval",
  rejected: "Rejected",
};

export class MessageList {
  /**
   * `log`: the scrolling element. `render(target, markdown)`: the sanitizing renderer.
   * `actions`: {confirm(confirmationId, approved), feedback(messageId, rating), regenerate(),
   * edit(messageId, content)}.
   */
  constructor(log, render, actions) {
    this.log = log;
    this.render = render;
    this.actions = actions;
    this.answers = new Map();
    this.cards = new Map();
    // Each user message and the answers after it: {user, content, messageId, answers, superseded, group}.
    this.turns = [];
    this.empty = null;
    this.pendingRenders = new Set();
    this.frame = null;
  }

  setRenderer(render) {
    this.render = render;
    for (const answer of this.answers.values()) {
      for (const part of answer.parts) {
        if (part.kind === "text") {
          this.render(part.element, part.text);
        }
      }
    }
  }

  clear() {
    this.log.replaceChildren();
    this.answers.clear();
    this.cards.clear();
    this.turns = [];
    this.empty = null;
  }

  get isEmpty() {
    return this.log.querySelector(".msg") === null;
  }

  /** The empty conversation's welcome and quick actions (`emptyState` is built by the caller). */
  showEmpty(emptyState) {
    this.hideEmpty();
    this.empty = emptyState;
    this.log.append(emptyState);
  }

  hideEmpty() {
    if (this.empty) {
      this.empty.remove();
      this.empty = null;
    }
  }

  // --- user messages ---------------------------------------------------------------------------

  addUser(content, { pending = false, createdAt = null, messageId = null, superseded = false } = {}) {
    this.hideEmpty();
    // `dir="auto"`: a message in a right-to-left language reads right to left, whatever the page's.
    const bubble = h("div", { class: "bubble", dir: "auto" }, content);
    const editButton = h("button", { type: "button", class: "icon-button small edit", "aria-label": "Edit message", title: "Edit message", hidden: "" }, [icon("pencil")]);
    const meta = h("div", { class: "msg-meta" }, [timestamp(createdAt), editButton, this.copyButton(() => content, "Copy message")]);
    const element = h("div", { class: "msg user", "data-pending": pending ? "" : null }, [h("span", { class: "sr-only" }, "You said:"), bubble, meta]);
    const turn = { user: element, bubble, meta, content, messageId, answers: [], superseded, group: null, nav: null, editButton };
    editButton.addEventListener("click", () => this.startEdit(turn));
    // After an exchange that was edited: this is its newer version.
    const previous = this.turns[this.turns.length - 1];
    this.turns.push(turn);
    this.append(element, true);
    if (previous && previous.superseded) {
      turn.group = previous.group || (previous.group = [previous]);
      turn.group.push(turn);
      this.showTurn(turn.group, turn.group.length - 1);
    }
    this.refreshRegenerate();
    return element;
  }

  /** Show version `index` of an edited exchange: its user message and its answers. */
  showTurn(group, index) {
    group.forEach((turn, i) => {
      const shown = i === index;
      turn.user.hidden = !shown;
      for (const answer of turn.answers) {
        answer.element.hidden = !shown || (answer.group ? answer.group.indexOf(answer) !== (answer.group.shown ?? answer.group.length - 1) : false);
      }
      if (!turn.nav) {
        turn.nav = h("span", { class: "versions", role: "group", "aria-label": "Versions of this message" });
        turn.meta.prepend(turn.nav);
      }
      const previous = h("button", { type: "button", class: "icon-button small", "aria-label": "Earlier version", title: "Earlier version", disabled: i === 0 }, [icon("back")]);
      const next = h("button", { type: "button", class: "icon-button small next", "aria-label": "Later version", title: "Later version", disabled: i === group.length - 1 }, [icon("back")]);
      previous.addEventListener("click", () => {
        this.showTurn(group, i - 1);
        group[i - 1].nav.querySelector(".next").focus();
      });
      next.addEventListener("click", () => {
        this.showTurn(group, i + 1);
        const later = group[i + 1].nav.querySelector("button");
        (later.disabled ? group[i + 1].nav.querySelector(".next") : later).focus();
      });
      turn.nav.replaceChildren(previous, h("span", { class: "versions-count" }, `${i + 1} / ${group.length}`), next);
    });
  }

  /** The last user message in an editor: Enter (or Save) sends the edit, Escape cancels. */
  startEdit(turn) {
    const editor = h("textarea", { class: "edit-input", dir: "auto", rows: "3", "aria-label": "Edit your message" });
    editor.value = turn.content;
    const save = h("button", { type: "button", class: "button primary small" }, "Send");
    const cancel = h("button", { type: "button", class: "button small" }, "Cancel");
    const form = h("div", { class: "edit-form" }, [editor, h("div", { class: "edit-actions" }, [cancel, save])]);
    const close = () => {
      form.remove();
      turn.bubble.hidden = false;
      turn.meta.hidden = false;
      turn.editButton.focus();
    };
    const submit = () => {
      const content = editor.value.trim();
      if (!content || content === turn.content) {
        close();
        return;
      }
      const answer = turn.answers[turn.answers.length - 1];
      const id = turn.messageId || (answer ? answer.id : null);
      if (id && this.actions.edit && this.actions.edit(id, content)) {
        form.remove();
        turn.bubble.hidden = false;
        turn.meta.hidden = false;
        turn.superseded = true;
        this.addUser(content, { pending: true });
      }
    };
    editor.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        submit();
      } else if (event.key === "Escape") {
        event.preventDefault();
        close();
      }
    });
    save.addEventListener("click", submit);
    cancel.addEventListener("click", close);
    turn.bubble.hidden = true;
    turn.meta.hidden = true;
    turn.user.append(form);
    editor.focus();
  }

  /** An edit the server refused: the earlier exchange is current again. */
  editRefused() {
    const turn = this.turns.pop();
    if (!turn) {
      return;
    }
    turn.user.remove();
    const previous = this.turns[this.turns.length - 1];
    if (previous) {
      previous.superseded = false;
      if (turn.group) {
        turn.group.pop();
        if (turn.group.length > 1) {
          this.showTurn(turn.group, turn.group.length - 1);
        } else {
          previous.group = null;
          previous.user.hidden = false;
          for (const answer of previous.answers) {
            answer.element.hidden = answer.group ? answer.group.indexOf(answer) !== (answer.group.shown ?? answer.group.length - 1) : false;
          }
          if (previous.nav) {
            previous.nav.remove();
            previous.nav = null;
          }
        }
      }
    }
    this.refreshRegenerate();
  }

  /** A button copying `text()` to the clipboard; it says "Copied" for a moment. */
  copyButton(text, label = "Copy") {
    const button = h("button", { type: "button", class: "icon-button small copy", "aria-label": label, title: label }, [icon("copy")]);
    button.addEventListener("click", async () => {
      let done = false;
      try {
        await navigator.clipboard.writeText(text());
        done = true;
      } catch {
        done = false;
      }
      button.setAttribute("data-copied", done ? "" : "failed");
      button.setAttribute("aria-label", done ? "Copied" : "Copy failed");
      button.title = done ? "Copied" : "Copy failed";
      setTimeout(() => {
        button.removeAttribute("data-copied");
        button.setAttribute("aria-label", label);
        button.title = label;
      }, 1500);
    });
    return button;
  }

  /** The last message sent was refused (not stored): mark it. */
  markLastUserRefused(reason) {
    const messages = this.log.querySelectorAll(".msg.user");
    const last = messages[messages.length - 1];
    if (!last) {
      return null;
    }
    last.removeAttribute("data-pending");
    last.setAttribute("data-refused", "");
    const note = h("div", { class: "msg-note", role: "status" }, reason);
    last.append(note);
    return note;
  }

  acceptPendingUser() {
    for (const element of this.log.querySelectorAll(".msg.user[data-pending]")) {
      element.removeAttribute("data-pending");
    }
    this.refreshRegenerate();
  }

  // --- history ---------------------------------------------------------------------------------

  historyMessage(message) {
    if (message.role === "user") {
      this.addUser(message.content, { createdAt: message.created_at, messageId: message.message_id, superseded: message.status === "superseded" });
      return;
    }
    // As it streamed: the text up to each call's `text_offset` (code points), then its card.
    const answer = this.startAnswer(message.message_id, { createdAt: message.created_at });
    const chars = Array.from(message.content || "");
    let at = 0;
    for (const call of message.tool_calls || []) {
      const offset = Number.isInteger(call.text_offset) ? Math.min(Math.max(call.text_offset, at), chars.length) : at;
      if (offset > at) {
        this.appendText(answer, chars.slice(at, offset).join(""));
        at = offset;
      }
      const card = this.card(answer, call.call_id, call.tool_name, call.arguments);
      const approval = call.approval && typeof call.approval === "object" ? call.approval : null;
      if (approval) {
        // A preview the user answered: the card asked, then ended (as it did live).
        this.complete(card, "needs_confirmation", undefined);
        this.askConfirmation(card, approval.confirmation_id, approval.preview);
      }
      this.complete(card, call.status, call.result);
      const data = call.result && call.result.data;
      if (call.status === "needs_confirmation" && data && data.confirmation_id) {
        this.askConfirmation(card, data.confirmation_id, data.preview);
      }
    }
    if (at < chars.length) {
      this.appendText(answer, chars.slice(at).join(""));
    }
    this.finish(answer, { stopped: message.status === "stopped", failed: message.status === "failed" });
  }

  // --- answers ---------------------------------------------------------------------------------

  startAnswer(messageId, { streaming = false, createdAt = null } = {}) {
    this.hideEmpty();
    let answer = this.answers.get(messageId);
    if (answer) {
      // Joined again while it streams: everything so far (its text, its tool calls, in their order)
      // arrives anew from its start, so it is drawn anew, as the history will show it.
      for (const part of answer.parts) {
        part.element.remove();
        this.pendingRenders.delete(part);
      }
      for (const [callId, card] of this.cards) {
        if (answer.body.contains(card.element) || !card.element.isConnected) {
          this.cards.delete(callId);
        }
      }
      answer.parts = [];
    } else {
      const body = h("div", { class: "answer-body" });
      const footer = h("div", { class: "answer-footer" });
      const element = h(
        "article",
        { class: "msg assistant", "data-message-id": messageId, "aria-label": "Assistant" },
        [body, footer],
      );
      answer = { id: messageId, element, body, footer, parts: [], createdAt: createdAt || new Date().toISOString() };
      // Right after another answer: it was written again (`regenerate`), this is its newer version.
      const messages = this.log.querySelectorAll(".msg");
      const last = messages[messages.length - 1];
      const previous = last && last.classList.contains("assistant") ? this.answers.get(last.dataset.messageId) : null;
      this.answers.set(messageId, answer);
      this.append(element, true);
      const turn = this.turns[this.turns.length - 1];
      if (turn) {
        turn.answers.push(answer);
        // An answer of an earlier version of an edited exchange is hidden with its user message.
        if (turn.user.hidden) {
          element.hidden = true;
        }
      }
      if (previous) {
        answer.group = previous.group || (previous.group = [previous]);
        answer.group.push(answer);
        this.showVersion(answer.group, answer.group.length - 1);
      }
    }
    if (streaming) {
      answer.element.setAttribute("aria-busy", "true");
      answer.element.setAttribute("data-streaming", "");
      answer.footer.replaceChildren(
        h("span", { class: "typing", role: "status" }, [
          h("span", { class: "dot" }),
          h("span", { class: "dot" }),
          h("span", { class: "dot" }),
          h("span", { class: "sr-only" }, "The assistant is writing"),
        ]),
      );
    }
    return answer;
  }

  answer(messageId) {
    return this.answers.get(messageId) || this.startAnswer(messageId, { streaming: true });
  }

  appendText(answer, text) {
    let part = answer.parts[answer.parts.length - 1];
    if (!part || part.kind !== "text") {
      part = { kind: "text", text: "", element: h("div", { class: "markdown", dir: "auto" }) };
      answer.parts.push(part);
      answer.body.append(part.element);
    }
    part.text += text;
    this.scheduleRender(part);
  }

  scheduleRender(part) {
    // One markdown pass per frame, however many deltas arrived in it.
    const follow = this.nearBottom();
    this.pendingRenders.add(part);
    if (this.frame === null) {
      this.frame = requestAnimationFrame(() => {
        this.frame = null;
        const follow = this.nearBottom();
        for (const pending of this.pendingRenders) {
          this.render(pending.element, pending.text);
        }
        this.pendingRenders.clear();
        if (follow) {
          this.scrollToBottom();
        }
      });
    }
    return follow;
  }

  /** Render whatever is pending now (before an answer is marked done). */
  flushRenders() {
    if (this.frame !== null) {
      cancelAnimationFrame(this.frame);
      this.frame = null;
    }
    for (const pending of this.pendingRenders) {
      this.render(pending.element, pending.text);
    }
    this.pendingRenders.clear();
  }

  finish(answer, { stopped = false, failed = answer.failed === true } = {}) {
    this.flushRenders();
    for (const card of this.cards.values()) {
      if (card.confirm && card.confirm.held && answer.element.contains(card.element)) {
        card.confirm.held = false;
        card.confirm.approve.disabled = card.confirm.reject.disabled = false;
      }
    }
    answer.element.removeAttribute("aria-busy");
    answer.element.removeAttribute("data-streaming");
    const footer = [];
    if (stopped) {
      footer.push(h("span", { class: "answer-state" }, "Stopped"));
    } else if (failed) {
      footer.push(h("span", { class: "answer-state failed" }, "This answer did not finish."));
    }
    footer.push(this.feedbackButtons(answer.id));
    footer.push(this.copyButton(() => answer.parts.filter((part) => part.kind === "text").map((part) => part.text).join("\n\n"), "Copy answer"));
    footer.push(timestamp(answer.createdAt));
    answer.regenerate = h("button", { type: "button", class: "icon-button small regenerate", "aria-label": "Write this answer again", title: "Write this answer again", hidden: "" }, [icon("refresh")]);
    answer.regenerate.addEventListener("click", () => this.actions.regenerate && this.actions.regenerate());
    footer.splice(footer.length - 1, 0, answer.regenerate);
    answer.nav = null;
    answer.footer.replaceChildren(...footer);
    if (answer.group) {
      this.showVersion(answer.group, answer.group.indexOf(answer));
    }
    this.refreshRegenerate();
    if (!answer.parts.length && !answer.failed) {
      answer.body.append(h("p", { class: "answer-empty" }, stopped ? "Stopped before answering." : "No answer."));
    }
  }

  /** The answer failed: the server's plain sentence, and a Retry button when `retry` is given. */
  /** Show version `index` of an answer written several times; the others are hidden. */
  showVersion(group, index) {
    group.shown = index;
    const turn = this.turns.find((candidate) => candidate.answers.includes(group[0]));
    const turnHidden = Boolean(turn && turn.user.hidden);
    group.forEach((member, i) => {
      member.element.hidden = i !== index || turnHidden;
      if (!member.nav) {
        member.nav = h("span", { class: "versions", role: "group", "aria-label": "Versions of this answer" });
        member.footer.prepend(member.nav);
      }
      const previous = h("button", { type: "button", class: "icon-button small", "aria-label": "Earlier version", title: "Earlier version", disabled: i === 0 }, [icon("back")]);
      const next = h("button", { type: "button", class: "icon-button small next", "aria-label": "Later version", title: "Later version", disabled: i === group.length - 1 }, [icon("back")]);
      previous.addEventListener("click", () => {
        this.showVersion(group, i - 1);
        group[i - 1].nav.querySelector(".next").focus();
      });
      next.addEventListener("click", () => {
        this.showVersion(group, i + 1);
        const later = group[i + 1].nav.querySelector("button");
        (later.disabled ? group[i + 1].nav.querySelector(".next") : later).focus();
      });
      member.nav.replaceChildren(previous, h("span", { class: "versions-count" }, `${i + 1} / ${group.length}`), next);
    });
  }

  /** Only the conversation's last answer offers to be written again, its last message to be edited. */
  refreshRegenerate() {
    const messages = this.log.querySelectorAll(".msg");
    const last = messages[messages.length - 1];
    for (const answer of this.answers.values()) {
      if (answer.regenerate) {
        const isLast = answer.element === last || (answer.group && answer.group.some((member) => member.element === last));
        answer.regenerate.hidden = !isLast;
      }
    }
    const lastTurn = this.turns[this.turns.length - 1];
    for (const turn of this.turns) {
      const editable = turn === lastTurn && !turn.superseded && !turn.user.hasAttribute("data-refused") && !turn.user.hasAttribute("data-pending");
      turn.editButton.hidden = !editable || (!turn.messageId && !turn.answers.length);
    }
  }

  answerError(messageId, message, retry = null) {
    const answer = this.answer(messageId);
    answer.failed = true;
    const button = retry ? h("button", { type: "button", class: "button small retry" }, "Retry") : null;
    if (button) {
      button.addEventListener("click", () => {
        if (retry()) {
          button.disabled = true;
        }
      });
    }
    answer.body.append(h("div", { class: "answer-error", role: "alert" }, [h("p", {}, message), button]));
  }

  feedbackButtons(messageId) {
    const group = h("span", { class: "feedback", role: "group", "aria-label": "Rate this answer" });
    for (const [rating, label, icon] of [
      ["up", "Helpful", "M7 10v10H4V10h3Zm2 10h8.3a2 2 0 0 0 2-1.6l1.2-6A2 2 0 0 0 18.5 10H14l.7-3.6A1.7 1.7 0 0 0 13 4.3L9 10v10Z"],
      ["down", "Not helpful", "M17 14V4h3v10h-3Zm-2-10H6.7a2 2 0 0 0-2 1.6l-1.2 6A2 2 0 0 0 5.5 14H10l-.7 3.6a1.7 1.7 0 0 0 1.7 2.1L15 14V4Z"],
    ]) {
      const button = h("button", { type: "button", class: "icon-button small", "aria-label": label, "aria-pressed": "false", title: label }, [
        filledIcon(icon),
      ]);
      button.addEventListener("click", () => {
        for (const other of group.querySelectorAll("button")) {
          other.setAttribute("aria-pressed", String(other === button));
        }
        this.actions.feedback(messageId, rating);
      });
      group.append(button);
    }
    return group;
  }

  // --- tool calls ------------------------------------------------------------------------------

  card(answer, callId, toolName, args) {
    let card = this.cards.get(callId);
    if (card) {
      return card;
    }
    const status = h("span", { class: "tool-status" }, STATUS_LABELS.running);
    const resultSection = h("div", { class: "tool-section", hidden: "" }, [
      h("p", { class: "tool-section-title" }, "Result"),
      h("div", { class: "tool-value" }),
    ]);
    const details = h("details", { class: "tool" }, [
      h("summary", {}, [
        h("span", { class: "tool-icon", "aria-hidden": "true" }),
        h("span", { class: "tool-name" }, humanize(toolName)),
        status,
      ]),
      h("div", { class: "tool-body" }, [
        h("div", { class: "tool-section" }, [
          h("p", { class: "tool-section-title" }, "Tool"),
          h("code", { class: "tool-id" }, toolName),
        ]),
        h("div", { class: "tool-section" }, [
          h("p", { class: "tool-section-title" }, "Arguments"),
          h("div", { class: "tool-value" }, renderValue(args) || h("p", { class: "none" }, "None")),
        ]),
        resultSection,
      ]),
    ]);
    const element = h("div", { class: "tool-card", "data-call-id": callId, "data-status": "running" }, [details]);
    card = { callId, toolName, element, details, status, resultSection, confirm: null };
    this.cards.set(callId, card);
    answer.parts.push({ kind: "tool", element });
    answer.body.append(element);
    this.followIfNear();
    return card;
  }

  toolStarted(messageId, event) {
    this.card(this.answer(messageId), event.call_id, event.tool_name, event.arguments);
  }

  toolCompleted(messageId, event) {
    let card = this.cards.get(event.call_id);
    if (!card) {
      if (!messageId) {
        return;
      }
      card = this.card(this.answer(messageId), event.call_id, event.tool_name, undefined);
    }
    this.complete(card, event.status, event.result);
    const data = event.result && event.result.data;
    if (event.status === "needs_confirmation" && data && data.confirmation_id) {
      this.askConfirmation(card, data.confirmation_id, data.preview);
    }
  }

  confirmationRequired(messageId, event) {
    let card = this.cards.get(event.call_id);
    if (!card) {
      if (!messageId) {
        return;
      }
      card = this.card(this.answer(messageId), event.call_id, event.tool_name, undefined);
    }
    this.complete(card, "needs_confirmation", undefined);
    this.askConfirmation(card, event.confirmation_id, event.preview);
  }

  complete(card, status, result) {
    card.element.setAttribute("data-status", status);
    let label = STATUS_LABELS[status] || status;
    if (status === "ok" && card.confirm) {
      label = "Approved · done";
    }
    card.status.textContent = label;
    if (result !== undefined) {
      card.resultSection.hidden = false;
      card.resultSection.querySelector(".tool-value").replaceChildren(renderResult(result));
    }
    if (status !== "needs_confirmation" && card.confirm) {
      const outcome =
        status === "ok" ? "Approved. The change was made." : status === "rejected" ? "Rejected. Nothing was changed." : "The change could not be made.";
      card.confirm.actions.replaceChildren(h("p", { class: "confirm-outcome", role: "status" }, outcome));
      card.confirm.element.setAttribute("data-resolved", status);
    }
    this.followIfNear();
  }

  askConfirmation(card, confirmationId, preview) {
    if (card.confirm && card.confirm.id === confirmationId) {
      return;
    }
    if (card.confirm) {
      card.confirm.element.remove();
    }
    const approve = h("button", { type: "button", class: "button primary approve" }, "Approve");
    const reject = h("button", { type: "button", class: "button reject" }, "Reject");
    const actions = h("div", { class: "confirm-actions" }, [approve, reject]);
    const heading = (preview && typeof preview === "object" && preview.action) || `${humanize(card.toolName)}?`;
    const element = h(
      "div",
      { class: "confirm", role: "group", "aria-label": `Approve or reject: ${heading}` },
      [h("p", { class: "confirm-title" }, heading), renderPreview(preview), actions],
    );
    const confirm = { id: confirmationId, element, actions, approve, reject };
    if (card.element.closest(".msg.assistant[data-streaming]")) {
      // The server takes the answer once the message that asks is complete.
      approve.disabled = reject.disabled = true;
      confirm.held = true;
    }
    const answerWith = (approved) => {
      approve.disabled = reject.disabled = true;
      (approved ? approve : reject).setAttribute("aria-busy", "true");
      confirm.waiting = true;
      if (!this.actions.confirm(confirmationId, approved)) {
        this.confirmFailed(confirm);
      }
    };
    approve.addEventListener("click", () => answerWith(true));
    reject.addEventListener("click", () => answerWith(false));
    card.confirm = confirm;
    card.element.append(element);
    this.followIfNear();
  }

  /** A command failed: a confirmation waiting for its answer gets its buttons back. */
  commandFailed() {
    for (const card of this.cards.values()) {
      if (card.confirm && card.confirm.waiting) {
        this.confirmFailed(card.confirm);
      }
    }
  }

  confirmFailed(confirm) {
    confirm.waiting = false;
    confirm.approve.disabled = confirm.reject.disabled = false;
    confirm.approve.removeAttribute("aria-busy");
    confirm.reject.removeAttribute("aria-busy");
  }

  // --- notices and scrolling -------------------------------------------------------------------

  notice(text, { kind = "info" } = {}) {
    const element = h("div", { class: `notice-line ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
    this.append(element, true);
    return element;
  }

  append(element, scroll) {
    const follow = this.nearBottom();
    this.log.append(element);
    if (scroll || follow) {
      this.scrollToBottom();
    }
  }

  followIfNear() {
    if (this.nearBottom()) {
      this.scrollToBottom();
    }
  }

  nearBottom() {
    const log = this.log;
    return log.scrollHeight - log.scrollTop - log.clientHeight < 96;
  }

  scrollToBottom() {
    this.log.scrollTop = this.log.scrollHeight;
  }
}

/** "14:05" (the date too when not today), with the full date and time on hover. */
function timestamp(iso) {
  const when = iso ? new Date(iso) : new Date();
  if (Number.isNaN(when.getTime())) {
    return null;
  }
  const today = new Date().toDateString() === when.toDateString();
  const short = today
    ? when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : when.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  return h("time", { class: "msg-time", datetime: when.toISOString(), title: when.toLocaleString() }, short);
}

// --- readable values: what a tool was given, what it returned, what a write would change --------
// Never JSON: objects are labelled rows (nested ones grouped), lists are lists, empty values are
// left out, a `{from, to}` pair reads "before → after".

// The keys of an object that only names a record: shown by its name. Any other key, and every key is
// shown (an approval must never hide an argument behind a title).
const NAMING_KEYS = new Set(["id", "name", "title", "label", "created_at"]);

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function isEmpty(value) {
  return (
    value === null ||
    value === undefined ||
    (typeof value === "string" && value.trim() === "") ||
    (Array.isArray(value) && value.every(isEmpty)) ||
    (isObject(value) && Object.values(value).every(isEmpty))
  );
}

function isChange(value) {
  if (!isObject(value)) {
    return false;
  }
  const keys = Object.keys(value);
  return keys.length === 2 && "from" in value && "to" in value;
}

function recordName(value) {
  if (!isObject(value) || !Object.keys(value).every((key) => NAMING_KEYS.has(key))) {
    return null;
  }
  const name = value.name || value.title || value.label;
  return typeof name === "string" || typeof name === "number" ? String(name) : null;
}

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
// A time as tools give it: ISO 8601 in the organization's time zone (with its offset).
const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?$/;

function scalar(value) {
  if (typeof value === "boolean") {
    return value ? "Yes" : "No";
  }
  const time = typeof value === "string" ? ISO_TIME.exec(value) : null;
  if (time) {
    // Its own wall-clock time (the organization's), not converted to the browser's zone.
    const [, year, month, day, hour, minute] = time;
    return `${MONTHS[Number(month) - 1]} ${Number(day)}, ${year}, ${hour}:${minute}`;
  }
  return String(value);
}

function change(value) {
  const side = (v, cls) => {
    const shown = isEmpty(v) ? null : renderValue(v, true);
    return h("span", { class: cls }, shown || h("span", { class: "none" }, "(none)"));
  };
  return h("span", { class: "change" }, [
    side(value.from, "from"),
    h("span", { class: "arrow", "aria-hidden": "true" }, " → "),
    h("span", { class: "sr-only" }, " becomes "),
    side(value.to, "to"),
  ]);
}

/**
 * Any JSON value as readable DOM (null when there is nothing to show). In a write's preview
 * (`preview`), a `{from, to}` pair is a change ("before → after"); elsewhere (a date range in a
 * tool's arguments) it is two fields.
 */
export function renderValue(value, preview = false) {
  if (isEmpty(value)) {
    return null;
  }
  if (typeof value !== "object") {
    return h("span", { class: "value" }, scalar(value));
  }
  if (preview && isChange(value)) {
    return change(value);
  }
  const name = recordName(value);
  if (name !== null) {
    return h("span", { class: "value" }, name);
  }
  if (Array.isArray(value)) {
    const items = value.map((item) => renderValue(item, preview)).filter((item) => item !== null);
    const simple = value.every((item) => typeof item !== "object" || item === null || recordName(item) !== null);
    return h("ul", { class: simple ? "values inline" : "values" }, items.map((item) => h("li", {}, item)));
  }
  return renderFields(value, new Set(), preview);
}

/** An object's fields as labelled rows; `skip`: keys shown elsewhere. */
function renderFields(object, skip = new Set(), preview = false) {
  const rows = [];
  for (const [key, value] of Object.entries(object)) {
    if (skip.has(key)) {
      continue;
    }
    const shown = renderValue(value, preview);
    if (shown === null) {
      continue;
    }
    // Nested records (an object, a list of objects) take the whole width under their label.
    const grouped = shown.matches("dl, ul.values:not(.inline)");
    rows.push(h("div", { class: grouped ? "field group" : "field" }, [h("dt", {}, humanize(key)), h("dd", {}, shown)]));
  }
  return rows.length ? h("dl", { class: "fields" }, rows) : null;
}

/** A tool's result envelope: its data, or what went wrong. */
function renderResult(result) {
  if (isObject(result) && result.ok === false && isObject(result.error)) {
    const error = result.error;
    return h("div", { class: "tool-error" }, [
      h("p", {}, typeof error.message === "string" ? error.message : "The tool failed."),
      typeof error.hint === "string" && error.hint ? h("p", { class: "hint-text" }, error.hint) : null,
    ]);
  }
  const data = isObject(result) && "ok" in result ? result.data : result;
  return renderValue(data) || h("p", { class: "none" }, "Nothing to show.");
}

/**
 * A write's preview: `{action, changes: {field: {from, to}}, warnings: [...], <what>: {...}}`, or any
 * value. The action is the card's heading (shown by the caller); the changes are rows "before → after".
 */
export function renderPreview(preview) {
  if (!isObject(preview)) {
    return h("div", { class: "confirm-details" }, renderValue(preview, true) || h("p", { class: "none" }, "No details."));
  }
  const parts = [];
  const warnings = (Array.isArray(preview.warnings) ? preview.warnings : [preview.warnings]).filter((w) => !isEmpty(w));
  const fields = renderFields(preview, new Set(["action", "changes", "warnings"]), true);
  const changes = isObject(preview.changes) ? preview.changes : {};
  const changeRows = [];
  for (const [field, value] of Object.entries(changes)) {
    const shown = isChange(value) ? change(value) : renderValue(value, true);
    if (shown !== null) {
      changeRows.push(h("div", { class: "field" }, [h("dt", {}, humanize(field)), h("dd", {}, shown)]));
    }
  }
  if (fields) {
    parts.push(fields);
  }
  if (changeRows.length) {
    parts.push(h("dl", { class: "fields changes", "aria-label": "Changes" }, changeRows));
  }
  if (warnings.length) {
    parts.push(
      h("ul", { class: "confirm-warnings", "aria-label": "Warnings" }, warnings.map((warning) => h("li", {}, renderValue(warning, true)))),
    );
  }
  return h("div", { class: "confirm-details" }, parts);
}
