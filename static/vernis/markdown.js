// Markdown from the model, rendered by `marked` and sanitized by DOMPurify: model output is
// untrusted. Nothing it writes can run a script, leave a `javascript:` (or any non-web) link, load an
// image from another host, or style the page. The libraries are copied into ../vendor/ from the
// npm lockfile by scripts/bootstrap; without them, text is shown as plain text (still safe).

const SAFE_LINK = /^(?:https?:|mailto:|tel:)/i;
const FORBID_TAGS = [
  "style", "script", "iframe", "frame", "object", "embed", "form", "input", "button", "textarea",
  "select", "option", "link", "meta", "base", "svg", "math", "video", "audio", "source", "track",
  "template", "dialog",
];
const FORBID_ATTR = ["style", "class", "id", "srcset", "action", "formaction", "background", "ping"];

// The blocks laid out in their own text's direction (`dir="auto"` on each).
const DIRECTED_BLOCKS = "p, li, th, td, h1, h2, h3, h4, h5, h6, blockquote, dt, dd";

let renderer = null;

// Markdown of every common kind, drawn once and thrown away (see loadMarkdown).
const WARM_UP = [
  "## A heading",
  "Some *emphasis*, **strong** text, `code`, a [link](https://example.com) and www.example.com.",
  "- an item\n- another\n\n1. first\n2. second",
  "| a | b |\n|---|--:|\n| 1 | 2 |",
  "```\ncode\n```",
  "> a quote",
].join("\n\n");

/**
 * Load the libraries once. `imageOrigins()`: the origins images may load from, asked at each render
 * (the Vernis server's, and those of the configuration's `[embed] image_origins`, which may arrive
 * after the first render); any other image becomes its alt text and is never requested.
 */
export async function loadMarkdown(baseUrl, imageOrigins) {
  if (renderer) {
    return renderer;
  }
  try {
    const [{ Marked }, purifyModule] = await Promise.all([
      import(new URL("../vendor/marked.js", baseUrl).href),
      import(new URL("../vendor/purify.js", baseUrl).href),
    ]);
    renderer = createRenderer(Marked, purifyModule.default, imageOrigins, baseUrl);
    startWorker(baseUrl);
    // The parser's and the sanitizer's code compiled while the page is idle, not in the first
    // passes over an answer (12 to 16 ms of CPU each on a slow machine, mostly compiling).
    const idle = window.requestIdleCallback || ((work) => setTimeout(work, 200));
    idle(() => renderer(document.createElement("div"), WARM_UP, { highlight: false }));
  } catch (error) {
    console.warn("Vernis: markdown libraries unavailable, showing plain text", error);
    renderer = plainText;
  }
  return renderer;
}

function plainText(target, text) {
  target.textContent = text;
}

// A fenced block's language, from the class marked gives its code ("language-python"): read before
// the sanitizer removes every class. Shown as text and used to pick a grammar, nothing else.
const LANGUAGE = /(?:^|\s)language-([\w+#.-]{1,32})(?:\s|$)/;

// highlight.js runs in a worker when the panel's scripts come from the page's own origin (a page
// cannot start a worker from another origin's script): importing it evaluates every grammar it
// bundles, 50 to 100 ms of the main thread in one task, which stalled a streaming answer. The worker
// starts with the renderer, before the socket opens, so that it is ready when the first code is
// drawn (the history's, say), and loads highlight.js apart from the page. Otherwise (another
// origin, or the worker refused or failed to load) highlight.js is loaded in the page the first
// time an answer shows code in a named language (not before: most answers have none): its module
// once loaded, the promise while it loads, and the code elements drawn meanwhile (highlighted when
// it arrives).
let highlighter = null;
let highlighterLoading = null;
const unhighlighted = new Map();
// The worker (null once it is known unavailable, undefined before it is first wanted), and the code
// elements it has been sent, by the id of their message.
let worker;
const sent = new Map();
let sentCount = 0;

function highlight(code, language, baseUrl) {
  const highlighting = startWorker(baseUrl);
  if (highlighting) {
    sentCount += 1;
    sent.set(sentCount, [code, language]);
    highlighting.postMessage({ id: sentCount, code: code.textContent, language });
    return;
  }
  highlightHere(code, language, baseUrl);
}

/** The highlighting worker, started now (once); null when this page cannot have it. */
function startWorker(baseUrl) {
  if (worker !== undefined) {
    return worker;
  }
  const url = new URL("highlight-worker.js", baseUrl);
  worker = null;
  if (url.origin !== location.origin || typeof Worker !== "function") {
    return null;
  }
  try {
    worker = new Worker(url, { type: "module" });
  } catch {
    return null;
  }
  worker.onmessage = ({ data: { id, html } }) => {
    const [code] = sent.get(id) || [];
    sent.delete(id);
    if (code && typeof html === "string") {
      // highlight.js's markup: the code's text escaped, in spans with its classes (no attribute
      // the sanitizer would have to see: nothing the model wrote becomes markup).
      code.innerHTML = html;
    }
  };
  // Not loaded (a Content-Security-Policy without workers, a missing file): the page highlights.
  worker.onerror = (event) => {
    event.preventDefault();
    worker.terminate();
    worker = null;
    for (const [code, language] of sent.values()) {
      highlightHere(code, language, baseUrl);
    }
    sent.clear();
  };
  return worker;
}

function highlightHere(code, language, baseUrl) {
  if (highlighter) {
    if (highlighter.getLanguage(language)) {
      code.innerHTML = highlighter.highlight(code.textContent, { language, ignoreIllegals: true }).value;
    }
    return;
  }
  unhighlighted.set(code, language);
  highlighterLoading ??= import(new URL("../vendor/highlight.js", baseUrl).href).then(
    (module) => {
      highlighter = module.default;
      for (const [waiting, name] of unhighlighted) {
        highlightHere(waiting, name, baseUrl);
      }
      unhighlighted.clear();
    },
    (error) => console.warn("Vernis: syntax highlighting unavailable", error),
  );
}

function createRenderer(Marked, createPurify, imageOrigins, baseUrl) {
  // Raw HTML in the model's markdown becomes its plain text: no markup the model wrote is ever
  // parsed (even a parse in an inert document reports its inline handlers and styles to the host
  // page's Content-Security-Policy). The markdown's own markup is generated by marked.
  const marked = new Marked({ gfm: true, breaks: true, async: false, renderer: { html: ({ text }) => htmlAsText(text) } });
  // A fresh DOMPurify instance: its hooks stay ours even if the host page uses DOMPurify too.
  const purify = createPurify(window);
  let allowed = new Set();

  purify.addHook("afterSanitizeAttributes", (node) => {
    if (node.nodeName === "A") {
      const href = node.getAttribute("href");
      if (href === null) {
        return;
      }
      const url = resolve(href);
      if (!url || !(SAFE_LINK.test(url.protocol) || url.origin === location.origin)) {
        node.removeAttribute("href");
        return;
      }
      if (url.origin !== location.origin) {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer nofollow");
      }
    } else if (node.nodeName === "IMG") {
      const url = resolve(node.getAttribute("src") || "");
      if (!url || !/^https?:$/.test(url.protocol) || !allowed.has(url.origin)) {
        node.setAttribute("data-blocked", "");
        node.removeAttribute("src");
      } else {
        node.setAttribute("loading", "lazy");
        node.setAttribute("referrerpolicy", "no-referrer");
      }
    }
  });

  const config = {
    FORBID_TAGS,
    FORBID_ATTR,
    ALLOW_DATA_ATTR: false,
    ALLOW_UNKNOWN_PROTOCOLS: false,
    // Links: web, mail and phone only; relative links stay (they are on the host's own site).
    ALLOWED_URI_REGEXP: /^(?:(?:https?|mailto|tel):|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i,
    // Sanitized where it was parsed: in an inert document (below), never in the page.
    IN_PLACE: true,
  };
  // The dirty markup is parsed in a document with no browsing context: nothing in it loads, runs or
  // is checked against the host page's Content-Security-Policy (no violation reports for what the
  // sanitizer removes anyway). Only the clean result is moved into the page.
  const inert = document.implementation.createHTMLDocument("");
  // Set once: passed to each `sanitize` instead, the configuration was parsed again at every call
  // (a streaming answer's every pass).
  purify.setConfig(config);

  // `highlight`: false while the text is a streaming answer's block still being written (it is
  // drawn again at the next pass, and highlighted once finished).
  return function render(target, text, { highlight: colour = true } = {}) {
    allowed = new Set(imageOrigins());
    const holder = inert.createElement("div");
    holder.innerHTML = marked.parse(text);
    const languages = new Map();
    for (const code of holder.querySelectorAll("pre > code[class]")) {
      const match = LANGUAGE.exec(code.className);
      if (match) {
        languages.set(code, match[1].toLowerCase());
      }
    }
    purify.sanitize(holder);
    for (const image of holder.querySelectorAll("img[data-blocked]")) {
      const note = inert.createElement("span");
      note.className = "blocked-image";
      note.textContent = image.getAttribute("alt") ? `[image: ${image.getAttribute("alt")}]` : "[image]";
      note.title = "Images from other sites are not shown";
      image.replaceWith(note);
    }
    // Each block takes the direction of its own text (an Arabic paragraph after an English one
    // reads right to left), not the whole answer's first.
    for (const block of holder.querySelectorAll(DIRECTED_BLOCKS)) {
      block.setAttribute("dir", "auto");
    }
    // A table scrolls sideways in a region of its own, which the keyboard can focus and scroll:
    // squeezed into the column, its cells broke words letter by letter.
    for (const table of holder.querySelectorAll("table")) {
      const region = inert.createElement("div");
      region.className = "table-scroll";
      region.setAttribute("role", "region");
      region.setAttribute("tabindex", "0");
      region.setAttribute("aria-label", "Table, scrolls sideways");
      table.replaceWith(region);
      region.append(table);
    }
    // A code block: its language and a copy button above it (the click is handled by the message
    // list), its text highlighted, and a region the keyboard can focus and scroll.
    for (const pre of holder.querySelectorAll("pre")) {
      const code = pre.querySelector("code");
      const language = code ? languages.get(code) : undefined;
      const block = inert.createElement("div");
      block.className = "code-block";
      const head = inert.createElement("div");
      head.className = "code-head";
      const name = inert.createElement("span");
      name.className = "code-language";
      name.textContent = language || "code";
      const copy = inert.createElement("button");
      copy.type = "button";
      copy.className = "code-copy";
      copy.textContent = "Copy";
      copy.setAttribute("aria-label", language ? `Copy the ${language} code` : "Copy the code");
      head.append(name, copy);
      pre.setAttribute("tabindex", "0");
      pre.setAttribute("role", "region");
      pre.setAttribute("aria-label", language ? `Code, ${language}` : "Code");
      pre.setAttribute("dir", "ltr");
      pre.replaceWith(block);
      block.append(head, pre);
      if (code && language && colour) {
        highlight(code, language, baseUrl);
      }
    }
    // Images: an image already shown in `target` (re-rendered at every streamed frame) is kept, not
    // fetched again; a new one gets its `src` only once it is in the page's document.
    const wanted = new Map();
    for (const image of holder.querySelectorAll("img[src]")) {
      wanted.set(image, image.getAttribute("src"));
      image.removeAttribute("src");
    }
    const shown = new Map();
    for (const image of target.querySelectorAll("img[src]")) {
      const src = image.getAttribute("src");
      shown.set(src, [...(shown.get(src) || []), image]);
    }
    const fragment = document.createDocumentFragment();
    // A copy of the list first: adopting a node takes it out of `holder.childNodes`.
    fragment.append(...[...holder.childNodes].map((node) => document.adoptNode(node)));
    for (const [image, src] of wanted) {
      const kept = (shown.get(src) || []).shift();
      if (kept) {
        image.replaceWith(kept);
      } else {
        image.setAttribute("src", src);
      }
    }
    target.replaceChildren(fragment);
  };
}

const HIDDEN_CONTENT = /<(script|style|template|textarea|title|iframe|noscript|noembed|noframes|xmp|svg|math|object)\b[\s\S]*?(?:<\/\1\s*>|$)/gi;

/** A piece of raw HTML as the text it shows (tags, comments and script-like content dropped), escaped. */
function htmlAsText(html) {
  const text = String(html)
    .replace(/<!--[\s\S]*?(?:-->|$)/g, "")
    .replace(HIDDEN_CONTENT, "")
    .replace(/<\/?[a-z!?][^>]*>?/gi, "");
  return text.replace(/&(?![a-z]+;|#[0-9]+;|#x[0-9a-f]+;)/gi, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function resolve(href) {
  try {
    return new URL(href, location.href);
  } catch {
    return null;
  }
}
