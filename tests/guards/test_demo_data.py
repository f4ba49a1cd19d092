"""The guards on real CRM data: every text value of the seeded demo database passes the default policy."""

from __future__ import annotations

import sqlite3
from collections import Counter

import pytest

from tests.fixtures.db import SeededTemplate
from vernis.guards import GuardPolicy, scan_text


@pytest.mark.slow
def test_seeded_crm_data_raises_no_finding(sqlite_seeded_template: SeededTemplate) -> None:
    """Tens of thousands of values (names, notes, phone numbers, call summaries, ids) raise no false alarm under the default policy."""
    policy = GuardPolicy()
    organization = policy.for_organization("acme")
    connection = sqlite3.connect(sqlite_seeded_template.location)
    try:
        tables = [
            name
            for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not name.startswith(("assistant_", "audit_", "alembic"))
        ]
        scanned = 0
        found: Counter[tuple[str, str, str]] = Counter()
        for table in tables:
            columns = [row[1] for row in connection.execute(f"PRAGMA table_info('{table}')")]
            for column in columns:
                for (value,) in connection.execute(f'SELECT "{column}" FROM "{table}"'):
                    if not isinstance(value, str) or len(value) < 6:
                        continue
                    scanned += 1
                    for decided in scan_text(value, organization, policy.phone_region).findings:
                        found[(table, column, decided.finding.category.value)] += 1
    finally:
        connection.close()
    assert scanned > 20_000
    assert found == Counter()
