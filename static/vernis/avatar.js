// The assistant's face in the panel: its avatar image when the server's configuration names one
// (`avatar_url`), else a monogram of its name ("A" for "Ada") on the theme's accent colour. Always
// decoration beside the name written out (`aria-hidden`): a screen reader reads the name once.

import { h } from "./dom.js";

/** The first letter of `name`, upper-cased (a whole code point: "É", "Ж", "李" too); "?" for none. */
export function monogram(name) {
  const first = Array.from(String(name || "").trim())[0];
  return first ? first.toLocaleUpperCase() : "?";
}

/**
 * A round avatar for `identity` ({name, avatarUrl}); `size` names a CSS modifier ("small", "large").
 * An image that fails to load gives way to the monogram.
 */
export function avatar(identity, size = "small") {
  const element = h("span", { class: `avatar ${size}`, "aria-hidden": "true" });
  paint(element, identity);
  return element;
}

/** Draw `identity` again in an avatar made by `avatar()` (the name or the image changed). */
export function paint(element, identity) {
  const letter = () => {
    element.removeAttribute("data-image");
    element.replaceChildren(h("span", { class: "avatar-letter" }, monogram(identity.name)));
  };
  if (!identity.avatarUrl) {
    letter();
    return;
  }
  const image = h("img", { src: identity.avatarUrl, alt: "", decoding: "async", referrerpolicy: "no-referrer" });
  image.addEventListener("error", letter, { once: true });
  element.setAttribute("data-image", "");
  element.replaceChildren(image);
}
