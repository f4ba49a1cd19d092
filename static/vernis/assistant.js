/*
 * Vernis assistant: the one script a host page includes (SPEC §11), on any origin listed in the
 * server's VERNIS_ALLOWED_ORIGINS:
 *
 *   <script type="module" src="https://vernis.example.com/static/vernis/assistant.js"></script>
 *   <vernis-assistant server="https://vernis.example.com" theme="auto"></vernis-assistant>
 *   <script>
 *     document.querySelector("vernis-assistant").getToken = () => fetch("/my/vernis-token").then((r) => r.text());
 *   </script>
 *
 * It defines <vernis-assistant> and, when the page has none, adds one at the end of <body>. To
 * define the element without adding one, import `element.js` (next to this file) instead. What the
 * element takes and dispatches (the token, the page context, events, theming) is described at the
 * top of `element.js` and `assistant.css`.
 */
import { mount } from "./element.js";

mount();
