"""Running the CRM's tools as a seeded demo member, through the same runner the answers use.

    async def test_search(tools: Tools) -> None:
        outcome = await tools.call("member@acme.test", "search_contacts", {"query": "jane"})
        assert outcome.status == "ok"

The tools come from the CRM toolkit as Vernis loads it (a `Catalog` started on the test database, so
each tool receives the toolkit's own resources); members are read the way the server reads them
(`IdentityService.member`), and their permissions come from the catalog's role table.

`tools.write(email, name, args)` goes through the whole confirmation flow: the preview (which must
change nothing), the user's approval, then the write; it returns (preview outcome, write envelope).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import vernis_crm
from vernis.conversation.store import ConversationStore
from vernis.identity.members import MemberInfo
from vernis.identity.service import IdentityService
from vernis.identity.tokens import TokenVerifier
from vernis.model.base import ToolCall
from vernis.tools import ToolContext
from vernis.tools.approvals import ApprovalService
from vernis.tools.catalog import Catalog
from vernis.tools.outcomes import execute_write
from vernis.tools.runner import ToolOutcome, ToolRunner, Toolset
from vernis_crm.demo.seed import SeedResult


@dataclass
class Tools:
    engine: AsyncEngine
    catalog: Catalog
    store: ConversationStore
    identities: IdentityService
    seed: SeedResult
    approvals: ApprovalService

    def entity(self, key: str) -> uuid.UUID:
        """A well-known demo row, e.g. `entity("acme:contact:Jane Cooper")`."""
        return self.seed.entities[key]

    async def member(self, email: str) -> MemberInfo:
        """A demo member as the server knows them now (role and revoked permissions included)."""
        member = await self.identities.member(self.seed.members[email])
        assert member is not None, email
        return member

    def permissions(self, member: MemberInfo) -> frozenset[str]:
        return self.catalog.roles.permissions(member.role, None, member.revoked_permissions)

    def toolset(self, member: MemberInfo) -> Toolset:
        return self.catalog.registry.for_member(self.permissions(member))

    async def context(self, email: str) -> ToolContext[Any]:
        """A context as an answer makes it: no resources (the runner fills in each tool's)."""
        member = await self.member(email)
        conversation = await self.store.create_conversation(member.id, member.organization_id)
        return ToolContext(
            member=member,
            permissions=self.permissions(member),
            conversation_id=conversation.id,
            resources=None,
        )

    async def runner(self, email: str) -> ToolRunner:
        context = await self.context(email)
        return ToolRunner(self.catalog.registry.for_member(context.permissions), context, self.approvals)

    async def call(self, email: str, name: str, arguments: dict[str, Any] | None = None) -> ToolOutcome:
        """One call as the model would make it (permission gate, validation, envelope)."""
        runner = await self.runner(email)
        return await runner.run(ToolCall(uuid.uuid4().hex, name, orjson.dumps(arguments or {}).decode()))

    async def offered(self, email: str) -> set[str]:
        """The names of the tools this member's model is offered."""
        return set(self.toolset(await self.member(email)).tools)

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
            tool,
            runner.toolset.context_for(tool, context),
            tool.args.model_validate(approval.arguments),
            approval.id,
            approval.arguments,
            self.approvals,
            runner.guards,
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
async def tools(engine: AsyncEngine, seeded: SeedResult) -> AsyncIterator[Tools]:
    """The CRM's tools run against the seeded demo database (SQLite and PostgreSQL)."""
    catalog = Catalog([vernis_crm.toolkit])
    await catalog.start(engine, {})
    verifier = TokenVerifier(secret="tests-only-secret-of-at-least-32-bytes")
    try:
        yield Tools(
            engine,
            catalog,
            ConversationStore(engine),
            IdentityService(verifier, engine, catalog.roles),
            seeded,
            ApprovalService(engine, ttl=1800),
        )
    finally:
        await catalog.stop()
