// Northwind's own script: what a product writes to embed the Vernis assistant (SPEC §11).
// Everything here uses the element's public surface only: getToken, pageContext, open/close and the
// vernis:* events.

const assistant = document.querySelector("vernis-assistant");
const list = document.getElementById("contact-list");
const detail = document.getElementById("contact");
const listing = document.getElementById("contacts");
const activity = document.getElementById("activity");
const state = document.getElementById("assistant-state");

if (assistant) {
  // The host's own endpoint signs a short-lived token for its signed-in user; the assistant asks
  // again before it expires, and after the server ended the session.
  assistant.getToken = () =>
    fetch("/vernis-token", { cache: "no-store" }).then((response) => {
      if (!response.ok) {
        throw new Error(`no token (HTTP ${response.status})`);
      }
      return response.text();
    });
  assistant.pageContext = { route: "/contacts" };

  assistant.addEventListener("vernis:open", () => {
    state.textContent = "open";
    note("Assistant opened");
  });
  assistant.addEventListener("vernis:close", () => {
    state.textContent = "closed";
    note("Assistant closed");
  });
  // A tool changed something (or tried to): show it, and reload what this page shows.
  assistant.addEventListener("vernis:tool-completed", (event) => {
    const { toolName, status, summary } = event.detail;
    note(`${toolName} · ${status} · ${summary}`, "tool");
    if (status === "ok") {
      refresh();
    }
  });
}

list.addEventListener("click", (event) => {
  const button = event.target.closest("button.contact");
  if (button) {
    show(button.dataset.id, button.dataset.name, button.querySelector(".contact-company").textContent);
  }
});

document.getElementById("back").addEventListener("click", () => {
  detail.hidden = true;
  listing.hidden = false;
  if (assistant) {
    assistant.pageContext = { route: "/contacts" };
  }
});

function show(id, name, company) {
  document.getElementById("contact-title").textContent = name;
  document.getElementById("contact-company").textContent = company;
  listing.hidden = true;
  detail.hidden = false;
  detail.dataset.id = id;
  if (assistant) {
    assistant.pageContext = { route: `/contacts/${id}`, entity_type: "contact", entity_id: id };
  }
}

async function refresh() {
  const response = await fetch(`/contacts.json${location.search}`, { cache: "no-store" });
  if (!response.ok) {
    return;
  }
  const { contacts } = await response.json();
  list.replaceChildren(
    ...contacts.map((contact) => {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "contact";
      button.dataset.id = contact.id;
      button.dataset.name = contact.name;
      const name = document.createElement("span");
      name.className = "contact-name";
      name.textContent = contact.name;
      const company = document.createElement("span");
      company.className = "contact-company";
      company.textContent = contact.company;
      button.append(name, company);
      const item = document.createElement("li");
      item.append(button);
      return item;
    }),
  );
  list.dataset.refreshed = String(Number(list.dataset.refreshed || 0) + 1);
}

function note(text, kind = "event") {
  const item = document.createElement("li");
  item.className = kind;
  item.textContent = text;
  activity.prepend(item);
}
