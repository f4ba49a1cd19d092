"""The approval state machine (SPEC §5) as a Hypothesis property: random interleavings of previews,
approvals and rejections (button or chat), previews a later message supersedes, expiries, reconnects and simultaneous approvals across two
tabs of one member. A reference model says what each step must do; at the end at most one write ran
per preview, never one without an approval, and the stored approvals, audit and data agree.

Hypothesis drives the steps from a worker thread; they run on the test's event loop against one
server (`database=None`: nothing is written to the working tree).
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.data import add_notification, database, is_read
from tests.e2e.test_approvals import mark_read
from tests.fixtures.server import Client, Vernis, VernisFactory
from tests.proofs.conftest import DRAWN_BESIDE_THE_SERVER, Figures
from tests.proofs.test_wire_fuzz import UNLIMITED, on_loop
from vernis.store.models import Approval, AuditEntry, table_of, utcnow

pytestmark = DRAWN_BESIDE_THE_SERVER

Step = tuple[Any, ...]

steps = st.lists(
    st.one_of(
        st.just(("preview",)),
        st.tuples(st.just("approve"), st.sampled_from("AB"), st.integers(0, 7)),
        st.tuples(st.just("reject"), st.sampled_from("AB"), st.integers(0, 7)),
        st.tuples(st.just("both"), st.integers(0, 7)),
        st.tuples(st.just("chat"), st.sampled_from("AB"), st.integers(0, 7)),
        st.tuples(st.just("expire"), st.integers(0, 7)),
        st.tuples(st.just("reconnect"), st.sampled_from("AB")),
    ),
    max_size=7,
).map(lambda rest: [("preview",), *rest])


@dataclass
class Preview:
    notification_id: str
    confirmation_id: str
    call_id: str
    # The reference model: pending, expired (its time ran out), "expired, answered" (then a button was
    # pressed), superseded (a later message moved on), executed or rejected.
    state: str = "pending"


@dataclass
class Run:
    vernis: Vernis
    stack: AsyncExitStack
    tabs: dict[str, Client] = field(default_factory=dict)
    conversation_id: str = ""
    previews: list[Preview] = field(default_factory=list)
    writes: int = 0
    # Every event each tab received through a decision, in order (`continued` reads them).
    log: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    async def open(self, name: str) -> None:
        query = f"?conversation_id={self.conversation_id}" if self.conversation_id else ""
        self.tabs[name] = await self.stack.enter_async_context(self.vernis.connect(query=query))
        opening = await self.tabs[name].until("history_end")
        if self.conversation_id:
            self.check_history(opening)

    def check_history(self, opening: list[dict[str, Any]]) -> None:
        """The cards a (re)opened tab shows say what the model says about every preview."""
        cards = {
            call["call_id"]: call["status"]
            for event in opening
            if event["type"] == "history_message"
            for call in event.get("tool_calls") or ()
        }
        shown = {
            "pending": "needs_confirmation",
            "expired": "needs_confirmation",
            "expired, answered": "needs_confirmation",
            "superseded": "expired",
            "executed": "ok",
        }
        for preview in self.previews:
            assert cards[preview.call_id] == shown.get(preview.state, preview.state), (preview, cards)

    async def settle(self, name: str) -> list[dict[str, Any]]:
        """Everything the tab has received so far (a ping's pong comes after it)."""
        await self.tabs[name].send("ping")
        events = await self.tabs[name].until("pong")
        self.log.setdefault(name, []).extend(events)
        return events

    async def recv(self, name: str) -> dict[str, Any]:
        event = await self.tabs[name].recv(timeout=20)
        self.log.setdefault(name, []).append(event)
        return event

    def mark(self) -> dict[str, int]:
        return {name: len(self.log.setdefault(name, [])) for name in self.tabs}

    async def continued(self, mark: dict[str, int]) -> None:
        """The answer that reads a decision's outcome (SPEC §24), started after `mark`, has ended in
        every tab: the next message is not refused as `response_in_progress` for it."""
        for name in sorted(self.tabs):
            while True:
                seen = self.log[name][mark.get(name, 0) :]
                started = [
                    e["message_id"] for e in seen if e["type"] == "assistant_start" and e.get("continues")
                ]
                if started and any(
                    e["type"] == "assistant_end" and e["message_id"] == started[-1] for e in seen
                ):
                    break
                await self.recv(name)

    async def settle_all(self) -> list[dict[str, Any]]:
        return [event for name in sorted(self.tabs) for event in await self.settle(name)]

    def pick(self, index: int) -> Preview:
        return self.previews[index % len(self.previews)]

    async def preview(self) -> None:
        notification_id = await add_notification(self.vernis)
        # The new message moves on from every preview still waiting (SPEC §24): none of them can
        # be approved any more (one whose time ran out is ended too, unless a button already did).
        for earlier in self.previews:
            if earlier.state in ("pending", "expired"):
                earlier.state = "superseded"
        self.vernis.scripted.add(mark_read(notification_id), match=f"preview {notification_id}")
        events = await self.tabs["A"].answer(f"preview {notification_id}", timeout=20)
        if not self.conversation_id:
            self.conversation_id = events[0]["conversation_id"]
            await self.open("B")
        (required,) = [e for e in events if e["type"] == "confirmation_required"]
        self.previews.append(Preview(notification_id, required["confirmation_id"], required["call_id"]))
        await self.settle_all()

    async def outcome(self, name: str, preview: Preview) -> list[dict[str, Any]]:
        """What answers a button on `preview` in tab `name`: the card's end or an error (an approved
        write runs beside the socket, so it may come after a pong), then everything until a pong."""
        events: list[dict[str, Any]] = []
        while not events or not (
            events[-1]["type"] == "error"
            or (events[-1]["type"] == "tool_call_completed" and events[-1]["call_id"] == preview.call_id)
        ):
            events.append(await self.recv(name))
        return events + await self.settle(name)

    async def button(self, tab: str, preview: Preview, approved: bool) -> None:
        mark = self.mark()
        await self.tabs[tab].send("confirm_tool", confirmation_id=preview.confirmation_id, approved=approved)
        events = [
            e for e in await self.outcome(tab, preview) if e["type"] in ("tool_call_completed", "error")
        ]
        await self.settle_all()
        if preview.state == "pending":
            assert [(e["type"], e.get("status")) for e in events] == [
                ("tool_call_completed", "ok" if approved else "rejected")
            ], events
            preview.state = "executed" if approved else "rejected"
            self.writes += approved
            await self.continued(mark)
        else:
            assert [(e["type"], e.get("code")) for e in events] == [("error", "not_found")], events
            self.answered_late(preview)

    def answered_late(self, preview: Preview) -> None:
        """A button on a preview whose time ran out marks it expired (its card stays as it was)."""
        if preview.state == "expired":
            preview.state = "expired, answered"

    async def both(self, preview: Preview) -> None:
        approve = {"confirmation_id": preview.confirmation_id, "approved": True}
        mark = self.mark()
        await asyncio.gather(*(tab.send("confirm_tool", **approve) for tab in self.tabs.values()))
        if preview.state == "pending":
            # One tab is refused at once; the write of the other ends the card in both.
            events = [event for name in sorted(self.tabs) for event in await self.completion(name, preview)]
        else:
            events = [event for name in sorted(self.tabs) for event in await self.outcome(name, preview)]
        done = [e for e in events if e["type"] == "tool_call_completed" and e["call_id"] == preview.call_id]
        errors = [e["code"] for e in events if e["type"] == "error"]
        if preview.state == "pending":
            assert [e["status"] for e in done] == ["ok", "ok"], events  # one write, shown in both tabs
            assert errors == ["not_found"], events
            preview.state = "executed"
            self.writes += 1
            await self.continued(mark)
        else:
            assert done == [], events
            assert errors == ["not_found", "not_found"], events
            self.answered_late(preview)

    async def completion(self, name: str, preview: Preview) -> list[dict[str, Any]]:
        """Everything tab `name` receives until `preview`'s card ends there, then until a pong."""
        events: list[dict[str, Any]] = []
        while not events or not (
            events[-1]["type"] == "tool_call_completed" and events[-1]["call_id"] == preview.call_id
        ):
            events.append(await self.recv(name))
        return events + await self.settle(name)

    async def chat(self, tab: str, preview: Preview) -> None:
        self.vernis.scripted.add(
            mark_read(preview.notification_id, confirmed=True), match=f"yes {preview.notification_id}"
        )
        events = await self.tabs[tab].answer(f"yes {preview.notification_id}", timeout=20)
        await self.settle_all()
        completed = [e for e in events if e["type"] == "tool_call_completed"]
        (done,) = [e for e in completed if e["call_id"] != preview.call_id]
        resolved = [e["status"] for e in completed if e["call_id"] == preview.call_id]
        if preview.state == "pending":
            assert done["status"] == "ok", done
            assert resolved == ["ok"], completed  # the preview's own card ends too
            preview.state = "executed"
            self.writes += 1
        else:
            assert done["result"]["error"]["code"] == "confirmation_required", done
            assert resolved == [], completed

    async def expire(self, preview: Preview) -> None:
        """The preview's time runs out (its expiry moved into the past, as the clock would)."""
        async with database(self.vernis) as engine, engine.begin() as connection:
            await connection.execute(
                sa.update(table_of(Approval))
                .where(table_of(Approval).c.id == uuid.UUID(preview.confirmation_id))
                .values(expires_at=utcnow() - timedelta(seconds=1))
            )
        if preview.state == "pending":
            preview.state = "expired"

    async def reconnect(self, tab: str) -> None:
        await self.tabs[tab].ws.close()
        await self.open(tab)

    async def step(self, step: Step) -> None:
        match step:
            case ("preview",):
                await self.preview()
            case ("approve" | "reject" as kind, tab, index):
                await self.button(tab, self.pick(index), kind == "approve")
            case ("both", index):
                await self.both(self.pick(index))
            case ("chat", tab, index):
                await self.chat(tab, self.pick(index))
            case ("expire", index):
                await self.expire(self.pick(index))
            case ("reconnect", tab):
                await self.reconnect(tab)

    async def verify(self) -> None:
        """What is stored agrees with the model: one write per executed preview, none otherwise."""
        approvals, audit = table_of(Approval), table_of(AuditEntry)
        async with database(self.vernis) as engine, engine.connect() as connection:
            ids = [uuid.UUID(p.confirmation_id) for p in self.previews]
            rows = await connection.execute(
                sa.select(approvals.c.id, approvals.c.status).where(approvals.c.id.in_(ids))
            )
            statuses = {row.id: row.status for row in rows}
            writes = (
                (
                    await connection.execute(
                        sa.select(audit.c.approval_id).where(
                            audit.c.outcome == "ok",
                            audit.c.conversation_id == uuid.UUID(self.conversation_id),
                        )
                    )
                )
                .scalars()
                .all()
            )
        assert len(writes) == self.writes
        assert None not in writes
        for preview in self.previews:
            key = uuid.UUID(preview.confirmation_id)
            expected = {
                "pending": {"pending"},
                "expired": {"pending"},
                "expired, answered": {"expired"},
                "superseded": {"expired"},
            }.get(preview.state, {preview.state})
            assert statuses[key] in expected, (preview, statuses[key])
            assert writes.count(key) == (preview.state == "executed")
            assert await is_read(self.vernis, preview.notification_id) == (preview.state == "executed")


async def run_steps(vernis: Vernis, plan: list[Step]) -> int:
    async with AsyncExitStack() as stack:
        run = Run(vernis, stack)
        await run.open("A")
        await run.tabs["A"].send("new_conversation")
        await run.tabs["A"].until("history_end")
        for step in plan:
            await run.step(step)
        await run.verify()
        return run.writes


@pytest.mark.slow
@pytest.mark.parametrize(
    "examples", [pytest.param(25, id="25"), pytest.param(1000, id="1000", marks=pytest.mark.long)]
)
async def test_random_interleavings_write_at_most_once_per_preview_and_never_unapproved(
    vernis_factory: VernisFactory, figures: Figures, examples: int
) -> None:
    """Any interleaving of preview, approve, reject, both tabs approving, chat yes, expiry and reconnect across two tabs: each step does what the model says, at most one write per preview, none without an approval."""
    loop = asyncio.get_running_loop()
    totals = {"steps": 0, "writes": 0}
    async with vernis_factory(**UNLIMITED) as vernis:

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(plan=steps)
        def check(plan: list[Step]) -> None:
            totals["writes"] += on_loop(loop, lambda: run_steps(vernis, plan), timeout=120)
            totals["steps"] += len(plan)

        await asyncio.to_thread(check)
    figures(examples=examples, **totals)
