// UI blocks (SPEC §16): what a tool result shows as components under its card. The server has
// checked every block (kind, schema, links); here each kind becomes accessible DOM, text as text:
// `table` a real <table> paged by 20 rows, `entity` a card of labelled fields, `links` link buttons,
// `metrics` a strip of figures. A toolkit's own kind goes to the renderer the host page registered
// for it (`el.registerRenderer`), else to a plain label/value view.

import { h, readable } from "./dom.js";

export const PAGE_ROWS = 20;

/**
 * The element showing `blocks`. `renderers`: kind -> (data, container) => void, the host's;
 * `fallback(data)`: an element showing any value as labelled rows; `navigate(url)`: true when the
 * host took a relative link's navigation itself.
 */
export function renderBlocks(blocks, { renderers = new Map(), fallback, navigate = () => false } = {}) {
  const container = h("div", { class: "ui-blocks" });
  for (const block of blocks) {
    if (!block || typeof block.kind !== "string" || !block.data || typeof block.data !== "object") {
      continue;
    }
    const element = h("div", { class: "ui-block", "data-kind": block.kind });
    const own = renderers.get(block.kind);
    if (own) {
      try {
        own(block.data, element);
      } catch (error) {
        console.error(`vernis: the renderer of ${block.kind} failed`, error);
        element.replaceChildren(fallback(block.data));
      }
    } else if (BUILT_IN[block.kind]) {
      element.append(BUILT_IN[block.kind](block.data, navigate));
    } else {
      element.append(fallback(block.data));
    }
    container.append(element);
  }
  return container;
}

function text(value) {
  if (value === null || value === undefined) {
    return "";
  }
  return typeof value === "number" ? value.toLocaleString() : readable(value);
}

function link(label, url, navigate, attributes = {}) {
  const anchor = h("a", { href: url, dir: "auto", ...attributes }, label);
  if (!/^[a-z][a-z0-9+.-]*:/i.test(url)) {
    // A path on the host's own site: the host page may route it itself (a single-page app).
    anchor.addEventListener("click", (event) => {
      if (!event.defaultPrevented && event.button === 0 && !event.metaKey && !event.ctrlKey && !event.shiftKey && navigate(url)) {
        event.preventDefault();
      }
    });
  } else {
    anchor.target = "_blank";
    anchor.rel = "noopener noreferrer";
  }
  return anchor;
}

function table(data) {
  const columns = data.columns || [];
  const rows = data.rows || [];
  const body = h("tbody");
  const wrapper = h("div", { class: "ui-table" }, [
    h("div", { class: "ui-table-scroll", tabindex: "0", role: "region", "aria-label": "Table" }, [
      h("table", {}, [
        h("thead", {}, h("tr", {}, columns.map((column) => h("th", { scope: "col", dir: "auto" }, text(column.label))))),
        body,
      ]),
    ]),
  ]);
  const total = Number.isInteger(data.total) && data.total > rows.length ? data.total : rows.length;
  const status = h("p", { class: "ui-table-status", "aria-live": "polite" });
  let first = 0;
  const show = () => {
    body.replaceChildren(
      ...rows.slice(first, first + PAGE_ROWS).map((row) =>
        h("tr", {}, columns.map((column) => h("td", { dir: "auto" }, text(row[column.key])))),
      ),
    );
    const last = Math.min(first + PAGE_ROWS, rows.length);
    status.textContent = rows.length
      ? `${first + 1}–${last} of ${total.toLocaleString()}`
      : "No rows.";
    previous.disabled = first === 0;
    next.disabled = last >= rows.length;
  };
  const previous = h("button", { type: "button", class: "button ui-page-previous" }, "Previous");
  const next = h("button", { type: "button", class: "button ui-page-next" }, "Next");
  previous.addEventListener("click", () => {
    first = Math.max(0, first - PAGE_ROWS);
    show();
  });
  next.addEventListener("click", () => {
    first = Math.min(first + PAGE_ROWS, Math.max(0, rows.length - 1));
    show();
  });
  const foot = h("div", { class: "ui-table-foot" }, [status]);
  if (rows.length > PAGE_ROWS) {
    foot.append(h("div", { class: "ui-table-pages" }, [previous, next]));
  }
  wrapper.append(foot);
  show();
  return wrapper;
}

function entity(data, navigate) {
  const title = data.url ? link(text(data.title), data.url, navigate) : text(data.title);
  return h("section", { class: "ui-entity", "aria-label": text(data.title), "data-entity-type": data.entity_type, "data-entity-id": data.entity_id }, [
    h("h4", { class: "ui-entity-title", dir: "auto" }, title),
    h(
      "dl",
      { class: "ui-entity-fields" },
      (data.fields || []).flatMap((field) => [h("dt", { dir: "auto" }, text(field.label)), h("dd", { dir: "auto" }, text(field.value))]),
    ),
  ]);
}

function links(data, navigate) {
  return h(
    "nav",
    { class: "ui-links", "aria-label": "Links" },
    (data.links || []).map((item) => link(text(item.label), item.url, navigate, { class: "button" })),
  );
}

function metrics(data) {
  return h(
    "ul",
    { class: "ui-metrics", "aria-label": "Figures" },
    (data.items || []).map((item) => {
      const parts = [h("span", { class: "ui-metric-label", dir: "auto" }, text(item.label)), h("strong", { class: "ui-metric-value" }, text(item.value))];
      if (item.delta !== undefined && item.delta !== null) {
        const delta = text(item.delta);
        const sign = typeof item.delta === "number" ? Math.sign(item.delta) : delta.startsWith("-") || delta.startsWith("−") ? -1 : 1;
        parts.push(h("span", { class: "ui-metric-delta", "data-sign": sign < 0 ? "down" : "up" }, typeof item.delta === "number" && item.delta > 0 ? `+${delta}` : delta));
      }
      return h("li", { class: "ui-metric" }, parts);
    }),
  );
}

const BUILT_IN = { table, entity, links, metrics };
