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
//
// Finished blocks are kept in groups (`div.blocks`, GROUP_NODES nodes or a few more), which the
// browser skips whole while out of view (`content-visibility`, assistant.css): a frame's style,
// layout and paint then visit a long answer's groups, not each of its blocks, and cost about the
// same at its end as at its start (bench/results/2026-11-panel.md). A group contains its blocks'
// margins, so one starts only at a block with no top margin (a paragraph, a list, code, a table;
// not a heading): the space between two groups is then the last block's bottom margin, as between
// two blocks. The groups depend on the blocks only, so an answer drawn whole (the history) is
// grouped as it was while it streamed.

const REFERENCE_DEFINITION = /^ {0,3}\[[^\]]+\]:/m;

// The nodes a group holds before the next block that may open one starts another.
const GROUP_NODES = 16;

/** Whether `node` may open a group: a block with no top margin of its own (assistant.css). */
function opensGroup(node) {
  if (node.nodeType !== Node.ELEMENT_NODE) {
    return false;
  }
  const tag = node.tagName;
  return tag === "P" || tag === "UL" || tag === "OL" || node.classList.contains("code-block") || node.classList.contains("table-scroll");
}

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
    // The group finished blocks go into (see GROUP_NODES).
    this.group = null;
  }

  /** Draw `text` (the answer so far): new finished blocks once, the rest anew. `last`: the answer
   * ended, so its last block is finished too. Code is highlighted in finished blocks only (not
   * again at every pass over the block still being written). */
  update(text, render, last = false) {
    this.incremental = true;
    this.scan(text);
    if (this.boundary > this.settled) {
      this.keep(this.redraw(text.slice(this.settled, this.boundary), render, true));
      this.settled = this.boundary;
    }
    const tail = this.redraw(text.slice(this.settled), render, last);
    if (last) {
      this.keep(tail);
    } else {
      this.tail = tail;
      this.element.append(...tail);
    }
  }

  /** Finished blocks' `nodes` into the groups, after those there (the unfinished block's nodes are
   * out of the page while a pass draws: see redraw). */
  keep(nodes) {
    if (!nodes.length) {
      return;
    }
    let run = [];
    for (const node of nodes) {
      if (!this.group || (this.group.childNodes.length + run.length >= GROUP_NODES && opensGroup(node))) {
        if (this.group) {
          this.group.append(...run);
        }
        run = [];
        this.group = document.createElement("div");
        this.group.className = "blocks";
        this.element.append(this.group);
      }
      run.push(node);
    }
    this.group.append(...run);
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
    const nodes = [...this.element.childNodes];
    this.element.replaceChildren();
    this.group = null;
    this.keep(nodes);
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
