// What the panel shows, driven by the server's events (protocol v1): which conversation, how far
// its events have been applied (`seq`), whether an answer is streaming. No DOM here: every change
// is a call on the `view`, so the rules for resuming live in one place.
//
// Resuming: every event of a conversation carries a growing `seq`. The session remembers the last
// one applied per conversation; the next socket asks for `?conversation_id=…&after_seq=…` and the
// server sends exactly the events missed (`conversation_loaded {resumed: true}`, no redraw). An event
// whose seq was already applied is dropped, so nothing shows twice. When the server cannot resume
// (`resumed: false`, or a plain load), the view is redrawn from the history, and an answer still in
// flight comes back as `assistant_start {resumed: true}` with its text so far in one delta.

// Events that happen live and carry the conversation's seq (history replay does not count).
const LIVE = new Set([
  "conversation_created",
  "assistant_start",
  "text_delta",
  "reasoning_delta",
  "tool_call_started",
  "tool_call_completed",
  "confirmation_required",
  "assistant_end",
  "title_updated",
  "error",
  "conversation_loaded",
  "review_requested",
  "question_required",
]);

// Refusals of a user message: it was not stored, so the user gets their text back.
const REFUSALS = new Set([
  "rate_limited",
  "message_too_long",
  "invalid_message",
  "response_in_progress",
  "quota_exceeded",
  "message_blocked",
]);

export class Session {
  /** `send(command)`: sends one command, false when the socket is not open. */
  constructor(view, send, { conversationId = null, pending = false } = {}) {
    this.view = view;
    this.send = send;
    // The conversation shown; null while it is pending (a new chat, stored on its first message).
    this.conversationId = conversationId;
    this.title = null;
    this.lastSeq = new Map();
    // Between a redraw's `conversation_loaded` and its `history_end`: the view is incomplete.
    this.loading = true;
    // The message id of the answer streaming in the shown conversation.
    this.answering = null;
    // A user message sent and not yet answered: `{command, resend}`.
    this.awaiting = null;
    // A `regenerate` sent and not yet started.
    this.regenerating = null;
    // The last user message of the history being replayed (was ours stored before a cut?).
    this.lastHistoryUser = null;
    // How to apply each `conversation_list` still to come: "replace" or "append".
    this.listModes = [];
    // The user chose a new chat: a reconnect must come back to a pending conversation, not the latest.
    this.wantPending = pending;
    this.ignoreUntilPending = false;
    // From a socket's opening to its first `conversation_loaded`: the panel takes input meanwhile.
    this.opening = false;
  }

  /** The query string of the next socket: where to reopen, and from which event to resume. */
  socketQuery() {
    if (this.wantPending || !this.conversationId) {
      return "";
    }
    const params = new URLSearchParams({ conversation_id: this.conversationId });
    const seq = this.lastSeq.get(this.conversationId);
    if (seq !== undefined && !this.loading) {
      params.set("after_seq", String(seq));
    }
    return `?${params}`;
  }

  /** A new socket is open. */
  connected() {
    this.listModes = [];
    this.opening = true;
    if (this.awaiting) {
      // Sent just before the cut, maybe never received: send it again once the view is current
      // (the same client_message_id, so the server answers it once).
      this.awaiting.resend = true;
    }
    if (this.wantPending) {
      this.ignoreUntilPending = true;
      this.send({ type: "new_conversation" });
    }
  }

  get busy() {
    return this.answering !== null || this.awaiting !== null || this.regenerating !== null;
  }

  // --- commands ------------------------------------------------------------------------------

  userMessage(content, pageContext, attachments = []) {
    const command = { type: "user_message", content, client_message_id: randomId() };
    if (pageContext) {
      command.page_context = pageContext;
    }
    if (attachments.length) {
      command.attachments = attachments;
    }
    if (!this.send(command)) {
      return false;
    }
    this.awaiting = { command, resend: false };
    return true;
  }

  /**
   * Replace the last user message with `content` and answer it again (`edit_message`); the earlier
   * exchange stays as an earlier version. `messageId`: that message's id, or its answer's.
   */
  editMessage(messageId, content) {
    const command = { type: "edit_message", message_id: messageId, content, client_message_id: randomId() };
    if (!this.send(command)) {
      return false;
    }
    this.awaiting = { command, resend: false, edit: true };
    return true;
  }

  /** Answer the last user message again (the earlier answer stays as an earlier version). */
  regenerate() {
    const command = { type: "regenerate", client_message_id: randomId() };
    if (!this.send(command)) {
      return false;
    }
    this.regenerating = command;
    return true;
  }

  newConversation() {
    this.wantPending = true;
    return this.send({ type: "new_conversation" });
  }

  loadConversation(conversationId) {
    if (!this.send({ type: "load_conversation", conversation_id: conversationId })) {
      return false;
    }
    this.wantPending = false;
    return true;
  }

  listConversations(before = null) {
    if (!this.send(before ? { type: "list_conversations", before } : { type: "list_conversations" })) {
      return false;
    }
    this.listModes.push(before ? "append" : "replace");
    return true;
  }

  renameConversation(conversationId, title) {
    return this.send({ type: "rename_conversation", conversation_id: conversationId, title });
  }

  deleteConversation(conversationId) {
    if (!this.send({ type: "delete_conversation", conversation_id: conversationId })) {
      return false;
    }
    // The server answers a delete with a fresh list.
    this.listModes.push("replace");
    return true;
  }

  stop() {
    return this.send({ type: "stop" });
  }

  confirmTool(confirmationId, approved) {
    return this.send({ type: "confirm_tool", confirmation_id: confirmationId, approved });
  }

  /** The answers to an `ask_user` form, or `cancelled` (SPEC §17). */
  answerQuestion(questionId, answers, cancelled = false) {
    return this.send(
      cancelled ? { type: "answer_question", question_id: questionId, cancelled: true } : { type: "answer_question", question_id: questionId, answers },
    );
  }

  /** Reviewers: the writes waiting for their review (`review_list`). */
  listReviews() {
    return this.send({ type: "list_reviews" });
  }

  /** Reviewers: approve or reject a review request, with an optional note. */
  reviewTool(reviewId, approved, note) {
    const command = { type: "review_tool", review_id: reviewId, approved };
    if (note) {
      command.note = note;
    }
    return this.send(command);
  }

  feedback(messageId, rating, comment = null) {
    const command = { type: "feedback", message_id: messageId, rating };
    if (comment) {
      command.comment = comment;
    }
    return this.send(command);
  }

  resendIfNeeded() {
    if (this.awaiting && this.awaiting.resend) {
      this.awaiting.resend = false;
      this.send(this.awaiting.command);
    }
  }

  // --- events --------------------------------------------------------------------------------

  handle(event) {
    if (this.ignoreUntilPending) {
      // Reconnecting into a new chat: skip the latest conversation the server opens first.
      if (event.type === "conversation_loaded" && event.conversation_id === null) {
        this.ignoreUntilPending = false;
      } else if (event.type !== "conversation_list") {
        return;
      }
    }
    if (typeof event.seq === "number" && LIVE.has(event.type)) {
      const conversationId = event.conversation_id ?? this.conversationId;
      if (conversationId) {
        const last = this.lastSeq.get(conversationId);
        if (last !== undefined && event.seq <= last) {
          return;
        }
        this.lastSeq.set(conversationId, event.seq);
      }
    }
    switch (event.type) {
      case "conversation_loaded":
        return this.loaded(event);
      case "history_message":
        if (event.role === "user") {
          this.lastHistoryUser = event.content;
        }
        return this.view.historyMessage(event);
      case "history_end":
        if (event.conversation_id === this.conversationId) {
          if (this.conversationId && typeof event.seq === "number") {
            this.lastSeq.set(this.conversationId, event.seq);
          }
          this.loading = false;
          this.view.historyEnd();
          this.afterRedraw();
        }
        return;
      case "conversation_created":
        this.conversationId = event.conversation_id;
        this.wantPending = false;
        return this.view.conversationChanged(this.conversationId, this.title);
      case "assistant_start":
        if (event.conversation_id !== this.conversationId) {
          return;
        }
        this.answering = event.message_id;
        this.regenerating = null;
        if (this.awaiting) {
          this.awaiting = null;
          this.view.userMessageAccepted();
        }
        return this.view.assistantStart(event.message_id, event.resumed === true, event.continues === true);
      case "text_delta":
        if (this.answering) {
          this.view.textDelta(this.answering, event.content);
        }
        return;
      case "reasoning_delta":
        // The model's reasoning (SPEC §19): shown folded, apart from the answer's text.
        if (this.answering) {
          this.view.reasoningDelta(this.answering, event.content);
        }
        return;
      case "tool_call_started":
        if (this.answering) {
          this.view.toolStarted(this.answering, event);
        }
        return;
      case "tool_call_completed":
        return this.view.toolCompleted(this.answering, event);
      case "confirmation_required":
        return this.view.confirmationRequired(this.answering, event);
      case "question_required":
        // The assistant asks (SPEC §17): a form in the card of its `ask_user` call.
        return this.view.questionRequired(this.answering, event);
      case "review_requested":
        // The write this member approved waits for a reviewer (its card says so).
        return this.view.reviewRequested(event);
      case "review_list":
        return this.view.reviewList(event.reviews || []);
      case "review_required":
        return this.view.reviewRequired(event.review);
      case "review_resolved":
        return this.view.reviewResolved(event.review_id, event.status);
      case "assistant_end":
        if (event.message_id === this.answering) {
          this.answering = null;
          this.view.assistantEnd(event.message_id, event.stopped);
        }
        return;
      case "title_updated":
        if (event.conversation_id === this.conversationId) {
          this.title = event.title;
        }
        return this.view.titleUpdated(event.conversation_id, event.title, event.conversation_id === this.conversationId);
      case "conversation_compacted":
        // The model reads what came before as a summary from now on (SPEC §19); the messages stay.
        if (event.conversation_id === this.conversationId) {
          this.view.compacted();
        }
        return;
      case "conversation_list":
        return this.view.conversationList(event.conversations, event.next_before ?? null, this.listModes.shift() ?? "replace");
      case "error":
        return this.error(event);
      default:
        return undefined;
    }
  }

  loaded(event) {
    if (this.opening) {
      this.opening = false;
      if (this.awaiting && !this.awaiting.resend && !this.awaiting.edit && event.resumed !== true && !event.rolled_over_from) {
        // Sent after the socket opened, before its first load arrived: the server answers it after
        // that load, so the redraw clears its bubble and the history cannot hold it.
        this.awaiting.early = true;
      }
    }
    this.conversationId = event.conversation_id;
    this.title = event.title;
    if (event.conversation_id !== null) {
      this.wantPending = false;
    }
    if (event.resumed === true) {
      // Exactly the missed events follow; what is on screen stays.
      this.loading = false;
      this.view.resumed(this.conversationId, this.title);
      this.resendIfNeeded();
      return;
    }
    const carried = event.rolled_over_from && this.awaiting ? this.awaiting.command.content : null;
    this.lastHistoryUser = null;
    this.answering = null;
    this.regenerating = null;
    if (event.rolled_over_from) {
      // A live rollover: the answer to the message just sent streams into the new conversation.
      this.loading = false;
    } else {
      this.loading = true;
      if (event.conversation_id) {
        this.lastSeq.delete(event.conversation_id);
      }
    }
    this.view.reset(this.conversationId, this.title, {
      rolledOverFrom: event.rolled_over_from ?? null,
      carried,
      redraw: event.resumed === false,
    });
  }

  /** A redraw is complete: was the message sent before a cut stored, or must it go again? */
  afterRedraw() {
    if (this.awaiting && this.awaiting.early) {
      this.awaiting.early = false;
      this.view.userMessagePending(this.awaiting.command.content);
      return;
    }
    if (!this.awaiting || !this.awaiting.resend) {
      return;
    }
    if (this.lastHistoryUser === this.awaiting.command.content) {
      // Stored: its answer is in the history, or resumes right after it.
      this.awaiting = null;
      return;
    }
    this.view.userMessageResent(this.awaiting.command.content);
    this.resendIfNeeded();
  }

  error(event) {
    if (this.regenerating && !this.answering) {
      this.regenerating = null;
      this.view.commandError(event);
      return;
    }
    if (this.awaiting && this.awaiting.edit && !this.answering) {
      // The edit did not happen (an unknown message, a limit): the earlier exchange stays current.
      const refused = this.awaiting;
      this.awaiting = null;
      this.view.editRefused(refused.command.content, event);
      return;
    }
    if (this.awaiting && !this.answering && REFUSALS.has(event.code)) {
      const refused = this.awaiting;
      this.awaiting = null;
      this.view.userMessageRefused(refused.command.content, event);
      return;
    }
    if (this.answering && typeof event.seq === "number") {
      this.view.answerError(this.answering, event);
      return;
    }
    this.view.commandError(event);
  }
}

function randomId() {
  if (globalThis.crypto && typeof crypto.randomUUID === "function") {
    return crypto.randomUUID();
  }
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
