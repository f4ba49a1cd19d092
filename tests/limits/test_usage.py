"""The usage table's writes: answers ending together share one transaction and lose no count, on a
real SQLite file and a real PostgreSQL database alike."""

from __future__ import annotations

import asyncio
from datetime import date

from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fixtures.db import *  # noqa: F403
from vernis.limits.usage import UsageStore
from vernis.store.transactions import transactions_for
from vernis_crm.demo.seed import SeedResult


async def test_answers_ending_together_add_every_token_once(engine: AsyncEngine, seeded: SeedResult) -> None:
    """50 answers of two members ending at once (two models for one of them) are all counted: each member's total is the sum of its answers, whatever the batching."""
    transactions = transactions_for(engine)
    store = UsageStore(engine, transactions)
    acme = seeded.organizations["acme"]
    member, owner = seeded.members["member@acme.test"], seeded.members["owner@acme.test"]
    today = date(2026, 11, 24)
    try:
        await asyncio.gather(
            *(
                store.add(
                    organization_id=acme,
                    member_id=member if n % 2 else owner,
                    day=today,
                    model="a" if n % 3 else "b",
                    input_tokens=n,
                    output_tokens=1,
                )
                for n in range(50)
            )
        )
        assert await store.member_tokens(member, today) == sum(n + 1 for n in range(50) if n % 2)
        assert await store.member_tokens(owner, today) == sum(n + 1 for n in range(50) if not n % 2)
        assert await store.organization_tokens(acme, today) == sum(n + 1 for n in range(50))
        days = await store.organization_days(acme, today)
        assert sum(day.answers for day in days) == 50
    finally:
        await transactions.aclose()
