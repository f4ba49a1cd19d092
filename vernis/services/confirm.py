"""`confirm_tool`: the user's approve / reject button on a previewed write (SPEC §5).

The approval is resolved by compare-and-set, so of two tabs clicking at once one wins and the write
runs once; the other is told it was already answered. The outcome goes to every socket showing the
conversation (`tool_call_completed` on the preview's call) and into the stored tool call, which is
what history replay and the model's next window see: an approved write's result, or that the user
rejected it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from vernis.db.models import ApprovalStatus, utcnow
from vernis.exceptions import Forbidden, NotFound, ResponseInProgress
from vernis.services import events
from vernis.tools import ToolContext, error_envelope
from vernis.tools.runner import execute_write

if TYPE_CHECKING:
    from vernis.services.session import Session

__all__ = ["confirm_tool"]

EXPIRED = "This confirmation has expired; ask the assistant to prepare the change again."
ANSWERED = "This confirmation was already answered."


async def confirm_tool(session: Session, confirmation_id: UUID, approved: bool) -> None:
    services, member = session.services, session.member
    approvals = services.approvals
    approval = await approvals.get(confirmation_id, member.id, member.organization_id)
    if approval is None:
        raise NotFound("No such confirmation.")
    if approval.status != ApprovalStatus.PENDING:
        raise NotFound(ANSWERED)
    if approval.expires_at <= utcnow():
        await approvals.expire(approval.id)
        raise NotFound(EXPIRED)
    running = services.answers.running(approval.conversation_id)
    if running is not None and running.message_id == approval.message_id:
        # The answer that showed the preview is still being written (and stored): wait for it.
        raise ResponseInProgress(
            "Wait until the assistant has finished writing, then answer the confirmation."
        )
    tool = session.toolset.tools.get(approval.tool_name)
    if approved and tool is None:
        raise Forbidden(f"You are no longer allowed to use {approval.tool_name}.")

    if not await approvals.resolve(approval.id, member.id, member.organization_id, approved=approved):
        current = await approvals.get(approval.id, member.id, member.organization_id)
        raise NotFound(
            EXPIRED if current is not None and current.status == ApprovalStatus.PENDING else ANSWERED
        )

    status: events.ToolStatus
    envelope: dict[str, Any]
    if approved:
        assert tool is not None
        context = session.toolset.context_for(
            tool,
            ToolContext(
                member=member,
                permissions=session.permissions,
                conversation_id=approval.conversation_id,
                resources=None,
                token=session.identity.token,
                claims=session.identity.claims,
                message_id=approval.message_id,
            ),
        )
        args = tool.args.model_validate(approval.arguments)
        envelope = await execute_write(tool, context, args, approval.id, approval.arguments, approvals)
        status = "ok" if envelope["ok"] else "error"
    else:
        envelope = error_envelope(
            "rejected", "The user rejected this change; nothing was changed.", hint="Do not retry it unasked."
        )
        status = "rejected"
        await approvals.audit(
            organization_id=member.organization_id,
            member_id=member.id,
            conversation_id=approval.conversation_id,
            tool_name=approval.tool_name,
            arguments=approval.arguments,
            outcome="rejected",
            approval_id=approval.id,
        )
    await approvals.update_stored_call(approval.message_id, approval.call_id, status=status, result=envelope)
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
