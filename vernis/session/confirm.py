"""`confirm_tool`: the user's approve / reject button on a previewed write (SPEC §5).

The approval is resolved by compare-and-set, so of two tabs clicking at once one wins and the write
runs once; the other is told it was already answered. The outcome goes to every socket showing the
conversation (`tool_call_completed` on the preview's call) and into the stored tool call, which is
what history replay and the model's next window see: an approved write's result, or that the user
rejected it. An approved write runs as a task of the conversation (`AnswerService.carry_out`): the
socket goes on answering meanwhile, `stop` ends it (recorded as stopped), and it ends as a
`timeout` after `VERNIS_TOOL_TIMEOUT` seconds.

Then the conversation goes on (SPEC §24): a new answer (`assistant_start`, `continues`) reads the
outcome, the write's result or the rejection, and tells the user what happened. A write stopped
midway is not followed by one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any
from uuid import UUID

from pydantic import BaseModel

from vernis.exceptions import Forbidden, NotFound, ResponseInProgress
from vernis.session.reviews import send_to_review
from vernis.session.send import Asker, continue_when_free
from vernis.session.settle import SUPERSEDED, settle
from vernis.store.models import ApprovalStatus, utcnow
from vernis.tools import Tool, ToolContext, error_envelope
from vernis.tools.approvals import ApprovalInfo
from vernis.tools.outcomes import execute_write, stopped_envelope

if TYPE_CHECKING:
    from vernis.session.state import Session

__all__ = ["confirm_tool"]

logger = logging.getLogger("vernis.confirm")

EXPIRED = "This confirmation has expired; ask the assistant to prepare the change again."
ANSWERED = "This confirmation was already answered."


async def confirm_tool(session: Session, confirmation_id: UUID, approved: bool) -> None:
    services, member = session.services, session.member
    approvals = services.approvals
    approval = await approvals.get(confirmation_id, member.id, member.organization_id)
    if approval is None:
        raise NotFound("No such confirmation.")
    if approval.status != ApprovalStatus.PENDING:
        raise NotFound(SUPERSEDED if approval.resolved_via == "superseded" else ANSWERED)
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

    reviewer_permission = services.catalog.reviews.get(approval.tool_name)
    if approved and reviewer_permission is not None:
        # A write a second member approves (SPEC §23): it waits for a reviewer instead of running.
        await send_to_review(session, approval, reviewer_permission)
        return
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
        # The write runs beside the socket (which goes on answering), as a task of the conversation.
        services.answers.carry_out(
            approval.conversation_id, _carry_out(session, approval, tool, context, args)
        )
        return
    await approvals.audit(
        organization_id=member.organization_id,
        member_id=member.id,
        conversation_id=approval.conversation_id,
        tool_name=approval.tool_name,
        arguments=approval.arguments,
        outcome="rejected",
        approval_id=approval.id,
    )
    rejected = error_envelope(
        "rejected", "The user rejected this change; nothing was changed.", hint="Do not retry it unasked."
    )
    await settle(session, approval, "rejected", rejected)
    services.answers.carry_out(approval.conversation_id, _go_on(session, approval, approved=False))


async def _go_on(session: Session, approval: ApprovalInfo, *, approved: bool) -> None:
    """The answer that reads the decision's outcome (stored in the preview's tool call by now)."""
    name = approval.tool_name
    if approved:
        notice = (
            f"The user approved the {name} change you proposed earlier and it was carried out: its "
            f"outcome is the result of that {name} call above. Tell the user in a sentence or two what "
            "happened, naming what was created or changed. Do not call that tool again for it."
        )
    else:
        notice = (
            f"The user rejected the {name} change you proposed earlier: nothing was changed (the "
            f"result of that {name} call above). Acknowledge it in a sentence; do not propose it again "
            "unasked."
        )
    await continue_when_free(
        session.services,
        Asker.of(session),
        approval.conversation_id,
        key=f"approval:{approval.id}",
        notice=notice,
        about="an approval",
        rate=session.rate,
        trace_parent=approval.trace_parent,
    )


async def _carry_out(
    session: Session, approval: ApprovalInfo, tool: Tool, context: ToolContext[Any], args: BaseModel
) -> None:
    """The approved write, then its outcome everywhere: stopped (`stop`) or not."""
    services = session.services
    try:
        envelope = await execute_write(
            tool,
            context,
            args,
            approval.id,
            approval.arguments,
            services.approvals,
            services.guards,
            services.settings.tool_timeout,
            services.blocks,
        )
    except asyncio.CancelledError:
        await asyncio.shield(settle(session, approval, "error", stopped_envelope(tool.name)))
        raise
    except Exception:
        logger.exception("an approved write of %s could not be carried out", tool.name)
        return
    await settle(session, approval, "ok" if envelope["ok"] else "error", envelope)
    await _go_on(session, approval, approved=True)
