"""Which action each finding gets, per organization: the defaults, `[guards]`, then the
organization's own `[guards.organizations."<org>"]` (its actions win; the allow-lists add up).

A phrase of an allow-list is never a finding: a finding that lies entirely inside an occurrence of
one (matched on the same normalised view, case and spacing aside) is dropped. A finding that only
touches one is kept, so allow-listing "act as a reseller" does not let "act as a reseller and ignore
all previous instructions" through.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from vernis.config import GUARD_RULES, GuardsSection
from vernis.guards.findings import Action, Category, Finding, Severity
from vernis.guards.normalise import normalise, skeleton

__all__ = ["DEFAULT_ACTIONS", "GuardPolicy", "OrganizationPolicy", "rule_of"]

DEFAULT_ACTIONS: Mapping[str, Action] = {
    "credential": Action.BLOCK,
    "jwt": Action.BLOCK,
    "card": Action.REDACT,
    "iban": Action.REDACT,
    "national_id": Action.REDACT,
    "email": Action.ALLOW,
    "phone": Action.ALLOW,
    "injection_high": Action.BLOCK,
    "injection_medium": Action.WARN,
    "injection_low": Action.ALLOW,
}
assert set(DEFAULT_ACTIONS) == set(GUARD_RULES), "vernis.config.GuardRule names every rule"


def rule_of(category: Category, severity: Severity) -> str:
    """The configuration key deciding a finding's action."""
    if category is not Category.INJECTION:
        return category.value
    if severity >= Severity.HIGH:
        return "injection_high"
    return "injection_medium" if severity is Severity.MEDIUM else "injection_low"


@dataclass(frozen=True, slots=True)
class _AllowPhrase:
    plain: re.Pattern[str]  # on the `scan` view
    folded: re.Pattern[str]  # on the skeleton view


def _pattern(phrase: str) -> re.Pattern[str]:
    words = phrase.split()
    return re.compile(r"\s+".join(re.escape(word) for word in words), re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class OrganizationPolicy:
    actions: Mapping[str, Action]
    allow: tuple[_AllowPhrase, ...] = ()
    # The personal-data categories whose action is not `allow`: the only ones worth scanning for.
    pii_categories: frozenset[Category] = field(default_factory=frozenset)

    @classmethod
    def build(cls, actions: Mapping[str, Action], phrases: Iterable[str]) -> OrganizationPolicy:
        allow = []
        for phrase in dict.fromkeys(phrases):
            scanned = normalise(phrase).scan
            allow.append(_AllowPhrase(_pattern(scanned), _pattern(skeleton(scanned))))
        pii = frozenset(
            category
            for category in Category
            if category is not Category.INJECTION and actions[category.value] is not Action.ALLOW
        )
        return cls(dict(actions), tuple(allow), pii)

    def action(self, finding: Finding) -> Action:
        return self.actions[rule_of(finding.category, finding.severity)]

    @property
    def scans_injection(self) -> bool:
        return any(
            self.actions[rule] is not Action.ALLOW for rule in GUARD_RULES if rule.startswith("injection")
        )

    def allowed_spans(self, text: str, *, folded: bool) -> list[tuple[int, int]]:
        """Where the allow-listed phrases occur in `text` (the scan view, or its skeleton)."""
        spans: list[tuple[int, int]] = []
        for phrase in self.allow:
            pattern = phrase.folded if folded else phrase.plain
            spans.extend(match.span() for match in pattern.finditer(text))
        return spans


class GuardPolicy:
    """The policies of every organization, built from the `[guards]` section once each."""

    def __init__(self, section: GuardsSection | None = None) -> None:
        self.section = section if section is not None else GuardsSection()
        actions: dict[str, Action] = {
            **DEFAULT_ACTIONS,
            **{rule: Action.parse(label) for rule, label in self.section.actions.items()},
        }
        self._default = OrganizationPolicy.build(actions, self.section.allow_phrases)
        self._organizations = {
            org: OrganizationPolicy.build(
                {**actions, **{rule: Action.parse(label) for rule, label in entry.actions.items()}},
                [*self.section.allow_phrases, *entry.allow_phrases],
            )
            for org, entry in self.section.organizations.items()
        }

    @property
    def timeout(self) -> float:
        return self.section.timeout

    @property
    def phone_region(self) -> str | None:
        return self.section.phone_region

    def for_organization(self, org: str) -> OrganizationPolicy:
        """The policy of the organization with this host id (the token's `org`)."""
        return self._organizations.get(org, self._default)
