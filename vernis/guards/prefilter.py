"""What every match of a regular expression must contain, found from the expression itself: a test
of a few substring lookups that skips, for most texts, a search that could not match anything.

A detector runs dozens of expressions over each text (the credential patterns alone are 48), and
most texts match none of them. `needs(pattern)` reads the parsed expression (`re._parser`, the
standard library's own) for what any match must hold: a literal run (`AKIA`, `-----BEGIN`), one of
several (`ghp|gho|ghu`), a digit. When a text lacks one of them (`Prefilter.candidates`), the
expression matches nowhere in it: skipping its search changes no finding.

Sound by construction, not by testing: a requirement comes from a part that every match goes
through (a repeat only when it runs at least once, an alternation only when each branch has one),
and anything not understood (lookarounds, classes other than digits, inline flags) requires
nothing. Under IGNORECASE the lookup is in the lowered text, which matches the expression's case
folding for ASCII only; a text with any other character is never filtered.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# The parser `re.compile` itself uses (the standard library has no public one; no stubs either).
from re import _constants as _c  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]

__all__ = ["DIGIT", "Prefilter", "needs"]

# The need for any ASCII digit (the text is ASCII when filtered). Not ASCII itself: no literal
# needle (they are ASCII) is ever taken for it.
DIGIT = "\N{MIDDLE DOT}digit"
_ANY_DIGIT = re.compile(r"[0-9]")
_DIGITS = range(0x30, 0x3A)
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT)

# One requirement: a match contains at least one of these (a literal, or `DIGIT`).
_Any = frozenset[str]
# A needle as looked up: the string, and whether in the lowered text.
_Key = tuple[str, bool]


def needs(pattern: re.Pattern[str]) -> list[_Any]:
    """Requirements that every match of `pattern` meets, all of them (literals lowered when the
    pattern ignores case); the strongest first. Empty: nothing is known."""
    folded = bool(pattern.flags & re.IGNORECASE)
    found = _sequence(_parser.parse(pattern.pattern, pattern.flags), folded)
    return sorted(set(found), key=_strength, reverse=True)


class Prefilter:
    """The expressions `patterns` (in order) and what each needs; `candidates(text)` are those that
    may match `text`, in their order: the others match nowhere in it."""

    def __init__(self, patterns: Sequence[re.Pattern[str]]) -> None:
        self._all = tuple(range(len(patterns)))
        self._always: list[int] = []
        # Each expression is indexed under the needles of its strongest requirement (looked up in
        # the text, in the lowered text, or a digit); its other requirements are checked only for
        # the expressions found that way.
        exact: dict[str, list[int]] = {}
        lowered: dict[str, list[int]] = {}
        digit: list[int] = []
        self._others: dict[int, list[list[_Key]]] = {}
        for index, pattern in enumerate(patterns):
            folded = bool(pattern.flags & re.IGNORECASE)
            found = needs(pattern)
            if not found:
                self._always.append(index)
                continue
            for needle in found[0]:
                if needle == DIGIT:
                    digit.append(index)
                else:
                    (lowered if folded else exact).setdefault(needle, []).append(index)
            if len(found) > 1:
                self._others[index] = [[(needle, folded) for needle in one] for one in found[1:]]
        self._exact = [(needle, tuple(indexes)) for needle, indexes in exact.items()]
        self._lowered = [(needle, tuple(indexes)) for needle, indexes in lowered.items()]
        self._digit = tuple(digit)

    def candidates(self, text: str) -> Sequence[int]:
        if not text.isascii():
            return self._all
        lowered = text.lower()
        # One comprehension per view: the needles are looked up in C, the loop is the cost.
        found = [indexes for needle, indexes in self._exact if needle in text]
        found += [indexes for needle, indexes in self._lowered if needle in lowered]
        if self._digit and _ANY_DIGIT.search(text) is not None:
            found.append(self._digit)
        if not found and not self._always:
            return ()
        hits = set(self._always).union(*found)

        def has(key: _Key) -> bool:
            needle, folded = key
            if needle == DIGIT:
                return _ANY_DIGIT.search(text) is not None
            return needle in (lowered if folded else text)

        others = self._others
        return [
            index
            for index in sorted(hits)
            if index not in others or all(any(has(key) for key in one) for one in others[index])
        ]


def _strength(need: _Any) -> tuple[int, int, tuple[str, ...]]:
    """Rarer first: the shortest needle's length (a digit counts one), then fewer needles; then
    the needles themselves, so that the order never depends on the hash seed."""
    return min(1 if needle == DIGIT else len(needle) for needle in need), -len(need), tuple(sorted(need))


def _sequence(items: _parser.SubPattern, folded: bool) -> list[_Any]:
    """Every requirement that a match of the sequence `items` must meet (all of them)."""
    needs: list[_Any] = []
    run: list[str] = []

    def end_run() -> None:
        if run:
            literal = "".join(run)
            if literal.isascii():
                needs.append(frozenset({literal.lower() if folded else literal}))
            run.clear()

    for op, av in items:
        if op is _c.LITERAL:
            run.append(chr(av))
            continue
        end_run()
        if op is _c.SUBPATTERN:
            _group, add_flags, del_flags, inner = av
            if not add_flags and not del_flags:
                needs.extend(_sequence(inner, folded))
        elif op in _REPEATS:
            low, _high, inner = av
            if low >= 1:
                needs.extend(_sequence(inner, folded))
        elif op is _c.BRANCH:
            one = _branches(av[1], folded)
            if one is not None:
                needs.append(one)
        elif op is _c.IN and _digits_only(av):
            needs.append(frozenset({DIGIT}))
        elif op is _c.ATOMIC_GROUP:
            needs.extend(_sequence(av, folded))
        # Anything else (a class, a lookaround, an anchor, a back-reference) requires nothing here.
    end_run()
    return needs


def _branches(branches: list[_parser.SubPattern], folded: bool) -> _Any | None:
    """What a match of one of `branches` must contain: each branch's strongest need, together; None
    when some branch needs nothing."""
    union: set[str] = set()
    for branch in branches:
        found = _sequence(branch, folded)
        if not found:
            return None
        union.update(sorted(found, key=_strength)[-1])
    return frozenset(union)


def _digits_only(members: list[tuple[object, object]]) -> bool:
    """Whether a character class holds ASCII digits only (in an ASCII text, what `\\d` can match)."""
    if not members:
        return False
    for op, av in members:
        if op is _c.CATEGORY and av is _c.CATEGORY_DIGIT:
            continue
        if op is _c.LITERAL and isinstance(av, int) and av in _DIGITS:
            continue
        if op is _c.RANGE and isinstance(av, tuple) and av[0] in _DIGITS and av[1] in _DIGITS:
            continue
        return False
    return True
