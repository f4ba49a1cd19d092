"""Prompt-injection signals: text written to make the model drop its instructions.

Four kinds, each scored by severity:

- `override`: "ignore all previous instructions", "disregard your rules", "your real task is…",
  in English, French, German, Spanish, Italian, Portuguese, Dutch and Russian (high);
- `role_play`: jailbreak personas ("DAN", "developer mode", "you have no restrictions") are high;
  softer role changes ("pretend you are…") medium;
- `fake_marker`: text posing as a system or tool message: chat-template tokens ("<|im_start|>system")
  and tool-result tags are high, a "[SYSTEM]" or "### system:" heading medium;
- `prompt_leak`: asking for the system prompt (medium);
- `encoded`: a base64 or hex payload that decodes to text with any of the above (high, whatever
  the decoded signal's own severity), or to a secret (the secret's category).

The patterns run on the folded `skeleton` view (see `normalise`), so homoglyphs, zero-width
characters, leetspeak and spaced-out letters do not hide them; the Cyrillic ones run on the plain
lower-case text. A user saying "ignore my previous message" is not matched: only instructions,
rules, prompts and the like, which a member of a CRM has no reason to address.
"""

# ruff: noqa: E501 (one signal per line reads better than patterns cut in pieces)

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass

from vernis.guards.findings import Category, Finding, Severity
from vernis.guards.normalise import skeleton
from vernis.guards.prefilter import Prefilter

__all__ = ["EncodedPayload", "detect_injection", "encoded_payloads"]

_W = r"[\s\W_]{0,3}"  # between two words: spaces, punctuation, or nothing (joined letters)


def _phrase(*words: str) -> str:
    # From the start of a word: "act as" is a signal, the letters "actas" inside an id are not.
    return r"\b" + _W.join(words)


_STRONG = (
    r"(?:all|any|every|your|previous|prior|preceding|above|earlier|former|original|initial|system|developer)"
)
_FILLER = r"(?:the|of|these|those|my|above|and|other)"
_RULES = r"(?:instructions?|prompts?|rules?|directives?|guidelines?|directions?|programming|constraints?|guardrails?|system\s?prompt)"

_LATIN: tuple[tuple[str, Severity, str], ...] = (
    # English
    (
        _phrase(
            r"(?:ignore|disregard|forget|override|bypass)",
            rf"(?:{_FILLER}{_W})?{_STRONG}",
            rf"(?:(?:{_STRONG}|{_FILLER}){_W}){{0,2}}{_RULES}",
        ),
        Severity.HIGH,
        "override",
    ),
    (
        _phrase(
            r"(?:do not|don'?t|never|stop)",
            r"(?:follow|following|obey|obeying)",
            rf"(?:{_FILLER}{_W})?{_STRONG}",
            rf"(?:(?:{_STRONG}|{_FILLER}){_W}){{0,2}}{_RULES}",
        ),
        Severity.HIGH,
        "override",
    ),
    (_phrase("new", r"(?:instructions|system prompt)", r"(?:are|follow|:)"), Severity.HIGH, "override"),
    (
        _phrase("you", "are", "no", "longer", r"(?:an?|the|bound|restricted|required)"),
        Severity.HIGH,
        "override",
    ),
    (
        _phrase(
            "your", r"(?:real|true|actual|only)", r"(?:task|goal|instructions?|purpose|job)", r"(?:is|now)"
        ),
        Severity.HIGH,
        "override",
    ),
    # jailbreaks and role play
    (
        r"\b(?:dan|stan|dude|aim)\b" + _W + r"(?:mode|prompt|jailbreak)|\bdo anything now\b",
        Severity.HIGH,
        "role_play",
    ),
    (r"\bjailbre?ak(?:ed|ing)?\b", Severity.HIGH, "role_play"),
    (
        _phrase(
            r"(?:developer|god|admin|sudo|unrestricted|unfiltered|debug)",
            "mode",
            r"(?:enabled|on|activated)?",
        ),
        Severity.HIGH,
        "role_play",
    ),
    (
        _phrase(
            "you", r"(?:have|with)", "no", r"(?:restrictions|limits|rules|filters|guidelines|ethics|morals)"
        ),
        Severity.HIGH,
        "role_play",
    ),
    (
        _phrase(
            r"(?:without|ignoring)", r"(?:any|all|your)", r"(?:restrictions|filters|safety|guidelines|rules)"
        ),
        Severity.HIGH,
        "role_play",
    ),
    (
        _phrase(
            r"(?:pretend|imagine|act|behave|roleplay|role-play)", r"(?:you are|to be|as|that you are|as if)"
        ),
        Severity.MEDIUM,
        "role_play",
    ),
    (_phrase("you", "are", "now", r"(?:a|an|the|my|in)"), Severity.MEDIUM, "role_play"),
    # the system prompt asked for
    (
        _phrase(
            r"(?:reveal|show|print|repeat|output|display|leak|tell me|give me|what is|what are)",
            r"(?:me\s)?(?:your|the)",
            r"(?:system|initial|hidden|original|secret)",
            r"(?:prompt|instructions?|message)",
        ),
        Severity.MEDIUM,
        "prompt_leak",
    ),
    # French
    (
        _phrase(
            r"(?:ignore[rz]?|oublie[rz]?|ne tiens pas compte)",
            r"(?:toutes|tous|les|tes|vos)",
            r"(?:les\s)?(?:instructions|consignes|regles|directives)",
        ),
        Severity.HIGH,
        "override",
    ),
    (_phrase(r"(?:instructions|consignes)", r"(?:precedentes|anterieures)"), Severity.MEDIUM, "override"),
    # German
    (
        _phrase(
            r"(?:ignoriere|vergiss|missachte)",
            r"(?:alle|die|deine|vorherigen|bisherigen|vorigen)",
            r"(?:vorherigen\s|bisherigen\s)?(?:anweisungen|regeln|instruktionen|vorgaben)",
        ),
        Severity.HIGH,
        "override",
    ),
    # Spanish
    (
        _phrase(
            r"(?:ignora|olvida|omite)",
            r"(?:todas|las|tus)",
            r"(?:las\s)?(?:instrucciones|reglas|indicaciones)",
        ),
        Severity.HIGH,
        "override",
    ),
    (_phrase("instrucciones", "anteriores"), Severity.MEDIUM, "override"),
    # Italian
    (
        _phrase(r"(?:ignora|dimentica)", r"(?:tutte|le|tue)", r"(?:le\s)?(?:istruzioni|regole)"),
        Severity.HIGH,
        "override",
    ),
    # Portuguese
    (
        _phrase(r"(?:ignore|esqueca|desconsidere)", r"(?:todas|as|suas)", r"(?:as\s)?(?:instrucoes|regras)"),
        Severity.HIGH,
        "override",
    ),
    # Dutch
    (
        _phrase(
            r"(?:negeer|vergeet)",
            r"(?:alle|de|je|vorige|eerdere)",
            r"(?:vorige\s|eerdere\s)?(?:instructies|regels)",
        ),
        Severity.HIGH,
        "override",
    ),
    # fake system / tool messages
    (
        r"<\|?\s*(?:im_start|im_end|system|endoftext|start_header_id|eot_id)\s*\|?>",
        Severity.HIGH,
        "fake_marker",
    ),
    (
        # The spaces before the marker are the line's own ([^\S\n], not \s): \s would let every
        # line start of a run of blank lines take all the lines after it, and give them back one by
        # one, a search as slow as the square of the run (8,000 newlines: a second).
        r"(?:^|\n)[^\S\n]*(?:#{2,}|\[|<|\*\*)\s*(?:system|developer|assistant|tool)(?:\s(?:message|prompt|note|override|update))?\s*(?:\]|>|:|\*\*)",
        Severity.MEDIUM,
        "fake_marker",
    ),
    (
        r"</?\s*(?:tool_result|tool_output|function_result|system_prompt|instructions)\s*>",
        Severity.HIGH,
        "fake_marker",
    ),
    (
        r"\bbegin\s(?:system|new)\s(?:prompt|instructions)\b|\bend\sof\s(?:system\s)?(?:prompt|instructions)\b",
        Severity.HIGH,
        "fake_marker",
    ),
)
_CYRILLIC: tuple[tuple[str, Severity, str], ...] = (
    (
        r"(?:игнорируй|забудь|проигнорируй|не обращай внимания на)\s+(?:все\s+)?(?:предыдущие|прошлые|свои|твои|прежние)?\s*(?:инструкции|правила|указания)",
        Severity.HIGH,
        "override",
    ),
    (r"(?:ты|вы)\s+(?:теперь|больше не)\s", Severity.MEDIUM, "role_play"),
    (
        r"(?:покажи|выведи|раскрой)\s+(?:свой|твой|системный)\s+(?:системный\s+)?(?:промпт|запрос|инструкции)",
        Severity.MEDIUM,
        "prompt_leak",
    ),
)
_LATIN_PATTERNS = tuple((re.compile(p, re.MULTILINE), s, k) for p, s, k in _LATIN)
# Each needs words (`vernis.guards.prefilter`): those of a text that has none of them are not run.
_LATIN_FILTER = Prefilter([pattern for pattern, _, _ in _LATIN_PATTERNS])
_CYRILLIC_PATTERNS = tuple((re.compile(p, re.IGNORECASE), s, k) for p, s, k in _CYRILLIC)
_HAS_CYRILLIC = re.compile(r"[\u0400-\u04ff]")


def detect_injection(text: str, folded: str | None = None) -> list[Finding]:
    """Injection signals in `text` (the `scan` view; `folded`: its `skeleton`, if the caller has it
    already). Spans are in the view they were found in (skeleton or lower case), which only the
    allow-list compares with; injection is never redacted."""
    findings = []
    if folded is None:
        folded = skeleton(text)
    for index in _LATIN_FILTER.candidates(folded):
        pattern, severity, kind = _LATIN_PATTERNS[index]
        for match in pattern.finditer(folded):
            findings.append(Finding(Category.INJECTION, severity, kind, match.start(), match.end()))
    if _HAS_CYRILLIC.search(text):
        lowered = text.lower()
        for pattern, severity, kind in _CYRILLIC_PATTERNS:
            for match in pattern.finditer(lowered):
                findings.append(Finding(Category.INJECTION, severity, kind, match.start(), match.end()))
    return findings


# --- encoded payloads ----------------------------------------------------------------------------

_BASE64 = re.compile(r"(?<![\w+/=-])[A-Za-z0-9+/_-]{16,}={0,2}(?![\w+/=-])")
_HEX = re.compile(r"(?<![\w])(?:[0-9a-fA-F]{2}){12,}(?![\w])")


@dataclass(frozen=True, slots=True)
class EncodedPayload:
    start: int
    end: int
    kind: str
    decoded: str


def _printable(raw: bytes) -> str | None:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not decoded or sum(char.isprintable() or char in "\n\r\t" for char in decoded) < 0.95 * len(decoded):
        return None
    # Words, not noise: at least one space or a long run of letters.
    return decoded if re.search(r"[^\W\d_]{3,}", decoded) else None


def encoded_payloads(text: str) -> Iterator[EncodedPayload]:
    """Base64 (standard or URL-safe) and hex runs in `text` that decode to readable text."""
    for match in _BASE64.finditer(text):
        candidate = match[0]
        if candidate.isalpha() or candidate.isdigit():
            continue  # a long word or number, not an encoding
        bare = candidate.rstrip("=")
        padded = bare + "=" * (-len(bare) % 4)
        try:
            raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            continue
        decoded = _printable(raw)
        if decoded is not None:
            yield EncodedPayload(match.start(), match.end(), "base64", decoded)
    for match in _HEX.finditer(text):
        decoded = _printable(bytes.fromhex(match[0]))
        if decoded is not None:
            yield EncodedPayload(match.start(), match.end(), "hex", decoded)
