// Questions in a form (SPEC §17): the assistant's `ask_user` call shows a form inside its tool
// card; the user answers it (or cancels), and the answers appear as the user's reply.
//
// The message list calls in at three points: a card of the history carries its question
// (`restore`), `question_required` arrives live (`required`), and a card ends (`completed`: answered,
// cancelled, expired). A command error naming a question (`invalid_message` with `question_id`)
// shows next to its field (`commandFailed`). The checks here mirror the server's
// (vernis/tools/asking.py): a required answer, a number, a real date, options offered.

import { h } from "./dom.js";

const SENT_STATUS = {
  needs_answer: "Waiting for your answers",
  ok: "Answered",
  rejected: "Cancelled",
  expired: "Expired",
};
// How long a form waits before sending again while the answer that asked is still being stored.
const RETRY_MS = 300;
const RETRIES = 20;

let forms = 0;

export class Questions {
  /** `messages`: the MessageList. `answer(questionId, answers, cancelled)`: sends; false when offline. */
  constructor(messages, answer) {
    this.messages = messages;
    this.answer = answer;
    // question id -> the form shown for it.
    this.forms = new Map();
  }

  /** History replay: the card of an `ask_user` call draws its form from the stored record. */
  restore(card, question) {
    if (question && typeof question === "object" && question.question_id) {
      this.show(card, question, { live: false });
    }
  }

  /** `question_required`, live: the form, focused so that the keyboard is there. */
  required(messageId, event) {
    let card = this.messages.cards.get(event.call_id);
    if (!card) {
      if (!messageId) {
        return;
      }
      card = this.messages.card(this.messages.answer(messageId), event.call_id, "ask_user", undefined);
    }
    this.messages.complete(card, "needs_answer", undefined);
    this.show(card, event, { live: true });
  }

  /** The card of an `ask_user` call ended as `status`, its result `result`: the form says so. */
  completed(card, status, result) {
    const form = card.question;
    if (!form || status === "needs_answer" || status === "running") {
      return;
    }
    if (form.settled) {
      return;
    }
    form.settled = status;
    this.forms.delete(form.questionId);
    const data = result && result.data;
    const answers = status === "ok" && data && typeof data.answers === "object" ? data.answers : null;
    const said = answers ? "Answered." : status === "rejected" ? "You closed this form without answering." : status === "expired" ? "These questions expired unanswered." : "These questions could not be answered.";
    form.element.setAttribute("data-resolved", status);
    form.body.replaceChildren(answers ? summary(form.questions, answers) : h("p", { class: "question-outcome", role: "status" }, said));
    card.status.textContent = SENT_STATUS[status] || card.status.textContent;
    // The user's reply, after the answer that asked (and before the one that goes on).
    if (answers || status === "rejected") {
      const text = answers ? replyText(form.questions, answers) : "Closed the questions without answering.";
      const reply = h("div", { class: "msg user question-reply" }, [
        h("span", { class: "sr-only" }, "You answered:"),
        h("div", { class: "bubble", dir: "auto" }, text),
      ]);
      const asked = card.element.closest(".msg.assistant");
      (asked || card.element).after(reply);
      form.reply = reply;
      this.messages.followIfNear();
    }
  }

  /** A command failed: the form waiting for its answer takes it back, the error next to its field
   *  when it names one. True when a form took it. */
  commandFailed(event) {
    const waiting = [...this.forms.values()].filter((form) => form.sending);
    if (!waiting.length) {
      return false;
    }
    for (const form of waiting) {
      if (event.code === "response_in_progress" && form.tries < RETRIES) {
        // The answer that asked is still being stored: the server takes the answers right after.
        form.tries += 1;
        setTimeout(() => this.send(form), RETRY_MS);
        continue;
      }
      this.release(form);
      const field = event.question_id ? form.fields.get(event.question_id) : null;
      if (field) {
        showError(field, event.message);
        field.focusTarget().focus();
      } else {
        form.error.textContent = event.message;
        form.error.hidden = false;
      }
    }
    return true;
  }

  // --- the form --------------------------------------------------------------------------------

  show(card, question, { live }) {
    if (card.question && card.question.questionId === question.question_id) {
      return;
    }
    if (card.question) {
      card.question.element.remove();
    }
    forms += 1;
    const prefix = `vq${forms}`;
    const questions = Array.isArray(question.questions) ? question.questions : [];
    const fields = new Map();
    const list = h("div", { class: "question-fields" });
    questions.forEach((spec, index) => {
      const field = makeField(spec, `${prefix}-${index}`);
      fields.set(spec.id, field);
      list.append(field.element);
    });
    const titleId = `${prefix}-title`;
    const title = h("p", { class: "question-title", id: titleId, dir: "auto" }, question.title || "The assistant has a few questions");
    const note = questions.some((spec) => spec.required)
      ? h("p", { class: "question-note" }, [h("span", { class: "required-mark", "aria-hidden": "true" }, "*"), " required"])
      : null;
    const error = h("p", { class: "question-error form-error", role: "alert", hidden: "" });
    const submit = h("button", { type: "submit", class: "button primary" }, "Send answers");
    const cancel = h("button", { type: "button", class: "button" }, "Cancel");
    const actions = h("div", { class: "question-actions" }, [submit, cancel]);
    const body = h("div", { class: "question-body" }, [note, list, error, actions]);
    const element = h("form", { class: "question", "aria-labelledby": titleId, novalidate: "" }, [title, body]);
    const form = {
      questionId: question.question_id,
      questions,
      fields,
      element,
      body,
      error,
      submit,
      cancel,
      sending: false,
      settled: null,
      tries: 0,
      payload: null,
    };
    element.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit(form);
    });
    element.addEventListener("keydown", (event) => {
      // Enter sends from any field (radios and checkboxes too), not from a button, nor with a modifier.
      if (event.key !== "Enter" || event.shiftKey || event.altKey || event.ctrlKey || event.metaKey || event.isComposing) {
        return;
      }
      const target = event.composedPath()[0];
      if (target && (target.tagName === "BUTTON" || target.tagName === "TEXTAREA")) {
        return;
      }
      event.preventDefault();
      this.submit(form);
    });
    cancel.addEventListener("click", () => this.cancel(form));
    card.question = form;
    this.forms.set(form.questionId, form);
    card.element.append(element);
    this.messages.followIfNear();
    if (live && questions.length) {
      fields.get(questions[0].id).focusTarget().focus({ preventScroll: false });
    }
  }

  submit(form) {
    if (form.sending || form.settled) {
      return;
    }
    form.error.hidden = true;
    const answers = {};
    let first = null;
    for (const spec of form.questions) {
      const field = form.fields.get(spec.id);
      const { value, problem } = field.read();
      showError(field, problem);
      if (problem) {
        first = first || field;
      } else if (value !== null) {
        answers[spec.id] = value;
      }
    }
    if (first) {
      first.focusTarget().focus();
      return;
    }
    form.payload = { answers, cancelled: false };
    form.tries = 0;
    this.send(form);
  }

  cancel(form) {
    if (form.sending || form.settled) {
      return;
    }
    form.payload = { answers: null, cancelled: true };
    form.tries = 0;
    this.send(form);
  }

  send(form) {
    if (form.settled || !form.payload) {
      return;
    }
    form.sending = true;
    form.element.setAttribute("aria-busy", "true");
    for (const control of form.element.querySelectorAll("input, button")) {
      control.disabled = true;
    }
    if (!this.answer(form.questionId, form.payload.answers, form.payload.cancelled)) {
      this.release(form);
      form.error.textContent = "Not connected: your answers were not sent. Try again once the assistant is back.";
      form.error.hidden = false;
    }
  }

  release(form) {
    form.sending = false;
    form.element.removeAttribute("aria-busy");
    for (const control of form.element.querySelectorAll("input, button")) {
      control.disabled = false;
    }
  }
}

function showError(field, problem) {
  field.error.textContent = problem || "";
  field.error.hidden = !problem;
  for (const control of field.controls) {
    if (problem) {
      control.setAttribute("aria-invalid", "true");
    } else {
      control.removeAttribute("aria-invalid");
    }
  }
}

function labelText(spec) {
  return [
    h("span", { dir: "auto" }, String(spec.label || spec.id)),
    spec.required ? h("span", { class: "required-mark", "aria-hidden": "true" }, " *") : null,
    spec.required ? h("span", { class: "sr-only" }, " (required)") : null,
  ];
}

/** One question's field: its element, its controls, how to read it and where its error goes. */
function makeField(spec, id) {
  const errorId = `${id}-error`;
  const error = h("p", { class: "question-field-error", id: errorId, hidden: "" });
  const required = spec.required === true;
  const options = Array.isArray(spec.options) ? spec.options.map(String) : [];
  if (spec.type === "choice" || spec.type === "multi_choice" || spec.type === "boolean") {
    const multiple = spec.type === "multi_choice";
    const choices = spec.type === "boolean" ? [["Yes", true], ["No", false]] : options.map((option) => [option, option]);
    const controls = choices.map(([label], index) =>
      h("input", {
        type: multiple ? "checkbox" : "radio",
        name: id,
        id: `${id}-${index}`,
        value: String(index),
        "aria-describedby": errorId,
      }),
    );
    // One answer of several: a radio group, which may say it is required (a group of checkboxes
    // says so in its legend only).
    const legendId = `${id}-legend`;
    const group = h(
      "fieldset",
      {
        class: `question-field question-${spec.type}`,
        "data-question-id": spec.id,
        role: multiple ? null : "radiogroup",
        "aria-labelledby": legendId,
        "aria-required": required && !multiple ? "true" : null,
      },
      [
        h("legend", { id: legendId }, labelText(spec)),
        h(
          "div",
          { class: "question-choices" },
          controls.map((control, index) => h("label", { class: "question-option", for: control.id }, [control, h("span", { dir: "auto" }, choices[index][0])])),
        ),
        error,
      ],
    );
    const read = () => {
      const chosen = controls.filter((control) => control.checked).map((control) => choices[Number(control.value)][1]);
      if (!chosen.length) {
        return { value: null, problem: required ? "Choose an answer." : null };
      }
      return { value: multiple ? chosen : chosen[0], problem: null };
    };
    // Tab enters a radio group at its checked option (the browser's rule), else at the first.
    const focusTarget = () => controls.find((control) => control.checked) || controls[0];
    return { element: group, controls, error, read, focusTarget };
  }
  const type = spec.type === "number" ? "number" : spec.type === "date" ? "date" : "text";
  const input = h("input", {
    type,
    id,
    class: "question-input",
    step: type === "number" ? "any" : null,
    maxlength: type === "text" ? "2000" : null,
    dir: type === "text" ? "auto" : null,
    "aria-required": required ? "true" : null,
    "aria-describedby": errorId,
    autocomplete: "off",
  });
  const element = h("div", { class: `question-field question-${spec.type}`, "data-question-id": spec.id }, [
    h("label", { for: id }, labelText(spec)),
    input,
    error,
  ]);
  const read = () => {
    const raw = input.value.trim();
    if (!raw) {
      // A number or date the browser could not read leaves an empty value but a bad input.
      if (input.validity && input.validity.badInput) {
        return { value: null, problem: type === "date" ? "Enter a whole date." : "Enter a number." };
      }
      return { value: null, problem: required ? "An answer is required." : null };
    }
    if (type === "number") {
      const number = Number(raw);
      return Number.isFinite(number) ? { value: number, problem: null } : { value: null, problem: "Enter a number." };
    }
    if (type === "date") {
      return isDate(raw) ? { value: raw, problem: null } : { value: null, problem: "Enter a date (YYYY-MM-DD)." };
    }
    return { value: raw, problem: null };
  };
  return { element, controls: [input], error, read, focusTarget: () => input };
}

function isDate(text) {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text);
  if (!match) {
    return false;
  }
  const date = new Date(Date.UTC(Number(match[1]), Number(match[2]) - 1, Number(match[3])));
  return date.toISOString().slice(0, 10) === text;
}

function shown(spec, value) {
  if (typeof value === "boolean") {
    return value ? "Yes" : "No";
  }
  if (Array.isArray(value)) {
    return value.map(String).join(", ");
  }
  return String(value);
}

/** The answers, question by question, as the card shows them once answered. */
function summary(questions, answers) {
  const rows = [];
  for (const spec of questions) {
    if (Object.prototype.hasOwnProperty.call(answers, spec.id)) {
      rows.push(h("dt", {}, String(spec.label || spec.id)), h("dd", { dir: "auto" }, shown(spec, answers[spec.id])));
    }
  }
  return rows.length ? h("dl", { class: "question-answers" }, rows) : h("p", { class: "question-outcome" }, "Answered, with nothing filled in.");
}

/** The user's reply bubble: one line per answered question. */
function replyText(questions, answers) {
  const lines = questions
    .filter((spec) => Object.prototype.hasOwnProperty.call(answers, spec.id))
    .map((spec) => {
      const label = String(spec.label || spec.id);
      return `${label}${/[?:]$/.test(label) ? "" : ":"} ${shown(spec, answers[spec.id])}`;
    });
  return lines.length ? lines.join("\n") : "Sent the form without answers.";
}
