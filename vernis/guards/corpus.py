"""Measuring the guards on a corpus of labelled texts (`tests/guards/corpus.toml`).

Each case names the categories it holds and the action it must get under the default policy.
`evaluate()` scans every case for every category (e-mail and phone included, though the default
policy allows them) and counts, per category, the cases found and missed, and the false alarms.
"""

from __future__ import annotations

import sys
import time
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vernis.guards.findings import PII_CATEGORIES, Action, Category
from vernis.guards.policy import GuardPolicy
from vernis.guards.scan import scan_text

__all__ = ["Case", "CategoryScore", "Report", "evaluate", "load_corpus"]


@dataclass(frozen=True, slots=True)
class Case:
    text: str
    expect: frozenset[Category]
    action: Action
    kind: str
    # A known gap: the guards get this case wrong today (it still counts in the figures).
    gap: bool = False
    # The part that must never reach the model or the database, when the case holds a secret.
    secret: str | None = None


def load_corpus(path: Path) -> list[Case]:
    """The cases of a corpus file; a malformed case raises `ValueError` naming its number."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    cases = []
    for number, raw in enumerate(data.get("case", []), start=1):
        try:
            cases.append(
                Case(
                    text=raw["text"],
                    expect=frozenset(Category(name) for name in raw["expect"]),
                    action=Action.parse(raw["action"]),
                    kind=raw["kind"],
                    gap=bool(raw.get("gap", False)),
                    secret=raw.get("secret"),
                )
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{path}: case {number}: {exc!r}") from None
    return cases


@dataclass(slots=True)
class CategoryScore:
    found: int = 0
    missed: int = 0
    false_alarms: int = 0

    @property
    def precision(self) -> float:
        flagged = self.found + self.false_alarms
        return self.found / flagged if flagged else 1.0

    @property
    def recall(self) -> float:
        present = self.found + self.missed
        return self.found / present if present else 1.0


@dataclass(slots=True)
class Report:
    scores: dict[Category, CategoryScore] = field(default_factory=dict)
    # (case, categories found) for every case whose categories differ from the expected ones.
    mismatches: list[tuple[Case, frozenset[Category]]] = field(default_factory=list)
    # (case, action taken) for every case whose action under the default policy differs.
    wrong_actions: list[tuple[Case, Action]] = field(default_factory=list)
    cases: int = 0

    def table(self) -> str:
        header = ("category", "cases", "found", "missed", "false", "precision", "recall")
        lines = [f"{header[0]:<12} " + " ".join(f"{name:>{len(name)}}" for name in header[1:])]
        for category, score in self.scores.items():
            lines.append(
                f"{category.value:<12} {score.found + score.missed:>5} {score.found:>5} {score.missed:>6} "
                f"{score.false_alarms:>5} {score.precision:>9.2f} {score.recall:>6.2f}"
            )
        right = self.cases - len(self.wrong_actions)
        lines.append(f"actions under the default policy: {right}/{self.cases} as expected")
        for case, action in self.wrong_actions:
            lines.append(f"  {action.label} instead of {case.action.label}: {case.text[:60]!r}")
        return "\n".join(lines)


def evaluate(cases: Sequence[Case], policy: GuardPolicy | None = None) -> Report:
    policy = policy if policy is not None else GuardPolicy()
    organization = policy.for_organization("")
    report = Report(scores={category: CategoryScore() for category in Category}, cases=len(cases))
    for case in cases:
        found = _categories(
            scan_text(case.text, organization, policy.phone_region, categories=PII_CATEGORIES).findings
        )
        for category in Category:
            score = report.scores[category]
            if category in case.expect:
                if category in found:
                    score.found += 1
                else:
                    score.missed += 1
            elif category in found:
                score.false_alarms += 1
        if found != case.expect:
            report.mismatches.append((case, found))
        action = scan_text(case.text, organization, policy.phone_region).action
        if action is not case.action:
            report.wrong_actions.append((case, action))
    return report


def _categories(findings: Iterable[object]) -> frozenset[Category]:
    return frozenset(decided.finding.category for decided in findings)  # type: ignore[attr-defined]


def main(argv: Sequence[str]) -> int:
    """`python -m vernis.guards.corpus FILE`: the figures; 1 when a case not marked as a gap fails."""
    path = Path(argv[0]) if argv else Path("tests/guards/corpus.toml")
    try:
        cases = load_corpus(path)
    except (OSError, ValueError) as exc:
        print(f"guards-corpus: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    report = evaluate(cases)
    elapsed = time.perf_counter() - started
    print(f"{path}: {len(cases)} cases, {len([c for c in cases if c.gap])} known gaps")
    print(report.table())
    print(f"{elapsed * 1000 / max(len(cases), 1) / 2:.2f} ms per scan on average")
    unexpected = [case for case, _ in report.wrong_actions if not case.gap]
    return 1 if unexpected else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
