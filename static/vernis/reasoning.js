// The reasoning a model streams with its answer (SPEC §19): folded under "Thinking…" above the
// answer's text, in a native <details> (opened by a click, or by Enter or Space on its focused
// summary; screen readers announce it as a disclosure). Plain text, never markdown: each delta is
// appended to one text node, with no parse and no redraw. While the answer has no text yet, the
// block takes the place of its "Thinking…" line (messages.js), animated the same way, so that one
// line says the assistant is thinking, not two.

import { h } from "./dom.js";

/** Add `text` to `answer`'s reasoning, making its folded block on the first call. */
export function appendReasoning(answer, text) {
  let block = answer.reasoning;
  if (!block) {
    const node = document.createTextNode("");
    const element = h("details", { class: "reasoning" }, [
      h("summary", {}, [h("span", { class: "thinking-dot", "aria-hidden": "true" }), "Thinking…"]),
      h("div", { class: "reasoning-text", dir: "auto" }, node),
    ]);
    if (answer.thinking) {
      answer.thinking.replaceWith(element);
      answer.thinking = null;
      element.setAttribute("data-active", "");
    } else {
      answer.body.prepend(element);
    }
    block = answer.reasoning = { element, node };
  }
  block.node.appendData(text);
}
