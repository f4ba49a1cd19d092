"""One scan of one text: normalise, detect what the policy cares about, decide, redact.

Pure and synchronous (no I/O); `GuardService` runs it off the event loop with a deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vernis.guards.findings import PII_CATEGORIES, Action, Category, Finding, Severity
from vernis.guards.injection import detect_injection, encoded_payloads
from vernis.guards.normalise import normalise, skeleton
from vernis.guards.pii import detect_pii
from vernis.guards.policy import OrganizationPolicy

__all__ = ["Decided", "ScanResult", "scan_text"]

# Decoded payloads are searched for these besides injection: a key hidden in base64 is still a key.
_ENCODED_SECRETS = (Category.CREDENTIAL, Category.JWT)


@dataclass(frozen=True, slots=True)
class Decided:
    finding: Finding
    action: Action


@dataclass(frozen=True, slots=True)
class ScanResult:
    """`text` is what may go on (normalised, every finding whose action is `redact` redacted, whatever
    the strongest action); with `action` BLOCK a user's text may not go on at all."""

    action: Action
    findings: tuple[Decided, ...]
    text: str

    @property
    def redacted(self) -> bool:
        return any(decided.action is Action.REDACT for decided in self.findings)


def _inside(start: int, end: int, spans: Iterable[tuple[int, int]]) -> bool:
    return any(s <= start and end <= e for s, e in spans)


def _detect(
    scan: str, policy: OrganizationPolicy, region: str | None, *, pii: Iterable[Category]
) -> list[Finding]:
    findings: list[Finding] = []
    pii = tuple(pii)
    if pii:
        allowed = policy.allowed_spans(scan, folded=False)
        findings.extend(f for f in detect_pii(scan, pii, region) if not _inside(f.start, f.end, allowed))
    if policy.scans_injection:
        folded = skeleton(scan)  # once: the allow-list and the detectors both read it
        folded_allowed = policy.allowed_spans(folded, folded=True)
        plain_allowed = policy.allowed_spans(scan, folded=False)
        for finding in detect_injection(scan, folded):
            # Latin signals are found in the skeleton, Cyrillic ones in the plain text.
            if not (
                _inside(finding.start, finding.end, folded_allowed)
                or _inside(finding.start, finding.end, plain_allowed)
            ):
                findings.append(finding)
    return findings


def scan_text(
    text: str,
    policy: OrganizationPolicy,
    region: str | None = None,
    *,
    categories: Iterable[Category] | None = None,
) -> ScanResult:
    """Scan `text` under `policy`. `categories` (default: those the policy does not allow anyway)
    are the personal-data categories looked for; injection is looked for unless the policy allows
    every severity of it."""
    prepared = normalise(text)
    scan = prepared.scan
    wanted = tuple(
        policy.pii_categories if categories is None else (c for c in categories if c in PII_CATEGORIES)
    )
    raw = _detect(scan, policy, region, pii=wanted)
    # What an encoding hides is judged as if written in clear, at the payload's place.
    for payload in encoded_payloads(scan):
        secrets = [c for c in _ENCODED_SECRETS if c in wanted]
        for inner in _detect(payload.decoded, policy, region, pii=secrets):
            severity = (
                max(inner.severity, Severity.HIGH) if inner.category is Category.INJECTION else inner.severity
            )
            raw.append(
                Finding(
                    inner.category, severity, f"{payload.kind}:{inner.signal}", payload.start, payload.end
                )
            )
    decided = tuple(Decided(finding, policy.action(finding)) for finding in raw)
    action = max((d.action for d in decided), default=Action.ALLOW)
    clean = prepared.clean
    # Whatever else was found (a block is stronger than a redaction), what must be redacted is: a
    # text that goes on anyway (a tool result, marked untrusted) never carries it in clear.
    redact = [d.finding for d in decided if d.action is Action.REDACT]
    if redact:
        clean = _redact(prepared.to_clean, clean, redact)
    return ScanResult(action, decided, clean)


def _redact(to_clean: Callable[[int, int], tuple[int, int]], clean: str, findings: list[Finding]) -> str:
    """`clean` with every span replaced by its category's marker; overlapping spans become one,
    marked by the most severe of them."""
    spans = sorted((*to_clean(f.start, f.end), f) for f in findings)
    merged: list[tuple[int, int, Finding]] = []
    for start, end, finding in spans:
        if merged and start < merged[-1][1]:
            last_start, last_end, last = merged[-1]
            keep = finding if finding.severity > last.severity else last
            merged[-1] = (last_start, max(end, last_end), keep)
        else:
            merged.append((start, end, finding))
    parts = []
    cursor = 0
    for start, end, finding in merged:
        parts.append(clean[cursor:start])
        parts.append(finding.category.marker)
        cursor = end
    parts.append(clean[cursor:])
    return "".join(parts)
