"""The corpus (corpus.toml): every case gets its expected categories and action; the command prints the figures."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from vernis.guards import Action, Category, GuardPolicy, scan_text
from vernis.guards.corpus import Case, evaluate, load_corpus

CORPUS = Path(__file__).with_name("corpus.toml")
CASES = load_corpus(CORPUS)
ROOT = Path(__file__).parents[2]
DEFAULTS = GuardPolicy()


def _id(case: Case) -> str:
    return f"{case.kind}:{case.text[:40]}"


@pytest.mark.parametrize("case", [c for c in CASES if not c.gap], ids=_id)
def test_case_gets_its_action_and_categories(case: Case) -> None:
    """Each case gets the action it expects under the default policy, and the categories it holds are found."""
    policy = DEFAULTS.for_organization("any")
    assert scan_text(case.text, policy, DEFAULTS.phone_region).action is case.action
    report = evaluate([case])
    assert report.mismatches == []


@pytest.mark.parametrize("case", [c for c in CASES if c.gap], ids=_id)
def test_known_gaps_are_still_gaps(case: Case) -> None:
    """A case marked as a gap is still missed (when a change fixes it, the corpus must say so)."""
    policy = DEFAULTS.for_organization("any")
    assert scan_text(case.text, policy, DEFAULTS.phone_region).action is not case.action


def test_corpus_covers_every_category_obfuscation_and_crm_false_positives() -> None:
    """Every category has positive cases, the corpus has negatives, every obfuscation kind and CRM look-alikes."""
    positives = Counter(category for case in CASES for category in case.expect)
    assert all(positives[category] >= 2 for category in Category), positives
    kinds = Counter(case.kind for case in CASES)
    for kind in ("homoglyph", "zero_width", "spacing", "fullwidth", "base64", "hex", "leet", "crm"):
        assert kinds[kind] >= 1, kind
    assert kinds["crm"] >= 20
    # A CRM's look-alikes pass: nothing in them but what a CRM needs (phone numbers, e-mail addresses).
    allowed = {Category.PHONE, Category.EMAIL}
    assert all(case.expect <= allowed and case.action is Action.ALLOW for case in CASES if case.kind == "crm")
    # Every case holding a blocked or redacted category names its secret for the end-to-end test.
    secret_categories = {
        Category.CARD,
        Category.IBAN,
        Category.NATIONAL_ID,
        Category.CREDENTIAL,
        Category.JWT,
    }
    for case in CASES:
        if case.expect & secret_categories and not case.gap:
            assert case.secret, case.text


def test_figures_per_category() -> None:
    """Precision and recall per category are what the README states (at least 0.9 each on this corpus)."""
    report = evaluate(CASES)
    for category, score in report.scores.items():
        assert score.precision >= 0.9, (category, score)
        assert score.recall >= 0.9, (category, score)
    assert len(report.wrong_actions) == len([c for c in CASES if c.gap])


def test_command_prints_precision_and_recall() -> None:
    """`scripts/guards-corpus` prints a line per category with precision and recall, and succeeds."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "guards-corpus")], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "precision" in lines[1]
    assert "recall" in lines[1]
    for category in Category:
        assert any(line.split()[0] == category.value for line in lines[2:] if line.strip())


def test_command_refuses_a_malformed_corpus(tmp_path: Path) -> None:
    """A corpus with an unknown category is refused with its case number, not half measured."""
    bad = tmp_path / "corpus.toml"
    bad.write_text('[[case]]\ntext = "x"\nexpect = ["nonsense"]\naction = "allow"\nkind = "plain"\n')
    done = subprocess.run(
        [str(ROOT / "scripts" / "guards-corpus"), str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "case 1" in done.stderr
