"""Proofs of the promises under faults and abuse (issue 14): each test has a short variant, run in
CI, and a long one marked `long`, deselected unless `-m` names it (`scripts/proofs` runs them).

A test reports its figures (iterations, examples, cases, bytes) with the `figures` fixture; they are
printed at the end of the run (`tests.fixtures.figures`), and appended as JSON lines to
`test-artifacts/proofs.jsonl`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fixtures.figures import FIGURES_PROPERTY

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

# For a module whose Hypothesis examples are drawn on a thread while the server under test runs on
# the event loop's thread of the same process. Hypothesis warns when the global `random` state
# changes while it draws an example (it takes that for a strategy using `random`); the server may
# use that state meanwhile (a retry's jitter), and the warning, an error under the suite's
# filters, made a run fail at random. The strategies here use no `random`.
DRAWN_BESIDE_THE_SERVER = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies:hypothesis.errors.HypothesisDeprecationWarning"
)

Figures = Callable[..., None]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the long variants unless the marker expression asks for them (`-m long`)."""
    if "long" in (config.option.markexpr or ""):
        return
    long = [item for item in items if item.get_closest_marker("long") is not None]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if item.get_closest_marker("long") is None]


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    """`figures(iterations=100, failures=0)`: record this test's figures for the run's summary."""
    started = time.monotonic()

    def record(**values: Any) -> None:
        entry = {"test": request.node.nodeid, "seconds": round(time.monotonic() - started, 1), **values}
        request.node.user_properties.append((FIGURES_PROPERTY, entry))
        ARTIFACTS.mkdir(exist_ok=True)
        with (ARTIFACTS / "proofs.jsonl").open("ab") as out:
            out.write(orjson.dumps({"at": time.strftime("%Y-%m-%dT%H:%M:%S"), **entry}) + b"\n")

    return record


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """The proofs run on SQLite (the embedded default) unless a module parametrizes `backend` itself."""
    name: str = request.param
    return name
