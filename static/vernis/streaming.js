// A streaming answer's markdown, drawn incrementally: the blocks already finished are parsed once and
// stay in the page; only the block still being written is parsed again at each frame. Re-rendering
// the whole answer at every frame cost work growing with its length at each frame (quadratic over the
// answer); this keeps each frame's work to the last block.
//
// A block is finished at a blank line outside a fenced code block that is followed by a line starting
// at its first column (not a list item, whose list must be parsed with what came before). Drawn so,
// an answer shows what the history will show when it draws it whole; an answer holding a link
// reference definition (`[name]: url`, which may name a link in an earlier block) is drawn whole
// once when it ends.

const REFERENCE_DEFINITION = /^ {0,3}\[[^\]]+\]:/m;

export class StreamingMarkdown {
  /** `element`: the part's `.markdown` container; `render(target, text)`: the sanitizing renderer. */
  constructor(element) {
    this.element = element;
    // How much of the text is drawn as finished blocks, and the nodes of the unfinished rest.
    this.settled = 0;
    this.tail = [];
    // The scan of complete lines: where it stopped, the open fence ("```" or "~~~", with its
    // length), and whether the last line was blank.
    this.scanned = 0;
    this.fence = null;
    this.blank = false;
    this.boundary = 0;
    // Whether what is on screen was drawn in pieces (and must be drawn whole at the end).
    this.incremental = false;
  }

  /** Draw `text` (the answer so far): new finished blocks once, the rest anew. `last`: the answer
   * ended, so its last block is finished too. Code is highlighted in finished blocks only (not
   * again at every pass over the block still being written). */
  update(text, render, last = false) {
    this.incremental = true;
    this.scan(text);
    if (this.boundary > this.settled) {
      this.element.append(...this.redraw(text.slice(this.settled, this.boundary), render, true));
      this.settled = this.boundary;
    }
    this.tail = this.redraw(text.slice(this.settled), render, last);
    this.element.append(...this.tail);
  }

  /** `text` drawn in place of the unfinished block's nodes; the renderer keeps their images (an
   * image is fetched once, not at every frame). The new nodes, not yet in the page. */
  redraw(text, render, finished) {
    const holder = document.createElement("div");
    holder.append(...this.tail);
    this.tail = [];
    if (text) {
      render(holder, text, { highlight: finished });
    } else {
      holder.replaceChildren();
    }
    return [...holder.childNodes];
  }

  /** The answer ended as `text`: its last block drawn, or all of it when a block may refer to another. */
  finish(text, render) {
    if (REFERENCE_DEFINITION.test(text)) {
      this.full(text, render);
    } else {
      this.update(text, render, true);
    }
  }

  /** Draw `text` whole (the renderer changed, say); incremental drawing starts over. */
  full(text, render) {
    render(this.element, text);
    this.incremental = false;
    this.settled = this.scanned = this.boundary = 0;
    this.fence = null;
    this.blank = false;
    this.tail = [];
  }

  scan(text) {
    const end = text.lastIndexOf("\n") + 1;
    let at = this.scanned;
    while (at < end) {
      const next = text.indexOf("\n", at) + 1;
      const line = text.slice(at, next - 1);
      if (this.fence) {
        const closing = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(line);
        if (closing && closing[1][0] === this.fence[0] && closing[1].length >= this.fence.length) {
          this.fence = null;
        }
        this.blank = false;
      } else if (/^\s*$/.test(line)) {
        this.blank = true;
      } else {
        if (this.blank && /^\S/.test(line) && !/^(?:[-*+]|\d{1,9}[.)])(?:\s|$)/.test(line)) {
          this.boundary = at;
        }
        const opening = /^ {0,3}(`{3,}|~{3,})/.exec(line);
        if (opening) {
          this.fence = opening[1];
        }
        this.blank = false;
      }
      at = next;
    }
    this.scanned = end;
  }
}
