"""Running tools as a seeded demo member, through the same runner the answers use.

    async def test_search(tools: Tools) -> None:
        outcome = await tools.call("member@acme.test", "search_contacts", {"query": "jane"})
        assert outcome.status == "ok"

`tools.write(email, name, args)` goes through the whole confirmation flow: the preview (which must
change nothing), the user's approval, then the write; it returns (preview outcome, write envelope).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.db.seed import SeedResult
from vernis.services.approvals import ApprovalService
from vernis.services.llm import ToolCall
from vernis.services.permissions import permissions_for
from vernis.services.persistence import ConversationStore, MemberInfo
from vernis.services.registry import ToolContext, ToolOutcome, ToolResources, ToolRunner, execute_write
from vernis.tools import default_registry


@dataclass
class Tools:
    engine: AsyncEngine
    store: ConversationStore
    seed: SeedResult
    approvals: ApprovalService

    def entity(self, key: str) -> uuid.UUID:
        """A well-known demo row, e.g. `entity("acme:contact:Jane Cooper")`."""
        return self.seed.entities[key]

    async def member(self, email: str) -> MemberInfo:
        member = await self.store.get_member_by_email(email)
        assert member is not None, email
        return member

    async def context(self, email: str) -> ToolContext:
        member = await self.member(email)
        conversation = await self.store.create_conversation(member.id, member.organization_id)
        return ToolContext(
            member=member,
            permissions=permissions_for(member.role, member.revoked_permissions),
            conversation_id=conversation.id,
            resources=ToolResources(engine=self.engine, approvals=self.approvals),
        )

    async def runner(self, email: str) -> ToolRunner:
        context = await self.context(email)
        return ToolRunner(default_registry().for_member(context.permissions), context)

    async def call(self, email: str, name: str, arguments: dict[str, Any] | None = None) -> ToolOutcome:
        """One call as the model would make it (permission gate, validation, envelope)."""
        runner = await self.runner(email)
        return await runner.run(ToolCall(uuid.uuid4().hex, name, orjson.dumps(arguments or {}).decode()))

    async def offered(self, email: str) -> set[str]:
        """The names of the tools this member's model is offered."""
        context = await self.context(email)
        return set(default_registry().for_member(context.permissions).tools)

    async def write(
        self, email: str, name: str, arguments: dict[str, Any]
    ) -> tuple[ToolOutcome, dict[str, Any]]:
        """Preview, approve (as the button does), run. Returns the preview outcome and the write's envelope."""
        runner = await self.runner(email)
        preview = await runner.run(ToolCall(uuid.uuid4().hex, name, orjson.dumps(arguments).decode()))
        assert preview.status == "needs_confirmation", preview.envelope
        assert preview.confirmation_id is not None
        context = runner.context
        approval = await self.approvals.get(
            preview.confirmation_id, context.member.id, context.organization_id
        )
        assert approval is not None
        assert await self.approvals.resolve(
            approval.id, context.member.id, context.organization_id, approved=True
        )
        tool = runner.toolset.tools[name]
        envelope = await execute_write(
            tool, context, tool.args.model_validate(approval.arguments), approval.id, approval.arguments
        )
        return preview, envelope


def data(outcome: ToolOutcome) -> Any:
    """The result of a call that must have succeeded."""
    assert outcome.status == "ok", outcome.envelope
    return outcome.envelope["data"]


def error(outcome: ToolOutcome) -> dict[str, Any]:
    """The error of a call that must have failed."""
    assert outcome.status == "error", outcome.envelope
    failure: dict[str, Any] = outcome.envelope["error"]
    return failure


def error_code(outcome: ToolOutcome) -> str:
    code: str = error(outcome)["code"]
    return code


async def rows(tools: Tools, query: Any) -> list[Any]:
    async with tools.engine.connect() as connection:
        return list((await connection.execute(query)).all())


@pytest.fixture
def tools(engine: AsyncEngine, seeded: SeedResult) -> Tools:
    """Tools run against the seeded demo database (SQLite and PostgreSQL)."""
    return Tools(engine, ConversationStore(engine), seeded, ApprovalService(engine, ttl=1800))
