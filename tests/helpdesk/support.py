"""What the helpdesk example's tests share: host tokens, a recorder in front of the helpdesk API,
and `Desk`: the toolkit started in a `Catalog`, its tools run by the real `ToolRunner` as the member
a token names (made just in time, as on a socket).

    outcome = await desk.call(host_token(), "find_tickets", {"status": "open"})
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt
import orjson
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import ASGIApp, Receive, Scope, Send

from vernis.conversation.store import ConversationStore
from vernis.identity.service import IdentityService
from vernis.identity.tokens import TokenVerifier, issue_token
from vernis.model.base import ToolCall
from vernis.tools import ToolContext
from vernis.tools.approvals import ApprovalService
from vernis.tools.catalog import Catalog
from vernis.tools.outcomes import execute_write
from vernis.tools.runner import ToolOutcome, ToolRunner
from vernis_helpdesk import toolkit

SECRET = "helpdesk-test-secret-that-is-long-enough-for-hs256"
ORG = "acme-support"


def host_token(
    sub: str = "agent-42", org: str = ORG, role: str = "agent", secret: str = SECRET, **claims: Any
) -> str:
    """A token as the host signs it for one of its users (HS256, the secret the API shares)."""
    claims.setdefault("name", f"User {sub}")
    return issue_token(secret, sub=sub, org=org, role=role, **claims)


class Recorder:
    """An ASGI app in front of another that records (method, path, Authorization) of each request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[tuple[str, str, str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            self.seen.append((scope["method"], scope["path"], headers.get(b"authorization", b"").decode()))
        await self.app(scope, receive, send)


@dataclass
class HelpdeskApi:
    url: str
    recorder: Recorder

    @property
    def seen(self) -> list[tuple[str, str, str]]:
        return self.recorder.seen


@dataclass
class Desk:
    """The helpdesk toolkit started against `api_url`, its tools run as the members tokens name."""

    catalog: Catalog
    identity: IdentityService
    store: ConversationStore
    approvals: ApprovalService

    async def context(self, token: str) -> ToolContext[Any]:
        """A new conversation's context for the member `token` names (made just in time)."""
        who = await self.identity.authenticate(token)
        conversation = await self.store.create_conversation(who.member.id, who.member.organization_id)
        return ToolContext(
            member=who.member,
            permissions=who.permissions,
            conversation_id=conversation.id,
            resources=None,
            token=token,
            claims=who.claims,
        )

    async def runner(self, token: str) -> ToolRunner:
        context = await self.context(token)
        return ToolRunner(self.catalog.registry.for_member(context.permissions), context, self.approvals)

    async def call(self, token: str, name: str, arguments: dict[str, Any] | None = None) -> ToolOutcome:
        """One call as the model makes it: permission, validation, envelope (a write: its preview)."""
        runner = await self.runner(token)
        return await runner.run(ToolCall(uuid.uuid4().hex, name, orjson.dumps(arguments or {}).decode()))

    async def write(
        self, token: str, name: str, arguments: dict[str, Any]
    ) -> tuple[ToolOutcome, dict[str, Any]]:
        """Preview, approve (as the button does), run: the preview's outcome and the write's envelope."""
        runner = await self.runner(token)
        preview = await runner.run(ToolCall(uuid.uuid4().hex, name, orjson.dumps(arguments).decode()))
        assert preview.status == "needs_confirmation", preview.envelope
        assert preview.confirmation_id is not None
        member = runner.context.member
        approval = await self.approvals.get(preview.confirmation_id, member.id, member.organization_id)
        assert approval is not None
        assert await self.approvals.resolve(approval.id, member.id, member.organization_id, approved=True)
        tool = runner.toolset.tools[name]
        envelope = await execute_write(
            tool,
            runner.toolset.context_for(tool, runner.context),
            tool.args.model_validate(approval.arguments),
            approval.id,
            approval.arguments,
            self.approvals,
            runner.guards,
        )
        return preview, envelope


async def start_desk(
    engine: AsyncEngine, api_url: str, *, roles: dict[str, list[str]] | None = None, **options: Any
) -> Desk:
    """The toolkit started against `api_url` with these options; `roles` as a configuration's `[roles.*]`."""
    catalog = Catalog([toolkit], roles=roles)
    await catalog.start(engine, {"helpdesk": {"api_url": api_url, **options}})
    identity = IdentityService(TokenVerifier(secret=SECRET), engine, catalog.roles)
    return Desk(catalog, identity, ConversationStore(engine), ApprovalService(engine, ttl=1800))


def data(outcome: ToolOutcome) -> Any:
    """The result of a call that must have succeeded."""
    assert outcome.status == "ok", outcome.envelope
    return outcome.envelope["data"]


def error(outcome: ToolOutcome) -> dict[str, Any]:
    """The error of a call that must have failed."""
    assert outcome.status == "error", outcome.envelope
    failure: dict[str, Any] = outcome.envelope["error"]
    return failure


@dataclass(frozen=True)
class RsaKey:
    """An RSA key pair as a host that signs RS256 tokens holds it (Vernis gets the public PEM)."""

    private: rsa.RSAPrivateKey
    public_pem: str

    @classmethod
    def generate(cls) -> RsaKey:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
        return cls(private, pem)

    def sign(self, claims: Mapping[str, Any], ttl: int = 3600) -> str:
        """An RS256 token with these claims, `iat` now and `exp` in `ttl` seconds."""
        now = int(time.time())
        return jwt.encode({"iat": now, "exp": now + ttl, **claims}, self.private, algorithm="RS256")
