// Northwind's own script: what a product writes to embed the Vernis assistant (SPEC §11).
// Everything here uses the element's public surface only: getToken, pageContext, open/close, the
// vernis:* events, registerRenderer, and the page's own tools (navigate, registerTool).

const assistant = document.querySelector("vernis-assistant");
const list = document.getElementById("contact-list");
const detail = document.getElementById("contact");
const listing = document.getElementById("contacts");
const activity = document.getElementById("activity");
const state = document.getElementById("assistant-state");
const newContact = document.getElementById("new-contact");
const newContactForm = document.getElementById("new-contact-form");
const CONTACT_FIELDS = ["first_name", "last_name", "email", "phone", "company"];

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
  // The CRM's own UI block kind (SPEC §16), drawn the way Northwind shows a call. The container is
  // inside the panel: its classes (ui-entity, ...) style it like the built-in cards.
  customElements.whenDefined("vernis-assistant").then(() => {
    assistant.registerRenderer("crm.call_summary", renderCall);
    // Northwind's router: opens relative links of the assistant's answers, and is its `navigate`
    // tool (SPEC §18), limited by Vernis to the routes it knows (here /contacts/{id}).
    assistant.navigate = (url) => route(url);
    // A tool of this page (SPEC §18). A write: the assistant shows its arguments and the user
    // approves them before the form opens.
    assistant.registerTool({
      name: "fill_contact_form",
      description:
        "Open Northwind's new-contact form on this page, prefilled, for the user to check and save. Saves nothing by itself.",
      parameters: {
        type: "object",
        properties: {
          first_name: { type: "string", maxLength: 100 },
          last_name: { type: "string", maxLength: 100 },
          email: { type: "string", maxLength: 200 },
          phone: { type: "string", maxLength: 40 },
          company: { type: "string", maxLength: 200 },
        },
        required: ["first_name"],
        additionalProperties: false,
      },
      write: true,
      handler: (fields) => openNewContact(fields),
    });
  });

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

document.getElementById("back").addEventListener("click", () => showList());
document.getElementById("new-contact-open").addEventListener("click", () => openNewContact({}));
document.getElementById("new-contact-cancel").addEventListener("click", () => {
  newContact.hidden = true;
});

function showList() {
  detail.hidden = true;
  listing.hidden = false;
  if (assistant) {
    assistant.pageContext = { route: "/contacts" };
  }
}

/** Northwind's router (a one-page app): `/contacts` and `/contacts/<id>`. */
async function route(url) {
  const path = new URL(url, location.origin).pathname.replace(/\/$/, "");
  if (path === "/contacts") {
    showList();
    return;
  }
  const match = /^\/contacts\/([^/]+)$/.exec(path);
  if (!match) {
    throw new Error(`Northwind has no page ${path}.`);
  }
  const id = decodeURIComponent(match[1]);
  const response = await fetch(`/contacts.json?id=${encodeURIComponent(id)}`, { cache: "no-store" });
  const { contacts } = response.ok ? await response.json() : { contacts: [] };
  if (!contacts.length) {
    throw new Error(`Northwind has no contact ${id}.`);
  }
  show(id, contacts[0].name, contacts[0].company);
  note(`Opened ${contacts[0].name}`, "tool");
}

/** The new-contact form, prefilled with `fields`; what the page shows now is the model's result. */
function openNewContact(fields) {
  for (const name of CONTACT_FIELDS) {
    newContactForm.elements[name].value = typeof fields[name] === "string" ? fields[name] : "";
  }
  newContact.hidden = false;
  newContactForm.elements.first_name.focus();
  note("New-contact form opened", "tool");
  return { opened: true, prefilled: CONTACT_FIELDS.filter((name) => newContactForm.elements[name].value) };
}

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

function renderCall(call, container) {
  const card = document.createElement("section");
  card.className = "ui-entity northwind-call";
  const direction = call.direction === "inbound" ? "Incoming" : "Outgoing";
  card.setAttribute("aria-label", `${direction} call`);
  const title = document.createElement("h4");
  title.className = "ui-entity-title";
  title.textContent = `${direction} call · ${call.status}`;
  const who = document.createElement(call.url ? "a" : "span");
  who.textContent = call.contact || "Unknown caller";
  if (call.url) {
    who.href = call.url;
  }
  const line = document.createElement("p");
  line.append(who, ` · ${new Date(call.at).toLocaleString()}`);
  if (Number.isInteger(call.duration_seconds)) {
    line.append(` · ${Math.round(call.duration_seconds / 60)} min`);
  }
  card.append(title, line);
  if (call.summary) {
    const summary = document.createElement("blockquote");
    summary.className = "northwind-call-summary";
    summary.textContent = call.summary;
    summary.style.margin = "6px 0 0";
    card.append(summary);
  }
  container.append(card);
}
