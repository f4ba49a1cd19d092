// The Reviews view (SPEC §23), for members who review others' writes: the requests waiting for them
// (`review_list`, then `review_required` / `review_resolved` as they come), each with what it would
// change, who asked, a note, and Approve / Reject (`review_tool`). All text from the server goes in as
// text.

import { h, humanize, relativeTime } from "./dom.js";
import { renderPreview } from "./messages.js";

export class ReviewsView {
  /** `actions`: {answer(reviewId, approved, note) -> bool, close()}; `counted(n)`: the badge. */
  constructor(actions, counted) {
    this.actions = actions;
    this.counted = counted;
    this.items = new Map();
    this.list = h("ul", { class: "reviews-list", "aria-label": "Changes waiting for your review" });
    this.status = h("p", { class: "reviews-status", role: "status" }, "Loading…");
    this.element = h("section", { class: "reviews", id: "vernis-reviews", "aria-labelledby": "vernis-reviews-title", hidden: "" }, [
      h("div", { class: "picker-head" }, [h("h3", { id: "vernis-reviews-title", class: "picker-title" }, "Reviews")]),
      h("div", { class: "picker-scroll" }, [this.status, this.list]),
    ]);
    this.element.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        this.actions.close();
      }
    });
  }

  get isOpen() {
    return !this.element.hidden;
  }

  open() {
    this.element.hidden = false;
  }

  close() {
    this.element.hidden = true;
  }

  /** The whole list (`review_list`). A request already shown keeps its element, and the element
   * stays in the document unless the order changed, so a note being typed (its text and its focus:
   * taking a focused field out of the document blurs it), or an answer on its way, survives a list
   * that arrives meanwhile (a reconnect, say, or the view reopened). */
  setReviews(reviews) {
    const kept = new Map();
    for (const review of reviews) {
      if (!review || typeof review.review_id !== "string" || kept.has(review.review_id)) {
        continue;
      }
      kept.set(review.review_id, this.items.get(review.review_id) || this.item(review));
    }
    for (const [reviewId, item] of this.items) {
      if (!kept.has(reviewId)) {
        item.element.remove();
      }
    }
    let next = this.list.firstElementChild;
    for (const item of kept.values()) {
      if (item.element === next) {
        next = next.nextElementSibling;
      } else {
        this.list.insertBefore(item.element, next);
      }
    }
    this.items = kept;
    this.update();
  }

  /** A new request (`review_required`). */
  add(review) {
    if (!review || typeof review.review_id !== "string" || this.items.has(review.review_id)) {
      return;
    }
    const item = this.item(review);
    this.items.set(review.review_id, item);
    this.list.append(item.element);
    this.update();
  }

  /** A request answered or expired (`review_resolved`): it leaves the list. */
  remove(reviewId) {
    const item = this.items.get(reviewId);
    if (item) {
      item.element.remove();
      this.items.delete(reviewId);
      this.update();
    }
  }

  /** A command failed: a review waiting for its answer gets its buttons back. */
  commandFailed() {
    for (const item of this.items.values()) {
      if (item.waiting) {
        item.waiting = false;
        item.approve.disabled = item.reject.disabled = item.note.disabled = false;
      }
    }
  }

  update() {
    const count = this.items.size;
    this.status.textContent = count ? "" : "Nothing waits for your review.";
    this.status.hidden = count > 0;
    this.counted(count);
  }

  item(review) {
    const preview = review.preview;
    const heading = (preview && typeof preview === "object" && typeof preview.action === "string" && preview.action) || `${humanize(review.tool_name)}?`;
    const asked = [review.requester_name ? `Asked by ${review.requester_name}` : "Asked", review.created_at ? relativeTime(review.created_at) : ""]
      .filter(Boolean)
      .join(" · ");
    const note = h("textarea", { class: "review-note", rows: "2", maxlength: "2000", dir: "auto", "aria-label": "Note (optional)", placeholder: "Note (optional)" });
    const approve = h("button", { type: "button", class: "button primary approve" }, "Approve");
    const reject = h("button", { type: "button", class: "button reject" }, "Reject");
    const element = h("li", { class: "review", "data-review-id": review.review_id }, [
      h("div", { class: "confirm", role: "group", "aria-label": `Review: ${heading}` }, [
        h("p", { class: "confirm-title" }, heading),
        h("p", { class: "review-asked" }, asked),
        renderPreview(preview),
        note,
        h("div", { class: "confirm-actions" }, [approve, reject]),
      ]),
    ]);
    const item = { element, approve, reject, note, waiting: false };
    const answer = (approved) => {
      item.waiting = true;
      approve.disabled = reject.disabled = note.disabled = true;
      const text = note.value.trim();
      if (!this.actions.answer(review.review_id, approved, text || null)) {
        this.commandFailed();
      }
    };
    approve.addEventListener("click", () => answer(true));
    reject.addEventListener("click", () => answer(false));
    return item;
  }
}
