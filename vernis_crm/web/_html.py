"""The demo host app's page layout: a few string templates, every value escaped on the way in.

The layout is what a same-site host product adds to embed the assistant: one module script tag
(the `vernis_token` cookie authenticates it), and the entity the page shows as `data-entity-type` /
`data-entity-id` on `<body>` (the assistant sends them as page context with each message). A host on
another origin embeds it as `vernis_crm.web.embed` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Final

from starlette.responses import HTMLResponse

from vernis.identity import MemberInfo

__all__ = ["Entity", "Markup", "e", "page"]

ASSISTANT_SCRIPT: Final = "/static/vernis/assistant.js"
STYLESHEET: Final = "/static/demo/demo.css"
FAVICON: Final = "/static/demo/favicon.svg"

NAV: Final = (("contacts", "/contacts", "Contacts"), ("calls", "/calls", "Calls"))


class Markup(str):
    """HTML that is already safe: built from escaped parts."""


def e(value: object) -> Markup:
    """Escape a value for HTML text or a quoted attribute (None becomes "")."""
    if isinstance(value, Markup):
        return value
    return Markup(escape("" if value is None else str(value), quote=True))


@dataclass(frozen=True, slots=True)
class Entity:
    """The record a page shows, for the assistant's page context."""

    type: str
    id: str


def page(
    title: str,
    content: Markup,
    *,
    member: MemberInfo | None = None,
    active: str | None = None,
    entity: Entity | None = None,
    assistant: bool = True,
    status_code: int = 200,
) -> HTMLResponse:
    """A whole demo page: the app bar, `content` in the main column, the assistant panel."""
    body_attributes = ""
    if entity is not None:
        body_attributes = f' data-entity-type="{e(entity.type)}" data-entity-id="{e(entity.id)}"'
    header = _app_bar(member, active) if member is not None else ""
    script = f'<script type="module" src="{ASSISTANT_SCRIPT}"></script>' if assistant and member else ""
    # "push": the open panel narrows the page, so the app bar's own controls stay in view.
    assistant_element = '<vernis-assistant layout="push"></vernis-assistant>' if script else ""
    html = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)} · Vernis demo CRM</title>
<link rel="icon" href="{FAVICON}" type="image/svg+xml">
<link rel="stylesheet" href="{STYLESHEET}">
{script}
</head>
<body{body_attributes}>
<a class="skip-link" href="#main">Skip to content</a>
{header}
<main id="main" class="main" tabindex="-1">
{content}
</main>
{assistant_element}
</body>
</html>
"""
    return HTMLResponse(html, status_code=status_code)


def _app_bar(member: MemberInfo, active: str | None) -> str:
    current = ' aria-current="page"'
    links = "".join(
        f'<a href="{href}"{current if key == active else ""}>{e(label)}</a>' for key, href, label in NAV
    )
    return f"""<header class="app-bar">
  <a class="brand" href="/contacts"><span class="brand-mark" aria-hidden="true">V</span>
    <span>{e(member.organization_name)}</span><span class="brand-sub">demo CRM</span></a>
  <nav class="app-nav" aria-label="Main">{links}</nav>
  <div class="who">
    <span class="who-name">{e(member.name)}<span class="who-role">{e(member.role)}</span></span>
    <form method="post" action="/logout"><button class="link-button" type="submit">Sign out</button></form>
  </div>
</header>"""
