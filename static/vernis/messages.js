// The message list: user messages, assistant answers (markdown, streamed), tool call cards with
// their approve / reject buttons, notices. Plain DOM; all text from the server goes in as text,
// except the answer's markdown, which goes through the sanitizing renderer.

import { attachmentList } from "./attachments.js";
import { avatar, paint } from "./avatar.js";
import { renderBlocks } from "./blocks.js";
import { appendReasoning } from "./reasoning.js";
import { filledIcon, h, humanize, icon, readable } from "./dom.js";
import { StreamingMarkdown } from "./streaming.js";

// The shortest time between two markdown passes over a streaming answer (see scheduleRender).
const RENDER_INTERVAL_MS = 100;

const STATUS_LABELS = {
  running: "Running…",
  ok: "Done",
  error: "Failed",
  needs_confirmation: "Needs your approval",
  rejected: "Rejected",
  review_requested: "Waiting for a reviewer",
  expired: "Expired",
  needs_answer: "Waiting for your answers",
};

// What a card that asked says once it is answered, by how the call ended.
const OUTCOMES = {
  ok: "Approved. The change was made.",
  rejected: "Rejected. Nothing was changed.",
  review_requested: "Approved by you. Waiting for a reviewer: nothing has changed yet.",
  expired: "Expired. Nothing was changed.",
};

export class MessageList {
  /**
   * `log`: the scrolling element. `render(target, markdown)`: the sanitizing renderer.
   * `actions`: {confirm(confirmationId, approved), feedback(messageId, rating, comment?), regenerate(),
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
    // The wait before the next markdown pass (see scheduleRender), and when the last one ran.
    this.renderTimer = null;
    this.renderedAt = 0;
    // The copy button of a code block in an answer (drawn by the markdown renderer, without a
    // handler of its own: answers are drawn again and again while they stream).
    log.addEventListener("click", (event) => {
      const button = event.target.closest && event.target.closest(".code-copy");
      if (button) {
        this.copyCode(button);
      }
    });
    // Whether the log shows its end, so that a streaming answer is followed: remembered from the
    // log's scroll events (dispatched before a frame's script, the layout still clean), not measured
    // at each streamed pass (a read after the pass's changes laid the whole log out again, in script).
    // Only a scroll up (the user's) unpins it: a scroll event comes a frame after the scroll that
    // sent it, and the text streamed meanwhile may have put the end further than the threshold
    // below, though nobody moved.
    this.pinned = true;
    this.scrolledTo = 0;
    log.addEventListener("scroll", () => {
      const top = log.scrollTop;
      if (top < this.scrolledTo || !this.pinned) {
        this.pinned = this.nearBottom();
      }
      this.scrolledTo = top;
    }, { passive: true });
    // An answer's growth (its text streaming; its end; its blocks drawn once in view, content-visibility
    // sizing the others as estimates until then) scrolls the log to its end when it was there:
    // observed after the frame's layout and before its paint, so the scroll costs no layout of its
    // own, and the new text is painted already in view. So does the log's own view getting shorter
    // (the message box growing as several lines are typed, a line shown under the log).
    this.growth = new ResizeObserver(() => {
      if (this.pinned) {
        this.scrollToBottom();
      }
    });
    this.growth.observe(log);
    // The host page's renderers of UI block kinds (`el.registerRenderer`): kind -> (data, container).
    this.renderers = new Map();
    // Who answers: the name and avatar at the head of each turn's answer ({name, avatarUrl}).
    this.identity = { name: "Vernis", avatarUrl: "" };
    // The answer to come, between a message sent and the server's `assistant_start`: the head of an
    // answer and its "Thinking…" line (not a `.msg`: nothing is answered yet).
    this.pendingAnswer = null;
  }

  /** The assistant's name or avatar changed: the answers already shown follow. */
  setIdentity(identity) {
    this.identity = { name: identity.name, avatarUrl: identity.avatarUrl || "" };
    for (const element of this.log.querySelectorAll(".answer-head")) {
      paint(element.querySelector(".avatar"), this.identity);
      element.querySelector(".answer-name").textContent = this.identity.name;
    }
  }

  /** The name and avatar that open an assistant's turn. */
  answerHead() {
    return h("div", { class: "answer-head" }, [avatar(this.identity), h("span", { class: "answer-name" }, this.identity.name)]);
  }

  /** "Thinking…" from the moment a message is sent until the answer's first text (or tool call). */
  showThinking() {
    this.hideThinking();
    this.hideEmpty();
    this.pendingAnswer = h("div", { class: "pending-answer" }, [this.answerHead(), thinkingLine()]);
    this.append(this.pendingAnswer, true);
  }

  hideThinking() {
    if (this.pendingAnswer) {
      this.pendingAnswer.remove();
      this.pendingAnswer = null;
    }
  }

  /** The answer has something to show (text, a tool call, an end): its "Thinking…" gives way. */
  settle(answer) {
    if (answer.thinking) {
      answer.thinking.remove();
      answer.thinking = null;
    }
    if (answer.reasoning) {
      answer.reasoning.element.removeAttribute("data-active");
    }
    answer.element.removeAttribute("data-thinking");
  }

  /** Render blocks of `kind` with `render` from now on, and again on the cards already shown. */
  registerRenderer(kind, render) {
    this.renderers.set(kind, render);
    for (const card of this.cards.values()) {
      if (card.ui && card.ui.some((block) => block && block.kind === kind)) {
        this.showBlocks(card, card.ui);
      }
    }
  }

  setRenderer(render) {
    this.render = render;
    for (const answer of this.answers.values()) {
      for (const part of answer.parts) {
        if (part.kind === "text") {
          part.stream.full(part.text, this.render);
        }
      }
    }
  }

  clear() {
    this.growth.disconnect();
    this.growth.observe(this.log);
    this.log.replaceChildren();
    this.pendingAnswer = null;
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

  addUser(content, { pending = false, createdAt = null, messageId = null, superseded = false, attachments = [] } = {}) {
    this.hideEmpty();
    // `dir="auto"`: a message in a right-to-left language reads right to left, whatever the page's.
    const bubble = h("div", { class: "bubble", dir: "auto" }, content);
    const files = attachments && attachments.length && this.actions.attachment
      ? attachmentList(attachments, { load: this.actions.attachment, open: this.actions.openAttachment })
      : null;
    const editButton = h("button", { type: "button", class: "icon-button small edit", "aria-label": "Edit message", title: "Edit message", hidden: "" }, [icon("pencil")]);
    const meta = h("div", { class: "msg-meta" }, [timestamp(createdAt), editButton, this.copyButton(() => content, "Copy message")]);
    const element = h("div", { class: "msg user", "data-pending": pending ? "" : null }, [h("span", { class: "sr-only" }, "You said:"), bubble, files, meta]);
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
    this.hideThinking();
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

  /** A code block's copy button: its code on the clipboard, and "Copied" for a moment. */
  async copyCode(button) {
    const pre = button.closest(".code-block")?.querySelector("pre");
    let done = false;
    try {
      await navigator.clipboard.writeText(pre ? pre.textContent.replace(/\n$/, "") : "");
      done = true;
    } catch {
      done = false;
    }
    // Its own label, kept across clicks in quick succession (while it says "Copied").
    const label = button.dataset.label || button.getAttribute("aria-label");
    button.dataset.label = label;
    button.textContent = done ? "Copied" : "Copy failed";
    button.setAttribute("aria-label", button.textContent);
    setTimeout(() => {
      button.textContent = "Copy";
      button.setAttribute("aria-label", label);
    }, 1500);
  }

  /** The last message sent was refused (not stored): mark it. */
  markLastUserRefused(reason) {
    this.hideThinking();
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
      this.addUser(message.content, { createdAt: message.created_at, messageId: message.message_id, superseded: message.status === "superseded", attachments: message.attachments || [] });
      return;
    }
    // As it streamed: the text up to each call's `text_offset` (code points), then its card.
    const answer = this.startAnswer(message.message_id, { createdAt: message.created_at, continues: message.continues === true });
    if (message.reasoning) {
      appendReasoning(answer, message.reasoning);
    }
    const chars = Array.from(message.content || "");
    let at = 0;
    for (const call of message.tool_calls || []) {
      const offset = Number.isInteger(call.text_offset) ? Math.min(Math.max(call.text_offset, at), chars.length) : at;
      if (offset > at) {
        this.appendText(answer, chars.slice(at, offset).join(""));
        at = offset;
      }
      const card = this.card(answer, call.call_id, call.tool_name, call.arguments);
      if (call.question && this.questions) {
        // An `ask_user` form (SPEC §17): drawn again, then ended below if it was answered.
        this.questions.restore(card, call.question);
      }
      const approval = call.approval && typeof call.approval === "object" ? call.approval : null;
      if (approval) {
        // A preview the user answered: the card asked, then ended (as it did live).
        this.complete(card, "needs_confirmation", undefined);
        this.askConfirmation(card, approval.confirmation_id, approval.preview);
      }
      this.complete(card, call.status, call.result, call.ui);
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

  startAnswer(messageId, { streaming = false, createdAt = null, continues = false } = {}) {
    this.hideEmpty();
    this.hideThinking();
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
      // The first answer of a turn opens with the assistant's name and avatar; one that continues
      // the answer before it (after a review's outcome) goes on under that one's.
      const element = h(
        "article",
        { class: "msg assistant", "data-message-id": messageId, "aria-label": "Assistant", "data-continues": continues ? "" : null },
        [continues ? null : this.answerHead(), body, footer],
      );
      answer = { id: messageId, element, body, footer, parts: [], createdAt: createdAt || new Date().toISOString() };
      // Right after another answer: it was written again (`regenerate`), this is its newer version;
      // unless it continues that answer (it came after a review's outcome).
      const messages = this.log.querySelectorAll(".msg");
      const last = messages[messages.length - 1];
      const previous = !continues && last && last.classList.contains("assistant") ? this.answers.get(last.dataset.messageId) : null;
      this.answers.set(messageId, answer);
      this.append(element, true);
      this.growth.observe(element);
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
      if (!answer.parts.length && !answer.thinking && !answer.reasoning) {
        answer.thinking = thinkingLine();
        answer.body.prepend(answer.thinking);
        answer.element.setAttribute("data-thinking", "");
      }
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
      this.settle(answer);
      const element = h("div", { class: "markdown", dir: "auto" });
      part = { kind: "text", text: "", element, stream: new StreamingMarkdown(element) };
      answer.parts.push(part);
      answer.body.append(part.element);
    }
    part.text += text;
    this.scheduleRender(part);
  }

  scheduleRender(part) {
    // One markdown pass per RENDER_INTERVAL_MS at most, however many deltas arrived meanwhile, over
    // the unfinished block only, in an animation frame; nothing per delta reads the layout (each read
    // would lay the panel out again). Each pass costs a parse, a sanitize, a style and layout pass
    // and a paint: at every frame (60 a second) they took most of the main thread on a slow machine
    // and delayed everything else. Ten a second still reads as a smooth stream, with less scripting
    // than twenty (bench/results/2026-11-panel.md).
    this.pendingRenders.add(part);
    if (this.frame !== null || this.renderTimer !== null) {
      return;
    }
    const wait = this.renderedAt + RENDER_INTERVAL_MS - performance.now();
    if (wait > 0) {
      this.renderTimer = setTimeout(() => {
        this.renderTimer = null;
        this.requestRender();
      }, wait);
    } else {
      this.requestRender();
    }
  }

  requestRender() {
    this.frame = requestAnimationFrame(() => {
      this.frame = null;
      this.renderedAt = performance.now();
      // No layout read nor scroll here: the answer's growth is followed by `this.growth`.
      for (const pending of this.pendingRenders) {
        pending.stream.update(pending.text, this.render);
      }
      this.pendingRenders.clear();
    });
  }

  /** Render whatever is pending now (before an answer is marked done). */
  flushRenders() {
    if (this.frame !== null) {
      cancelAnimationFrame(this.frame);
      this.frame = null;
    }
    clearTimeout(this.renderTimer);
    this.renderTimer = null;
    for (const pending of this.pendingRenders) {
      pending.stream.update(pending.text, this.render);
    }
    this.pendingRenders.clear();
  }

  finish(answer, { stopped = false, failed = answer.failed === true } = {}) {
    this.settle(answer);
    // Its text drawn to the end, once: what waited for the next frame, and the last block of what
    // was drawn in pieces while it streamed (see streaming.js).
    for (const part of answer.parts) {
      if (part.kind === "text" && (this.pendingRenders.delete(part) || part.stream.incremental)) {
        part.stream.finish(part.text, this.render);
      }
    }
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
    this.settle(answer);
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
        this.askWhy(messageId, rating === "down");
      });
      group.append(button);
    }
    return group;
  }

  /** After a thumbs-down, a short box asks what was wrong (optional); sent with the rating. */
  askWhy(messageId, open) {
    const answer = this.answers.get(messageId);
    if (!answer) {
      return;
    }
    if (answer.why) {
      answer.why.remove();
      answer.why = null;
    }
    if (!open) {
      return;
    }
    const comment = h("textarea", { class: "feedback-text", rows: "2", maxlength: "2000", dir: "auto", "aria-label": "What was wrong? (optional)", placeholder: "What was wrong? (optional)" });
    const send = h("button", { type: "submit", class: "button small primary" }, "Send");
    const skip = h("button", { type: "button", class: "button small" }, "Skip");
    const form = h("form", { class: "feedback-comment", "aria-label": "Tell us what was wrong" }, [comment, h("div", { class: "feedback-actions" }, [send, skip])]);
    const close = (thanks) => {
      form.replaceChildren(...(thanks ? [h("p", { class: "feedback-thanks", role: "status" }, "Thanks: your note was sent.")] : []));
      if (!thanks) {
        form.remove();
        answer.why = null;
      }
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const text = comment.value.trim();
      if (!text) {
        close(false);
        return;
      }
      if (this.actions.feedback(messageId, "down", text)) {
        close(true);
      }
    });
    comment.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        form.requestSubmit();
      } else if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        close(false);
      }
    });
    skip.addEventListener("click", () => close(false));
    answer.why = form;
    answer.footer.after(form);
    comment.focus();
    this.followIfNear();
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
      // A box that scrolls: a region the keyboard can focus (axe: scrollable-region-focusable).
      h("div", { class: "tool-value", tabindex: "0", role: "region", "aria-label": `Result of ${humanize(toolName)}` }),
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
          h("div", { class: "tool-value", tabindex: "0", role: "region", "aria-label": `Arguments of ${humanize(toolName)}` }, renderValue(args) || h("p", { class: "none" }, "None")),
        ]),
        resultSection,
      ]),
    ]);
    const element = h("div", { class: "tool-card", "data-call-id": callId, "data-status": "running" }, [details]);
    card = { callId, toolName, element, details, status, resultSection, confirm: null, ui: null, blocks: null };
    this.cards.set(callId, card);
    this.settle(answer);
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
    this.complete(card, event.status, event.result, event.ui);
    const data = event.result && event.result.data;
    if (event.status === "needs_confirmation" && data && data.confirmation_id) {
      this.askConfirmation(card, data.confirmation_id, data.preview);
    }
  }

  /** The write approved on card `call_id` waits for a reviewer (`review_requested`). */
  reviewRequested(event) {
    const card = this.cards.get(event.call_id);
    if (card) {
      this.complete(card, "review_requested", undefined);
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

  complete(card, status, result, ui) {
    card.element.setAttribute("data-status", status);
    if (Array.isArray(ui) && ui.length) {
      this.showBlocks(card, ui);
    }
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
      // Not approved before the conversation moved on (a new message): the server's sentence says so.
      const superseded = status === "expired" && result && result.error && result.error.code === "superseded";
      const outcome = superseded ? result.error.message : OUTCOMES[status] || "The change could not be made.";
      card.confirm.actions.replaceChildren(h("p", { class: "confirm-outcome", role: "status" }, outcome));
      card.confirm.element.setAttribute("data-resolved", status);
    }
    if (this.questions && card.question) {
      this.questions.completed(card, status, result);
    }
    this.followIfNear();
  }

  /** The result's UI blocks (SPEC §16), shown under the card's summary, outside its fold. */
  showBlocks(card, ui) {
    card.ui = ui;
    const shown = renderBlocks(ui, {
      renderers: this.renderers,
      fallback: (data) => renderValue(data) || h("p", { class: "none" }, "None"),
      navigate: (url) => Boolean(this.actions.navigate && this.actions.navigate(url)),
    });
    if (card.blocks) {
      card.blocks.replaceWith(shown);
    } else {
      card.details.after(shown);
    }
    card.blocks = shown;
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

  /** Where the assistant's memory of this conversation becomes a summary (SPEC §19): a line in the log. */
  compacted() {
    this.notice("The assistant summarised the messages above to keep within its memory; they stay here for you.", { kind: "compacted" });
  }

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

/** The line an answer shows until its first text: a live status, its dot animated (unless the
 * user asked for reduced motion). Reasoning streamed meanwhile folds into it (reasoning.js). */
function thinkingLine() {
  return h("div", { class: "thinking", role: "status" }, [h("span", { class: "thinking-dot", "aria-hidden": "true" }), h("span", { class: "thinking-label" }, "Thinking…")]);
}

/** "14:05" (the date too when not today), with the full date and time on hover. */
function timestamp(iso) {
  const when = iso ? new Date(iso) : new Date();
  if (Number.isNaN(when.getTime())) {
    return null;
  }
  const formats = dateFormats();
  const today = new Date().toDateString() === when.toDateString();
  const short = (today ? formats.time : formats.dayAndTime).format(when);
  return h("time", { class: "msg-time", datetime: when.toISOString(), title: formats.full.format(when) }, short);
}

// The formats of the messages' times, made once: making one (as each toLocaleString with options
// does) costs a locale lookup, and the page's first loads the locale's data (tens of milliseconds).
let formats = null;

/** The date formats of the message list, made now if not yet (`prepareDates` makes them ahead). */
function dateFormats() {
  formats ??= {
    time: new Intl.DateTimeFormat([], { hour: "2-digit", minute: "2-digit" }),
    dayAndTime: new Intl.DateTimeFormat([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }),
    // What Date.toLocaleString() shows: the date and the time with seconds.
    full: new Intl.DateTimeFormat([], { year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "numeric", second: "numeric" }),
  };
  return formats;
}

/** Make the date formats while the page is idle (the panel opened): not in the task that shows the
 * first message. */
export function prepareDates() {
  const idle = window.requestIdleCallback || ((work) => setTimeout(work, 200));
  idle(() => dateFormats());
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
    return h("span", { class: "value" }, readable(value));
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
