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

let renderer = null;

/**
 * Load the libraries once. `allowedImageOrigins`: the origins images may load from (the host page's
 * and the Vernis server's); any other image becomes its alt text.
 */
export async function loadMarkdown(baseUrl, allowedImageOrigins) {
  if (renderer) {
    return renderer;
  }
  try {
    const [{ Marked }, purifyModule] = await Promise.all([
      import(new URL("../vendor/marked.js", baseUrl).href),
      import(new URL("../vendor/purify.js", baseUrl).href),
    ]);
    renderer = createRenderer(Marked, purifyModule.default, allowedImageOrigins);
  } catch (error) {
    console.warn("Vernis: markdown libraries unavailable, showing plain text", error);
    renderer = plainText;
  }
  return renderer;
}

function plainText(target, text) {
  target.textContent = text;
}

function createRenderer(Marked, createPurify, allowedImageOrigins) {
  const marked = new Marked({ gfm: true, breaks: true, async: false });
  // A fresh DOMPurify instance: its hooks stay ours even if the host page uses DOMPurify too.
  const purify = createPurify(window);
  const allowed = new Set(allowedImageOrigins);

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
    RETURN_DOM_FRAGMENT: true,
  };

  return function render(target, text) {
    const fragment = purify.sanitize(marked.parse(text), config);
    for (const image of fragment.querySelectorAll("img[data-blocked]")) {
      const note = document.createElement("span");
      note.className = "blocked-image";
      note.textContent = image.getAttribute("alt") ? `[image: ${image.getAttribute("alt")}]` : "[image]";
      note.title = "Images from other sites are not shown";
      image.replaceWith(note);
    }
    target.replaceChildren(fragment);
  };
}

function resolve(href) {
  try {
    return new URL(href, location.href);
  } catch {
    return null;
  }
}
