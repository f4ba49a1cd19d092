/*
 * Vernis assistant: the one script a host page includes.
 *
 *   <script src="https://vernis.example.com/static/vernis/assistant.js" defer></script>
 *
 * adds the assistant (a launcher button and its slide-over panel) to the page. To place it yourself,
 * or to set options, put the element in the page instead:
 *
 *   <vernis-assistant entity-type="contact" entity-id="c-123"></vernis-assistant>
 *   <script type="module" src="https://vernis.example.com/static/vernis/element.js"></script>
 *
 * Page context: the assistant sends `location.pathname` with each message, and the entity the page
 * shows when the element or <body> carries `data-entity-type` / `data-entity-id` (or the element's
 * `entity-type` / `entity-id` attributes).
 *
 * This file is a classic script so that it works with a plain `defer`; it loads the ES modules next
 * to it. Add `data-mount="manual"` to the script tag to define the element without adding one.
 */
(function () {
  "use strict";
  var script = document.currentScript;
  if (!script || !script.src) {
    return;
  }
  var manual = script.getAttribute("data-mount") === "manual";
  import(new URL("element.js", script.src).href)
    .then(function (module) {
      if (!manual) {
        module.mount();
      }
    })
    .catch(function (error) {
      console.error("Vernis assistant failed to load", error);
    });
})();
