// Attachments in the composer (SPEC §21): files the user adds with the attach button, by pasting or
// by dropping them on the panel are uploaded at once (POST /api/assistant/attachments, with a
// progress bar), shown as thumbnails (images) or chips (documents), each removable by keyboard,
// and sent with the next message. A refused file says why (too large, not allowed, over quota).
// `attachmentList()` draws a sent message's files, in the composer's style, in the conversation.

import { h, icon } from "./dom.js";

export const MAX_ATTACHMENTS = 5;
const ACCEPT = "image/png,image/jpeg,image/gif,image/webp,application/pdf,text/plain,text/csv,text/markdown,application/json,.md,.csv,.json,.txt";

/** "12 KB", "3.4 MB". */
export function fileSize(bytes) {
  if (bytes < 1024) {
    return `${bytes} bytes`;
  }
  if (bytes < 1024 * 1024) {
    return `${Math.round(bytes / 1024)} KB`;
  }
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}

/** A data: URL of a blob (the panel's pages allow data: images, not blob: ones). */
function dataUrl(blob) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(blob);
  });
}

/** What the user reads when the server refused a file. */
function refusal(status, body) {
  const message = body && body.error && typeof body.error.message === "string" ? body.error.message : "";
  if (status === 413) {
    return message || "Too large to attach.";
  }
  if (status === 415) {
    return message || "This kind of file cannot be attached.";
  }
  if (status === 429) {
    return message || "Your attachments are over their quota.";
  }
  if (status === 0) {
    return "Not uploaded: the connection failed.";
  }
  return message || `Not uploaded (HTTP ${status}).`;
}

export class Composer {
  /**
   * `server()`: the Vernis origin; `token()`: a promise of the host's token (null: the cookie);
   * `changed()`: called when the files or their state change (Send waits for uploads).
   */
  constructor({ server, token, changed }) {
    this.server = server;
    this.token = token;
    this.changed = changed;
    this.items = [];
    this.input = h("input", { type: "file", multiple: "", accept: ACCEPT, hidden: "", tabindex: "-1", "aria-hidden": "true" });
    this.input.addEventListener("change", () => {
      this.add(Array.from(this.input.files || []));
      this.input.value = "";
    });
    this.button = h("button", { type: "button", class: "icon-button attach", "aria-label": "Attach files", title: "Attach files (or paste, or drop them here)" }, [icon("paperclip")]);
    this.button.addEventListener("click", () => this.input.click());
    this.tray = h("ul", { class: "attachments composer-attachments", "aria-label": "Attached files", hidden: "" });
    this.status = h("p", { class: "sr-only", "aria-live": "polite" });
    this.element = h("div", { class: "attachment-tray" }, [this.tray, this.status, this.input]);
  }

  /** Files are still uploading: the message waits for them. */
  get uploading() {
    return this.items.some((item) => item.state === "uploading");
  }

  /** The ids of the uploaded files, in order. */
  ids() {
    return this.items.filter((item) => item.state === "done").map((item) => item.attachment.attachment_id);
  }

  /** The uploaded files as the server described them (for the sent message's bubble). */
  sent() {
    return this.items.filter((item) => item.state === "done").map((item) => ({ ...item.attachment, preview: item.preview }));
  }

  clear() {
    for (const item of this.items) {
      if (item.request) {
        item.request.abort();
      }
    }
    this.items = [];
    this.tray.replaceChildren();
    this.tray.hidden = true;
    this.changed();
  }

  add(files) {
    for (const file of files) {
      if (this.items.filter((item) => item.state !== "error").length >= MAX_ATTACHMENTS) {
        this.announce(`At most ${MAX_ATTACHMENTS} files per message: ${file.name || "a file"} was not attached.`);
        this.addItem(file, `At most ${MAX_ATTACHMENTS} files per message.`);
        continue;
      }
      this.addItem(file, null);
    }
    this.changed();
  }

  addItem(file, error) {
    const name = file.name || (file.type.startsWith("image/") ? "pasted image" : "file");
    const item = { file, name, state: error ? "error" : "uploading", attachment: null, preview: null, request: null };
    const progress = h("progress", { max: "100", value: "0", "aria-label": `Uploading ${name}` });
    const note = h("span", { class: "attachment-note" });
    const remove = h("button", { type: "button", class: "icon-button small remove", "aria-label": `Remove ${name}`, title: "Remove" }, [icon("close")]);
    const thumb = h("span", { class: "attachment-thumb", "aria-hidden": "true" }, [icon("paperclip")]);
    item.element = h("li", { class: "attachment", "data-state": item.state }, [
      thumb,
      h("span", { class: "attachment-text" }, [h("span", { class: "attachment-name", dir: "auto" }, name), note, progress]),
      remove,
    ]);
    remove.addEventListener("click", () => this.remove(item));
    this.items.push(item);
    this.tray.append(item.element);
    this.tray.hidden = false;
    if (file.type.startsWith("image/") && file.size < 20 * 1024 * 1024) {
      dataUrl(file).then((url) => {
        item.preview = url;
        thumb.replaceChildren(h("img", { src: url, alt: "" }));
      }, () => {});
    }
    if (error) {
      this.fail(item, error);
      return;
    }
    this.upload(item, progress, note);
  }

  async upload(item, progress, note) {
    let token = null;
    try {
      token = await this.token();
    } catch {
      token = null;
    }
    if (item.state !== "uploading") {
      return; // removed meanwhile
    }
    const request = new XMLHttpRequest();
    item.request = request;
    request.open("POST", `${this.server()}/api/assistant/attachments`);
    if (token) {
      request.setRequestHeader("Authorization", `Bearer ${token}`);
    }
    request.responseType = "json";
    request.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) {
        progress.value = Math.round((event.loaded / event.total) * 100);
      }
    });
    request.addEventListener("load", () => {
      item.request = null;
      if (request.status === 201 && request.response && request.response.attachment_id) {
        item.attachment = request.response;
        item.state = "done";
        item.element.dataset.state = "done";
        progress.remove();
        note.textContent = fileSize(request.response.size);
        this.announce(`${item.name} attached.`);
        this.changed();
        return;
      }
      this.fail(item, refusal(request.status, request.response));
    });
    request.addEventListener("error", () => {
      item.request = null;
      this.fail(item, refusal(0, null));
    });
    const form = new FormData();
    form.append("file", item.file, item.name);
    request.send(form);
  }

  fail(item, message) {
    item.state = "error";
    item.element.dataset.state = "error";
    const progress = item.element.querySelector("progress");
    if (progress) {
      progress.remove();
    }
    const note = item.element.querySelector(".attachment-note");
    note.textContent = message;
    note.setAttribute("role", "alert");
    this.changed();
  }

  remove(item) {
    if (item.request) {
      item.request.abort();
    }
    if (item.state === "done") {
      // Not sent: the server forgets it too (it would count against the quota).
      this.forget(item.attachment.attachment_id);
    }
    item.state = "removed";
    const index = this.items.indexOf(item);
    this.items.splice(index, 1);
    // Focus goes on to the next file's remove button, else back to the attach button.
    const next = this.items[index] || this.items[index - 1];
    item.element.remove();
    this.tray.hidden = this.items.length === 0;
    (next ? next.element.querySelector(".remove") : this.button).focus();
    this.announce(`${item.name} removed.`);
    this.changed();
  }

  async forget(id) {
    try {
      const token = await this.token();
      await fetch(`${this.server()}/api/assistant/attachments/${encodeURIComponent(id)}`, {
        method: "DELETE",
        headers: token ? { Authorization: `Bearer ${token}` } : {},
        credentials: token ? "omit" : "same-origin",
      });
    } catch (error) {
      console.warn("Vernis: a removed attachment was not deleted on the server", error);
    }
  }

  announce(text) {
    this.status.textContent = text;
  }
}

/**
 * A sent message's files: thumbnails for images (fetched with `load(id)`, a promise of a data: URL,
 * or shown from `preview` when the composer had one), chips for documents; each opens the file.
 */
export function attachmentList(attachments, { load, open }) {
  const list = h("ul", { class: "attachments message-attachments", "aria-label": "Attached files" });
  for (const attachment of attachments) {
    const label = `${attachment.name} (${fileSize(attachment.size)})`;
    const thumb = h("span", { class: "attachment-thumb", "aria-hidden": "true" }, [icon("paperclip")]);
    const link = h("button", { type: "button", class: "attachment-open", title: `Open ${attachment.name}` }, [
      thumb,
      h("span", { class: "attachment-text" }, [h("span", { class: "attachment-name", dir: "auto" }, attachment.name), h("span", { class: "attachment-note" }, fileSize(attachment.size))]),
    ]);
    link.setAttribute("aria-label", `Open ${label}`);
    link.addEventListener("click", () => open(attachment));
    list.append(h("li", { class: "attachment", "data-kind": attachment.kind }, [link]));
    if (attachment.kind === "image") {
      const shown = attachment.preview ? Promise.resolve(attachment.preview) : load(attachment.attachment_id);
      shown.then((url) => thumb.replaceChildren(h("img", { src: url, alt: "" })), () => {});
    }
  }
  return list;
}

/** GET a member's attachment as a Blob (with the host's token, else the cookie). */
export async function fetchAttachment(server, token, id) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const response = await fetch(`${server}/api/assistant/attachments/${encodeURIComponent(id)}`, {
    headers,
    credentials: token ? "omit" : "same-origin",
  });
  if (!response.ok) {
    throw new Error(`attachment ${id}: HTTP ${response.status}`);
  }
  return response.blob();
}

export { dataUrl };
