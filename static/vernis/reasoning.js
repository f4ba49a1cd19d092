// The reasoning a model streams with its answer (SPEC §19): folded under "Thinking…" above the
// answer's text, in a native <details> (opened by a click, or by Enter or Space on its focused
// summary; screen readers announce it as a disclosure). Plain text, never markdown: each delta is
// appended to one text node, with no parse and no redraw.

import { h } from "./dom.js";

/** Add `text` to `answer`'s reasoning, making its folded block on the first call. */
export function appendReasoning(answer, text) {
  let block = answer.reasoning;
  if (!block) {
    const node = document.createTextNode("");
    const element = h("details", { class: "reasoning" }, [
      h("summary", {}, "Thinking…"),
      h("div", { class: "reasoning-text", dir: "auto" }, node),
    ]);
    answer.body.prepend(element);
    block = answer.reasoning = { element, node };
  }
  block.node.appendData(text);
}
