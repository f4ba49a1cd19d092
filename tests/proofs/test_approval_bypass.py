"""The approval bypass matrix (SPEC §5): every way of running a write without the user's approval of
exactly that preview, through the chat path (the model's `confirmed: true`) and the button path
(`confirm_tool`), writes nothing. Each case is one row; two control rows show that the genuine
approvals, by chat (arguments re-ordered) and by button, do write, once.

The write is `create_task` with a title unique to the case: the number of tasks with that title is
the number of writes, and the audit log must agree.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from tests.data import database
from tests.e2e.test_approvals import sql
from tests.fixtures.server import Client, Vernis, VernisFactory
from tests.proofs.test_wire_fuzz import UNLIMITED
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis.store.models import Approval, table_of, utcnow

MEMBER = "member@acme.test"
COLLEAGUE = "owner@acme.test"
OUTSIDER = "owner@globex.test"


@dataclass
class Case:
    vernis: Vernis
    title: str
    client: Client
    confirmation_id: str = ""

    @property
    def arguments(self) -> dict[str, Any]:
        return {"title": self.title, "description": "from the bypass matrix", "assignee": "me"}

    def call(self, confirmed: Any = None, **changes: Any) -> Reply:
        arguments = {**self.arguments, **changes}
        if confirmed is not None:
            arguments["confirmed"] = confirmed
        return Reply(tool_calls=[ScriptedToolCall("create_task", arguments)])

    async def preview(self, *, then: Reply | None = None) -> None:
        """The model previews the task (and, with `then`, calls again in the same answer)."""
        self.vernis.scripted.add(self.call(), match=f"prepare {self.title}")
        if then is not None:
            self.vernis.scripted.add(then, match=lambda body: body["messages"][-1]["role"] == "tool")
        events = await self.client.answer(f"prepare {self.title}", timeout=20)
        (required,) = [e for e in events if e["type"] == "confirmation_required"]
        self.confirmation_id = required["confirmation_id"]

    async def chat(
        self, reply: Reply, client: Client | None = None, word: str = "yes"
    ) -> list[dict[str, Any]]:
        """The user answers in the chat and the model answers with `reply`."""
        self.vernis.scripted.add(reply, match=f"{word} {self.title}")
        return await (client or self.client).answer(f"{word} {self.title}", timeout=20)

    async def button(
        self, approved: bool = True, client: Client | None = None, confirmation_id: str = ""
    ) -> str:
        """`confirm_tool` on the preview (or another id): the resulting event's status or error code."""
        await (client or self.client).send(
            "confirm_tool", confirmation_id=confirmation_id or self.confirmation_id, approved=approved
        )
        while True:
            event = await (client or self.client).recv()
            if event["type"] == "error":
                return str(event["code"])
            if event["type"] == "tool_call_completed":
                return str(event["status"])

    async def expire(self) -> None:
        async with database(self.vernis) as engine, engine.begin() as connection:
            await connection.execute(
                sa.update(table_of(Approval))
                .where(table_of(Approval).c.id == uuid.UUID(self.confirmation_id))
                .values(expires_at=utcnow() - timedelta(seconds=1))
            )


async def chat_without_preview(case: Case) -> None:
    await case.chat(case.call(confirmed=True))


async def chat_with_other_arguments(case: Case) -> None:
    await case.preview()
    await case.chat(case.call(confirmed=True, description="something else"))


async def chat_with_an_extra_key(case: Case) -> None:
    await case.preview()
    await case.chat(case.call(confirmed=True, priority="high"))


async def chat_with_confirmed_as_a_string(case: Case) -> None:
    await case.preview()
    await case.chat(case.call(confirmed="true"))


async def chat_in_the_answer_that_previewed(case: Case) -> None:
    await case.preview(then=case.call(confirmed=True))


async def chat_reordered_in_the_answer_that_previewed(case: Case) -> None:
    reordered = dict(reversed(list(case.arguments.items())))
    await case.preview(
        then=Reply(tool_calls=[ScriptedToolCall("create_task", {"confirmed": True, **reordered})])
    )


async def chat_after_expiry(case: Case) -> None:
    await case.preview()
    await case.expire()
    await case.chat(case.call(confirmed=True))


async def chat_from_another_member(case: Case) -> None:
    await case.preview()
    async with case.vernis.opened(COLLEAGUE) as colleague:
        await case.chat(case.call(confirmed=True), client=colleague)


async def chat_from_another_organization(case: Case) -> None:
    await case.preview()
    async with case.vernis.opened(OUTSIDER) as outsider:
        await case.chat(case.call(confirmed=True), client=outsider)


async def chat_after_a_rejection(case: Case) -> None:
    await case.preview()
    assert await case.button(approved=False) == "rejected"
    await case.chat(case.call(confirmed=True))


async def chat_replayed(case: Case) -> None:
    """One genuine approval in the chat, then the same confirmed call again: one write, not two."""
    await case.preview()
    await case.chat(case.call(confirmed=True))
    await case.chat(case.call(confirmed=True), word="again")


async def button_with_an_unknown_id(case: Case) -> None:
    await case.preview()
    assert await case.button(confirmation_id=str(uuid.uuid4())) == "not_found"


async def button_after_expiry(case: Case) -> None:
    await case.preview()
    await case.expire()
    assert await case.button() == "not_found"


async def button_from_another_member(case: Case) -> None:
    await case.preview()
    async with case.vernis.opened(COLLEAGUE) as colleague:
        assert await case.button(client=colleague) == "not_found"


async def button_from_another_organization(case: Case) -> None:
    await case.preview()
    async with case.vernis.opened(OUTSIDER) as outsider:
        assert await case.button(client=outsider) == "not_found"


async def button_after_a_rejection(case: Case) -> None:
    await case.preview()
    assert await case.button(approved=False) == "rejected"
    assert await case.button() == "not_found"


async def button_replayed(case: Case) -> None:
    """One genuine approval by button, then the same approval again: one write, not two."""
    await case.preview()
    assert await case.button() == "ok"
    assert await case.button() == "not_found"
    await case.chat(case.call(confirmed=True), word="and again")


async def control_chat_approval_with_arguments_reordered(case: Case) -> None:
    """Control: the user's yes, then the identical call with its keys in another order, writes once."""
    await case.preview()
    reordered = dict(reversed(list(case.arguments.items())))
    await case.chat(Reply(tool_calls=[ScriptedToolCall("create_task", {"confirmed": True, **reordered})]))


async def control_button_approval(case: Case) -> None:
    """Control: the button's approval writes once."""
    await case.preview()
    assert await case.button() == "ok"


Scenario = Callable[[Case], Awaitable[None]]
CASES: list[tuple[Scenario, int]] = [
    (chat_without_preview, 0),
    (chat_with_other_arguments, 0),
    (chat_with_an_extra_key, 0),
    (chat_with_confirmed_as_a_string, 0),
    (chat_in_the_answer_that_previewed, 0),
    (chat_reordered_in_the_answer_that_previewed, 0),
    (chat_after_expiry, 0),
    (chat_from_another_member, 0),
    (chat_from_another_organization, 0),
    (chat_after_a_rejection, 0),
    (chat_replayed, 1),
    (button_with_an_unknown_id, 0),
    (button_after_expiry, 0),
    (button_from_another_member, 0),
    (button_from_another_organization, 0),
    (button_after_a_rejection, 0),
    (button_replayed, 1),
    (control_chat_approval_with_arguments_reordered, 1),
    (control_button_approval, 1),
]


@pytest.mark.parametrize(("scenario", "genuine"), [pytest.param(s, n, id=s.__name__) for s, n in CASES])
async def test_no_write_without_the_users_approval_of_exactly_that_preview(
    vernis_factory: VernisFactory, scenario: Scenario, genuine: int
) -> None:
    """A bypass attempt writes nothing: the only writes are the genuine approvals of the row (0, or 1 for replays and controls), and the audit log agrees."""
    title = f"bypass {scenario.__name__} {uuid.uuid4().hex[:8]}"
    async with vernis_factory(**UNLIMITED) as vernis, vernis.opened(MEMBER) as client:
        await scenario(Case(vernis, title, client))
        await client.drain(0.2)
    tasks = await sql(vernis, "SELECT id FROM task WHERE title = :title", title=title)
    written = await sql(
        vernis,
        "SELECT approval_id FROM audit_log WHERE tool_name = 'create_task' AND outcome = 'ok'",
    )
    assert len(tasks) == genuine
    assert len(written) == genuine
    assert all(row.approval_id is not None for row in written)
