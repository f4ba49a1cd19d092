"""The helpdesk toolkit: "bring your own tools" the way a SaaS product does it (SPEC §14).

Its tools own no data: they call the host product's helpdesk API (`vernis_helpdesk.api` stands in
for it) as the member, forwarding the member's own token, so they see and change exactly what that
user may in the product itself. Vernis does the rest: who is offered which tool, argument checks,
the result envelope, the preview-and-approve step of writes, audit, dedup and loop refusal.

Enable it in the host configuration (its API's URL, or the environment variable HELPDESK_API_URL):

    [[toolkits]]
    name = "helpdesk"
    api_url = "http://127.0.0.1:9100"
    timeout = 10                      # seconds per API call (optional)

Tools: find_tickets and get_ticket (ticket:view); set_ticket_status and add_ticket_comment
(ticket:update, each previewed and approved first). Page context for `/tickets/{id}`.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

import httpx
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)

from vernis.tools import (
    Entity,
    PagePattern,
    QuickAction,
    Shown,
    ToolFailure,
    Toolkit,
    ToolkitEnv,
    ToolkitError,
    block,
)
from vernis_helpdesk.client import HelpdeskContext, call_api

__all__ = [
    "API_URL_ENV",
    "PERSONA",
    "QUICK_ACTIONS",
    "UPDATE",
    "VIEW",
    "AddTicketCommentArgs",
    "FindTicketsArgs",
    "GetTicketArgs",
    "HelpdeskOptions",
    "SetTicketStatusArgs",
    "add_ticket_comment",
    "find_tickets",
    "get_ticket",
    "set_ticket_status",
    "toolkit",
]

VIEW = "ticket:view"
UPDATE = "ticket:update"
API_URL_ENV = "HELPDESK_API_URL"
CATEGORY = "Tickets"
MAX_FOUND = 50

PERSONA = """\
You are {name}, the assistant built into this helpdesk. You help support agents work through their \
tickets: find them, read them, answer customers and move tickets along. Be brief and concrete; use \
Markdown lists. Never invent tickets or what a customer said: use a tool, and when it cannot tell, \
say so."""

QUICK_ACTIONS = (
    QuickAction("My open tickets", "List my open tickets, most urgent first.", permission=VIEW),
    QuickAction(
        "Summarize this ticket",
        "Summarize this ticket: what the customer needs, what happened so far, and the next step.",
        entity_types=("ticket",),
        permission=VIEW,
    ),
)


class HelpdeskOptions(BaseModel):
    """The toolkit's keys in its `[[toolkits]]` table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_url: Annotated[str, StringConstraints(strip_whitespace=True, pattern=r"^https?://\S+$")] | None = None
    timeout: float = Field(10.0, gt=0, le=120)


async def _startup(env: ToolkitEnv) -> httpx.AsyncClient:
    try:
        options = HelpdeskOptions.model_validate(dict(env.options))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {'unknown key' if e['type'] == 'extra_forbidden' else e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
        raise ToolkitError(f'[[toolkits]] name = "helpdesk": {problems}') from None
    api_url = options.api_url or os.environ.get(API_URL_ENV, "").strip()
    if not api_url:
        raise ToolkitError(
            "the helpdesk toolkit needs the URL of the helpdesk API: set api_url in its "
            f'[[toolkits]] table (name = "helpdesk") of the configuration, or {API_URL_ENV}'
        )
    if not api_url.startswith(("http://", "https://")):
        raise ToolkitError(f"{API_URL_ENV}: must be an http:// or https:// URL")
    # One client for every member: connections are pooled, and each request carries its own token.
    return httpx.AsyncClient(
        base_url=api_url.rstrip("/"),
        timeout=options.timeout,
        headers={"Accept": "application/json", "User-Agent": "vernis-helpdesk"},
        follow_redirects=False,
    )


async def _shutdown(client: httpx.AsyncClient) -> None:
    await client.aclose()


# The toolkit's own UI block kind (SPEC §16): a ticket's conversation, which a host page can draw
# with a renderer of its own (`el.registerRenderer("helpdesk.ticket_thread", ...)`).
THREAD_KIND = "helpdesk.ticket_thread"
THREAD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["ticket_id", "subject", "status", "comments"],
    "additionalProperties": False,
    "properties": {
        "ticket_id": {"type": "string"},
        "subject": {"type": "string"},
        "status": {"type": "string"},
        "url": {"type": "string"},
        "comments": {
            "type": "array",
            "maxItems": 50,
            "items": {
                "type": "object",
                "required": ["author", "body", "at"],
                "additionalProperties": False,
                "properties": {
                    "author": {"type": "string"},
                    "body": {"type": "string"},
                    "at": {"type": "string"},
                },
            },
        },
    },
}

toolkit: Toolkit[httpx.AsyncClient] = Toolkit(
    "helpdesk",
    description="An example helpdesk: tickets, read and changed through the host's own API as the user.",
    permissions={VIEW: "Find and read tickets", UPDATE: "Change a ticket's status and comment on it"},
    role_grants={
        "owner": [VIEW, UPDATE],
        "admin": [VIEW, UPDATE],
        "agent": [VIEW, UPDATE],
        "viewer": [VIEW],
    },
    pages=[PagePattern("/tickets/{id}", "ticket")],
    ui_kinds={THREAD_KIND: THREAD_SCHEMA},
    quick_actions=QUICK_ACTIONS,
    persona=PERSONA,
    startup=_startup,
    shutdown=_shutdown,
)


# -- arguments -----------------------------------------------------------------------------------


def _ticket_id(value: object) -> object:
    # Models write "t-1001", "1001" or 1001 as often as "T-1001".
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        text = value.strip().upper()
        return f"T-{text}" if text.isdigit() else text
    return value


TicketId = Annotated[str, StringConstraints(pattern=r"^T-\d{1,9}$"), BeforeValidator(_ticket_id)]
_TICKET_ID: TypeAdapter[str] = TypeAdapter(TicketId)
_ID_DESCRIPTION = "The ticket's id, like T-1001."


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class FindTicketsArgs(_Args):
    status: Literal["open", "pending", "solved", "any"] = Field(
        "any", description="Only tickets with this status: open, pending (waiting on the customer), solved."
    )
    assigned_to_me: bool = Field(False, description="Only the tickets assigned to the user.")
    query: str | None = Field(
        None, max_length=200, description="Words that must all appear in the subject or the requester."
    )
    limit: int = Field(20, ge=1, le=MAX_FOUND, description=f"How many to return (at most {MAX_FOUND}).")


class GetTicketArgs(_Args):
    ticket_id: TicketId = Field(description=_ID_DESCRIPTION)


class SetTicketStatusArgs(_Args):
    ticket_id: TicketId = Field(description=_ID_DESCRIPTION)
    status: Literal["open", "pending", "solved"] = Field(
        description="The new status: open, pending (waiting on the customer) or solved."
    )


class AddTicketCommentArgs(_Args):
    ticket_id: TicketId = Field(description=_ID_DESCRIPTION)
    body: str = Field(min_length=1, max_length=5000, description="The comment, as the user will sign it.")


# -- tools ---------------------------------------------------------------------------------------


async def _ticket(ctx: HelpdeskContext, ticket_id: str) -> dict[str, Any]:
    ticket: dict[str, Any] = await call_api(ctx, "GET", f"/tickets/{ticket_id}")
    return ticket


def _brief(ticket: dict[str, Any]) -> dict[str, Any]:
    return {key: ticket[key] for key in ("id", "subject", "status", "priority")}


@toolkit.tool(permission=VIEW, category=CATEGORY)
async def find_tickets(ctx: HelpdeskContext, args: FindTicketsArgs) -> dict[str, Any]:
    """Find the organization's tickets by status, by words in the subject or requester, or those
    assigned to the user; most urgent first."""
    params: dict[str, str | int] = {"status": args.status, "limit": args.limit}
    if args.assigned_to_me:
        params["assigned"] = "me"
    if args.query:
        params["q"] = args.query
    found: dict[str, Any] = await call_api(ctx, "GET", "/tickets", params=params)
    return {**found, "truncated": found["total"] > len(found["tickets"])}


@toolkit.tool(permission=VIEW, category=CATEGORY)
async def get_ticket(ctx: HelpdeskContext, args: GetTicketArgs) -> Shown:
    """Get one ticket with its details and every comment, oldest first."""
    ticket = await _ticket(ctx, args.ticket_id)
    thread = {
        "ticket_id": ticket["id"],
        "subject": ticket["subject"],
        "status": ticket["status"],
        "url": f"/tickets/{ticket['id']}",
        "comments": [
            {"author": c["author_name"] or c["author"], "body": c["body"], "at": c["created_at"]}
            for c in ticket["comments"][-50:]
        ],
    }
    return Shown(ticket, ui=[block(THREAD_KIND, thread)])


async def _preview_status(ctx: HelpdeskContext, args: SetTicketStatusArgs) -> dict[str, Any]:
    ticket = await _ticket(ctx, args.ticket_id)
    if ticket["status"] == args.status:
        raise ToolFailure(
            "no_change", f"{ticket['id']} is already {args.status}.", hint="Nothing to change; tell the user."
        )
    return {"ticket": _brief(ticket), "changes": {"status": {"from": ticket["status"], "to": args.status}}}


@toolkit.tool(permission=UPDATE, category=CATEGORY, writes=True, preview=_preview_status)
async def set_ticket_status(ctx: HelpdeskContext, args: SetTicketStatusArgs) -> dict[str, Any]:
    """Change a ticket's status (open, pending or solved)."""
    changed = await call_api(ctx, "POST", f"/tickets/{args.ticket_id}/status", json={"status": args.status})
    ticket = changed["ticket"]
    return {"ticket": _brief(ticket), "status": {"from": changed["previous_status"], "to": ticket["status"]}}


async def _preview_comment(ctx: HelpdeskContext, args: AddTicketCommentArgs) -> dict[str, Any]:
    ticket = await _ticket(ctx, args.ticket_id)
    comment = {"author": ctx.member.sub, "author_name": ctx.member.name or None, "body": args.body}
    return {"ticket": _brief(ticket), "changes": {"comments": {"add": comment}}}


@toolkit.tool(permission=UPDATE, category=CATEGORY, writes=True, preview=_preview_comment)
async def add_ticket_comment(ctx: HelpdeskContext, args: AddTicketCommentArgs) -> dict[str, Any]:
    """Add a comment to a ticket, signed by the user."""
    added = await call_api(ctx, "POST", f"/tickets/{args.ticket_id}/comments", json={"body": args.body})
    return {"ticket": _brief(added["ticket"]), "comment": added["comment"]}


# -- page context --------------------------------------------------------------------------------


@toolkit.resolver("ticket")
async def _resolve_ticket(ctx: HelpdeskContext, entity_id: str) -> Entity | None:
    if VIEW not in ctx.permissions:
        return None
    try:
        ticket = await _ticket(ctx, _TICKET_ID.validate_python(entity_id))
    except ValidationError:
        return None
    except ToolFailure as failure:
        if failure.code in ("not_found", "forbidden"):
            return None
        raise
    assignee = ticket["assignee"] or "nobody"
    summary = f"{ticket['status']}, {ticket['priority']} priority, requested by {ticket['requester']}"
    return Entity(ticket["subject"], f"{summary}; assigned to {assignee}")
