"""How a previewed write's card ends (SPEC §5, §24): in the stored tool call (which history replay
and the model's next window read) and on every socket showing the conversation. Used by the
buttons (`confirm_tool`) and by a new message that moves on from writes still waiting
(`supersede_pending`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from vernis.conversation import events
from vernis.tools import error_envelope
from vernis.tools.approvals import ApprovalInfo

if TYPE_CHECKING:
    from vernis.session.state import Session

__all__ = ["SUPERSEDED", "settle", "supersede_pending"]

SUPERSEDED = "Not approved: the conversation moved on. Ask again to do it."


async def settle(
    session: Session, approval: ApprovalInfo, status: events.ToolStatus, envelope: dict[str, Any]
) -> None:
    """The preview's card ends: in the stored tool call (history, the model's next window) and on
    every socket showing the conversation."""
    services = session.services
    await services.approvals.update_stored_call(
        approval.message_id, approval.call_id, status=status, result=envelope
    )
    # The model reads the outcome from storage with the next message, on whichever instance.
    services.windows.discard(approval.conversation_id)
    await services.hub.touch(approval.conversation_id)
    session.publish(
        approval.conversation_id,
        events.ToolCallCompleted(
            call_id=approval.call_id,
            tool_name=approval.tool_name,
            status=status,
            result=envelope,
        ),
    )


async def supersede_pending(session: Session, conversation_id: UUID) -> int:
    """Every write of the conversation still waiting for its approval ends unapproved: the member's
    new message moved on (the caller checks that it does not approve the change itself). Each card
    says so, its stored call too; a late `confirm_tool` on it is `not_found`. How many ended."""
    member = session.member
    ended = await session.services.approvals.supersede(
        member_id=member.id, organization_id=member.organization_id, conversation_id=conversation_id
    )
    envelope = error_envelope(
        "superseded", SUPERSEDED, hint="Prepare the change again only if the user asks for it again."
    )
    for approval in ended:
        await settle(session, approval, "expired", envelope)
    return len(ended)
