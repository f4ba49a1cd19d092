"""The example helpdesk's tickets, in memory, one set per organization.

An organization's tickets appear on its first request: five of them, three assigned to the user who
made that request (so that "my open tickets" shows something in a demo), one to a colleague, one to
nobody. Ids (`T-1001`, ...) are unique across organizations, so a ticket of another organization is
simply one this organization does not have. Nothing here awaits: each change is atomic on the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

__all__ = ["PRIORITIES", "STATUSES", "Comment", "Priority", "Status", "Ticket", "TicketStore"]

Status = Literal["open", "pending", "solved"]
Priority = Literal["urgent", "high", "normal", "low"]
STATUSES: tuple[Status, ...] = ("open", "pending", "solved")
PRIORITIES: tuple[Priority, ...] = ("urgent", "high", "normal", "low")

# The colleague who holds one seeded ticket: an id the host would know, not anyone who signs in.
COLLEAGUE = "agent-7"


@dataclass(slots=True)
class Comment:
    author: str
    author_name: str | None
    body: str
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "author": self.author,
            "author_name": self.author_name,
            "body": self.body,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(slots=True)
class Ticket:
    id: str
    organization: str
    subject: str
    status: Status
    priority: Priority
    requester: str
    # The host's user id of the agent working on it; None: unassigned.
    assignee: str | None
    created_at: datetime
    updated_at: datetime
    updated_by: str | None = None
    comments: list[Comment] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """What a list shows of the ticket."""
        return {
            "id": self.id,
            "subject": self.subject,
            "status": self.status,
            "priority": self.priority,
            "requester": self.requester,
            "assignee": self.assignee,
            "updated_at": self.updated_at.isoformat(),
            "comment_count": len(self.comments),
        }

    def detail(self) -> dict[str, Any]:
        """The whole ticket, its comments oldest first."""
        return {
            **self.summary(),
            "created_at": self.created_at.isoformat(),
            "updated_by": self.updated_by,
            "comments": [comment.to_json() for comment in self.comments],
        }


# (subject, status, priority, requester, first comment, assigned to the first user?)
_SEED: tuple[tuple[str, Status, Priority, str, str, bool | None], ...] = (
    (
        "Cannot log in after the password reset",
        "open",
        "urgent",
        "Dana Whitfield <dana@northwind.example>",
        "I reset my password an hour ago and now the login page says my account is locked.",
        True,
    ),
    (
        "Invoice 2291 shows the wrong VAT rate",
        "open",
        "high",
        "Marco Rossi <marco@trattoria.example>",
        "Our invoice charges 22% VAT but we are registered for the reduced rate.",
        True,
    ),
    (
        "CSV export times out for large reports",
        "pending",
        "normal",
        "Lena Fischer <lena@fischer-bau.example>",
        "Exporting the yearly report fails after a minute; smaller ranges work.",
        True,
    ),
    (
        "Add a second administrator to our account",
        "open",
        "low",
        "Sam Okafor <sam@okafor.example>",
        "Please make my colleague Ada an administrator as well.",
        False,
    ),
    (
        "Refund the duplicate charge from March",
        "solved",
        "high",
        "Yuki Tanaka <yuki@tanaka.example>",
        "We were charged twice on March 3rd.",
        None,
    ),
)

_PRIORITY_RANK = {priority: rank for rank, priority in enumerate(PRIORITIES)}


class TicketStore:
    def __init__(self, first_id: int = 1001) -> None:
        self._next_id = first_id
        self._tickets: dict[str, Ticket] = {}
        self._organizations: set[str] = set()

    def ensure(self, organization: str, first_user: str) -> None:
        """Seed `organization`'s tickets if this is its first request."""
        if organization in self._organizations:
            return
        self._organizations.add(organization)
        now = datetime.now(UTC)
        for age, (subject, status, priority, requester, body, mine) in enumerate(_SEED):
            created = now - timedelta(days=len(_SEED) - age, hours=3)
            ticket = Ticket(
                id=f"T-{self._next_id}",
                organization=organization,
                subject=subject,
                status=status,
                priority=priority,
                requester=requester,
                assignee=first_user if mine else COLLEAGUE if mine is False else None,
                created_at=created,
                updated_at=created,
                comments=[Comment(requester, None, body, created)],
            )
            self._next_id += 1
            self._tickets[ticket.id] = ticket

    def get(self, organization: str, ticket_id: str) -> Ticket | None:
        """The ticket, or None when `organization` has no such ticket (another's included)."""
        ticket = self._tickets.get(ticket_id.upper())
        return ticket if ticket is not None and ticket.organization == organization else None

    def find(
        self,
        organization: str,
        *,
        status: Status | None = None,
        assignee: str | None = None,
        query: str | None = None,
        limit: int = 50,
    ) -> tuple[list[Ticket], int]:
        """Matching tickets, most urgent first then most recently updated; and how many match."""
        words = query.casefold().split() if query else []
        found = [
            ticket
            for ticket in self._tickets.values()
            if ticket.organization == organization
            and (status is None or ticket.status == status)
            and (assignee is None or ticket.assignee == assignee)
            and all(word in f"{ticket.subject} {ticket.requester}".casefold() for word in words)
        ]
        found.sort(key=lambda t: (_PRIORITY_RANK[t.priority], -t.updated_at.timestamp(), t.id))
        return found[:limit], len(found)

    def set_status(self, ticket: Ticket, status: Status, by: str) -> Status:
        """Change the status; returns the one it had."""
        previous = ticket.status
        if status != previous:
            ticket.status = status
            ticket.updated_at = datetime.now(UTC)
            ticket.updated_by = by
        return previous

    def add_comment(self, ticket: Ticket, author: str, author_name: str | None, body: str) -> Comment:
        comment = Comment(author, author_name, body, datetime.now(UTC))
        ticket.comments.append(comment)
        ticket.updated_at = comment.created_at
        ticket.updated_by = author
        return comment
