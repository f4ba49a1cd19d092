// Small DOM helpers. Text always goes in as text nodes: nothing here parses HTML.

const SVG = "http://www.w3.org/2000/svg";

/** `h("button", {class: "x", "aria-label": "Close"}, [child, "text"])`; null attributes are left out. */
export function h(tag, attributes = {}, children = []) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined && value !== false) {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  for (const child of Array.isArray(children) ? children : [children]) {
    if (child !== null && child !== undefined) {
      element.append(child);
    }
  }
  return element;
}

/** `mark_notification_read` → "Mark notification read". */
export function humanize(name) {
  const words = String(name).replace(/[_-]+/g, " ").trim();
  return words ? words[0].toUpperCase() + words.slice(1) : "";
}

// 24×24 stroke icons.
const ICONS = {
  chat: "M5 5h14a1 1 0 0 1 1 1v9a1 1 0 0 1-1 1h-7l-4 3.5V16H5a1 1 0 0 1-1-1V6a1 1 0 0 1 1-1Z",
  close: "M6 6l12 12M18 6 6 18",
  paperclip: "M16.5 7.5 9 15a2 2 0 0 0 2.8 2.8l7.8-7.8a4 4 0 0 0-5.7-5.7L6 12.2a6 6 0 0 0 8.5 8.5l6-6",
  expand: "M14 4h6v6M10 20H4v-6M20 4l-7 7M4 20l7-7",
  collapse: "M20 4l-6 6m0-5v5h5M4 20l6-6m0 5v-5H5",
  list: "M4 6h16M4 12h16M4 18h10",
  plus: "M12 5v14M5 12h14",
  send: "M5 12h13M13 6l6 6-6 6",
  stop: "M7 7h10v10H7z",
  pencil: "M4 20h4L19 9l-4-4L4 16v4ZM13.5 6.5l4 4",
  trash: "M5 7h14M10 7V5h4v2M7 7l1 12h8l1-12",
  back: "M15 6l-6 6 6 6",
  copy: "M9 9h10v10H9zM5 15V5h10",
  refresh: "M20 11a8 8 0 1 0-2.3 5.7M20 5v6h-6",
  review: "M12 3l7 3v5c0 4.5-3 8-7 10-4-2-7-5.5-7-10V6l7-3ZM8.5 12l2.5 2.5 4.5-5",
};

export function icon(name) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  svg.setAttribute("class", `icon icon-${name}`);
  const path = document.createElementNS(SVG, "path");
  path.setAttribute("d", ICONS[name]);
  svg.append(path);
  return svg;
}

/** A filled icon from a path. */
export function filledIcon(d) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  svg.setAttribute("class", "icon filled");
  const path = document.createElementNS(SVG, "path");
  path.setAttribute("d", d);
  svg.append(path);
  return svg;
}

/** "just now", "5 min ago", "3 h ago", "yesterday", or a date. */
export function relativeTime(iso, now = Date.now()) {
  const then = Date.parse(iso);
  if (Number.isNaN(then)) {
    return "";
  }
  const seconds = Math.max(0, (now - then) / 1000);
  if (seconds < 60) {
    return "just now";
  }
  if (seconds < 3600) {
    return `${Math.floor(seconds / 60)} min ago`;
  }
  if (seconds < 86400) {
    return `${Math.floor(seconds / 3600)} h ago`;
  }
  if (seconds < 172800) {
    return "yesterday";
  }
  return new Date(then).toLocaleDateString(undefined, { month: "short", day: "numeric", year: "numeric" });
}

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
// A time as tools give it: ISO 8601 in the organization's time zone (with its offset).
const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?$/;

/** A scalar as people read it: Yes / No, a tool's ISO time as "Nov 26, 2026, 10:15", else its text. */
export function readable(value) {
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
