"""Reviews (SPEC §23): a write its member approved waits for a second member, who answers it.

- `send_to_review`: the member approved (the card's button; a chat confirmation goes through the
  tool runner the same way) a tool the configuration sends to review: nothing runs; the card says
  it waits for a reviewer, and every reviewer's socket hears of it (`announce_review`).
- `list_reviews`: what waits for this member's review, in their organization only.
- `review_tool`: a reviewer's answer, resolved once by a compare-and-set (two tabs, two instances:
  one wins), never by the requester, never across organizations. Approved, the write runs as the
  requester, with the permissions they held when they approved it, as a task of their conversation;
  rejected, nothing runs. Either way the card ends, the audit names both members, and the
  requester's conversation gets a new answer that reads the outcome (`continue_answer`).

Expiry (`VERNIS_REVIEW_TTL`): a sweep of the app (`expire_reviews`), and every reviewer's look, end
overdue requests: the requester's card ends as `expired`, and a reviewer answering it gets
`not_found`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from pydantic import BaseModel

from vernis.answers.registry import announce_review
from vernis.conversation import events
from vernis.exceptions import (
    Forbidden,
    MessageBlocked,
    NotFound,
)
from vernis.runtime import Services
from vernis.session.send import Asker, continue_when_free
from vernis.store.models import ReviewStatus, utcnow
from vernis.tools import Tool, ToolContext, error_envelope
from vernis.tools.approvals import ApprovalInfo
from vernis.tools.outcomes import execute_write, stopped_envelope
from vernis.tools.reviews import ReviewInfo, ReviewService, review_envelope

if TYPE_CHECKING:
    from vernis.session.state import Session

__all__ = ["expire_overdue", "expire_reviews", "list_reviews", "review_tool", "send_to_review"]

logger = logging.getLogger("vernis.reviews")

ANSWERED = "This review was already answered."
EXPIRED = "This review request has expired; the requester must ask for the change again."
# Bounds of the time between two sweeps for overdue requests, in seconds.
EXPIRY_SWEEP_MIN = 0.25
EXPIRY_SWEEP_MAX = 60.0


def _reviews(services: Services) -> ReviewService:
    assert services.reviews is not None, "the app sets the review service"
    return services.reviews


async def send_to_review(session: Session, approval: ApprovalInfo, reviewer_permission: str) -> None:
    """The member approved `approval`, a write that needs a reviewer: it is stored as a review request
    instead of running; its card and the reviewers hear of it."""
    services, member = session.services, session.member
    review = await _reviews(services).create(approval, reviewer_permission, session.permissions, member.name)
    await services.approvals.update_stored_call(
        approval.message_id, approval.call_id, status="review_requested", result=review_envelope(review)
    )
    services.windows.discard(approval.conversation_id)
    await services.hub.touch(approval.conversation_id)
    announce_review(services.hub, review)


async def list_reviews(session: Session) -> None:
    services, member = session.services, session.member
    held = services.catalog.reviewer_permissions(session.permissions)
    await expire_overdue(services, member.organization_id)
    pending = await _reviews(services).pending(member.organization_id, held)
    session.outbox.send(events.ReviewList(reviews=pending))


async def expire_overdue(services: Services, organization_id: UUID | None = None) -> None:
    """Every overdue request (of the organization, else of all) expires: its card ends as `expired`,
    and it leaves the reviewers' lists."""
    for review in await _reviews(services).overdue(organization_id):
        await _expired(services, review)


async def expire_reviews(services: Services) -> None:
    """Runs for as long as the app serves: requests expire on time even when no reviewer looks (a
    quarter of `VERNIS_REVIEW_TTL` late at most, and never more than a minute)."""
    interval = min(EXPIRY_SWEEP_MAX, max(EXPIRY_SWEEP_MIN, _reviews(services).ttl / 4))
    while True:
        await asyncio.sleep(interval)
        try:
            await expire_overdue(services)
        except Exception:
            # The database is out of reach (SPEC §10): the next sweep tries again.
            logger.warning("overdue reviews could not be expired now", exc_info=True)


async def _expired(services: Services, review: ReviewInfo) -> None:
    envelope = error_envelope(
        "expired",
        "No reviewer answered this change in time; nothing was changed.",
        hint="Tell the user; ask them before preparing it again.",
    )
    await _end_card(services, review, "expired", envelope)
    services.hub.publish(review.channel, events.ReviewResolved(review_id=review.id, status="expired"))


async def review_tool(session: Session, review_id: UUID, approved: bool, note: str | None) -> None:
    services, member = session.services, session.member
    reviews = _reviews(services)
    review = await reviews.get(review_id, member.organization_id)
    if review is None:
        raise NotFound("No such review.")
    if review.reviewer_permission not in session.permissions:
        raise Forbidden("You are not a reviewer of this change.")
    if review.requester_id == member.id:
        raise Forbidden("You cannot review your own request: another reviewer must.")
    if review.status != ReviewStatus.PENDING:
        raise NotFound(ANSWERED)
    if review.expires_at <= utcnow():
        if await reviews.expire(review.id):
            await _expired(services, review)
        raise NotFound(EXPIRED)
    if note:
        # The note reaches the model (the write's result): it passes the guards like a message.
        verdict = await services.guards.check_input(note, member, review.conversation_id)
        if verdict.blocked:
            raise MessageBlocked(verdict.user_message("the note"))
        note = verdict.text
    if not await reviews.resolve(review.id, member.id, approved=approved, note=note or None):
        current = await reviews.get(review.id, member.organization_id)
        if current is not None and current.status == ReviewStatus.PENDING:
            if await reviews.expire(review.id):
                await _expired(services, review)
            raise NotFound(EXPIRED)
        raise NotFound(ANSWERED)

    status: Literal["approved", "rejected"] = "approved" if approved else "rejected"
    services.hub.publish(review.channel, events.ReviewResolved(review_id=review.id, status=status))
    await services.approvals.audit(
        organization_id=member.organization_id,
        member_id=member.id,
        conversation_id=review.conversation_id,
        tool_name=review.tool_name,
        arguments=review.arguments,
        outcome=f"review_{status}",
        approval_id=review.approval_id,
        detail=f"review {review.id} of the request of member {review.requester_id}",
    )
    services.answers.carry_out(
        review.conversation_id, _carry_out(services, review, member.name, approved, note or None)
    )


async def _carry_out(
    services: Services, review: ReviewInfo, reviewer: str, approved: bool, note: str | None
) -> None:
    """The reviewer's answer in the requester's conversation: the write as the requester (if
    approved), the card's end, then a new answer that reads it."""
    requester = await services.identity.member(review.requester_id)
    permissions = review.requester_permissions
    if requester is not None:
        permissions = permissions - frozenset(requester.revoked_permissions)
    toolset = services.catalog.registry.for_member(permissions)
    tool = toolset.tools.get(review.tool_name)
    said = {"reviewer": reviewer, **({"note": note} if note else {})}
    if requester is None or requester.removed:
        # The requester is gone: nothing runs, and nobody is answered.
        gone = error_envelope("forbidden", "The requester is no longer a member; nothing was changed.")
        if approved:
            await _reviews(services).finish(review.id, ok=False, result=gone)
        await _end_card(services, review, "error" if approved else "rejected", gone | {"review": said})
        return
    asker = Asker(requester, permissions, toolset)
    if not approved:
        envelope = error_envelope(
            "rejected",
            "A reviewer rejected this change; nothing was changed."
            + (f" The reviewer's note: {note}" if note else ""),
            hint="Tell the user, with the reviewer's note if there is one. Do not retry it unasked.",
        )
        await _end_card(services, review, "rejected", envelope | {"review": said})
    elif tool is None:
        envelope = error_envelope(
            "forbidden", f"The requester may no longer use {review.tool_name}; nothing was changed."
        )
        await _reviews(services).finish(review.id, ok=False, result=envelope)
        await _end_card(services, review, "error", envelope | {"review": said})
    else:
        context = toolset.context_for(
            tool,
            ToolContext(
                member=requester,
                permissions=permissions,
                conversation_id=review.conversation_id,
                resources=None,
                message_id=review.message_id,
            ),
        )
        if not await _write(
            services, review, tool, context, tool.args.model_validate(review.arguments), said
        ):
            return
    await _continue(services, asker, review)


async def _write(
    services: Services,
    review: ReviewInfo,
    tool: Tool,
    context: ToolContext[Any],
    args: BaseModel,
    said: dict[str, Any],
) -> bool:
    """The approved write, as the requester; its outcome on the review and the card. False when it
    could not run at all."""
    try:
        envelope = await execute_write(
            tool,
            context,
            args,
            review.approval_id,
            review.arguments,
            services.approvals,
            services.guards,
            services.settings.tool_timeout,
            services.blocks,
        )
    except asyncio.CancelledError:
        stopped = stopped_envelope(tool.name)
        await asyncio.shield(_reviews(services).finish(review.id, ok=False, result=stopped))
        await asyncio.shield(_end_card(services, review, "error", stopped))
        raise
    except Exception:
        logger.exception("a reviewed write of %s could not be carried out", tool.name)
        return False
    await _reviews(services).finish(review.id, ok=bool(envelope["ok"]), result=envelope)
    await _end_card(services, review, "ok" if envelope["ok"] else "error", envelope | {"review": said})
    return True


async def _end_card(
    services: Services, review: ReviewInfo, status: events.ToolStatus, envelope: dict[str, Any]
) -> None:
    """The review's cards end: in the stored tool calls (history, the model's next window) and on
    every socket showing the requester's conversation, on every instance. Its cards: the preview's,
    and, when it was approved in the chat, the confirmed call that sent it to review."""
    cards = [(review.message_id, review.call_id)]
    recent = await services.store.messages(review.conversation_id, last=services.settings.window_messages)
    cards += [
        (message.id, call["call_id"])
        for message in recent
        for call in message.tool_calls or ()
        if call.get("status") == "review_requested"
        and _review_of(call) == str(review.id)
        and (message.id, call.get("call_id")) != cards[0]
    ]
    for message_id, call_id in cards:
        await services.approvals.update_stored_call(message_id, call_id, status=status, result=envelope)
    services.windows.discard(review.conversation_id)
    await services.hub.touch(review.conversation_id)
    for _, call_id in cards:
        services.hub.publish(
            review.conversation_id,
            events.ToolCallCompleted(
                call_id=call_id, tool_name=review.tool_name, status=status, result=envelope
            ),
        )


def _review_of(call: dict[str, Any]) -> str | None:
    """The review a stored tool call waits for (`review_envelope`), if any."""
    result = call.get("result")
    data = result.get("data") if isinstance(result, dict) else None
    review_id = data.get("review_id") if isinstance(data, dict) else None
    return review_id if isinstance(review_id, str) else None


async def _continue(services: Services, asker: Asker, review: ReviewInfo) -> None:
    """The requester's conversation goes on (SPEC §24): a new answer reads the outcome. An answer
    still running there is waited for; refused by a limit, the outcome stays stored and the model
    reads it with the requester's next message."""
    notice = (
        f"A reviewer has decided on the {review.tool_name} change the user asked for earlier: its "
        f"outcome is the result of that {review.tool_name} call above. Tell the user in a sentence or "
        "two what happened (with the reviewer's note if there is one). Do not call that tool again."
    )
    await continue_when_free(
        services,
        asker,
        review.conversation_id,
        key=str(review.id),
        notice=notice,
        about="a review",
        trace_parent=review.trace_parent,
    )
