"""What every match of a regular expression must contain, found from the expression itself: a test
of a few substring lookups that skips, for most texts, a search that could not match anything.

A detector runs dozens of expressions over each text (the credential patterns alone are 48), and
most texts match none of them. `needs(pattern)` reads the parsed expression (`re._parser`, the
standard library's own) for what any match must hold: a literal run (`AKIA`, `-----BEGIN`), one of
several (`ghp|gho|ghu`), so many digits in a row (a US social security number: three, two and four).
When a text lacks one of them (`Prefilter.candidates`), the expression matches nowhere in it:
skipping its search changes no finding.

Sound by construction, not by testing: a requirement comes from a part that every match goes
through (a repeat only when it runs at least once, an alternation only when each branch has one),
and anything not understood (lookarounds, classes other than digits, inline flags) requires
nothing; digits in a row are counted only where nothing else comes between them. Under IGNORECASE
the lookup is in the lowered text, which matches the expression's case folding for ASCII only; a
text with any other character is never filtered.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# The parser `re.compile` itself uses (the standard library has no public one; no stubs either).
from re import _constants as _c  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]
from typing import Any

__all__ = ["Prefilter", "digit_count", "digits", "needs"]

# A needle for `n` ASCII digits in a row (the text is ASCII when filtered): this, then `n`. A
# literal that starts so is never a needle (`_sequence`), so none is taken for one.
_DIGITS_NEEDLE = "\N{MIDDLE DOT}digits:"
_DIGIT_RUN = re.compile(r"[0-9]+")
_DIGITS = range(0x30, 0x3A)
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT)

# One requirement: a match contains at least one of these (a literal, or `digits(n)`).
_OneOf = frozenset[str]
# A needle as looked up: the string, and whether in the lowered text.
_Key = tuple[str, bool]


def digits(n: int) -> str:
    """The needle of `n` ASCII digits in a row."""
    return f"{_DIGITS_NEEDLE}{n}"


def _run_of(needle: str) -> int:
    """The digits in a row a `digits()` needle asks for; 0 for a literal."""
    return int(needle[len(_DIGITS_NEEDLE) :]) if needle.startswith(_DIGITS_NEEDLE) else 0


def needs(pattern: re.Pattern[str]) -> list[_OneOf]:
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
        runs: dict[int, list[int]] = {}
        self._others: dict[int, list[list[_Key]]] = {}
        for index, pattern in enumerate(patterns):
            folded = bool(pattern.flags & re.IGNORECASE)
            found = needs(pattern)
            if not found:
                self._always.append(index)
                continue
            for needle in found[0]:
                if run := _run_of(needle):
                    runs.setdefault(run, []).append(index)
                else:
                    (lowered if folded else exact).setdefault(needle, []).append(index)
            if len(found) > 1:
                self._others[index] = [[(needle, folded) for needle in one] for one in found[1:]]
        self._exact = [(needle, tuple(indexes)) for needle, indexes in exact.items()]
        self._lowered = [(needle, tuple(indexes)) for needle, indexes in lowered.items()]
        self._runs = [(run, tuple(indexes)) for run, indexes in sorted(runs.items())]

    def candidates(self, text: str) -> Sequence[int]:
        if not text.isascii():
            return self._all
        _, lowered, longest, _ = _view(text)
        # One comprehension per view: the needles are looked up in C, the loop is the cost.
        found = [indexes for needle, indexes in self._exact if needle in text]
        found += [indexes for needle, indexes in self._lowered if needle in lowered]
        found += [indexes for run, indexes in self._runs if run <= longest]
        if not found and not self._always:
            return ()
        hits = set(self._always).union(*found)

        def has(key: _Key) -> bool:
            needle, folded = key
            if run := _run_of(needle):
                return run <= longest
            return needle in (lowered if folded else text)

        others = self._others
        return [
            index
            for index in sorted(hits)
            if index not in others or all(any(has(key) for key in one) for one in others[index])
        ]


# The last text looked at, lowered, its longest run of digits and the lengths of all its runs: the
# detectors of one scan each filter the same text. One tuple, read and replaced whole: safe from the
# guards' threads.
_last: tuple[str, str, int, list[int]] = ("", "", 0, [])


def _view(text: str) -> tuple[str, str, int, list[int]]:
    global _last
    last = _last
    if last[0] is text:
        return last
    runs = list(map(len, _DIGIT_RUN.findall(text)))
    last = _last = (text, text.lower(), max(runs, default=0), runs)
    return last


def digit_count(text: str) -> int:
    """How many characters of `text` are digits (`str.isdigit`); in ASCII, from the runs of [0-9]
    the filters of the same text found already."""
    if text.isascii():
        return sum(_view(text)[3])
    return sum(map(str.isdigit, text))


def _strength(need: _OneOf) -> tuple[int, int, tuple[str, ...]]:
    """Rarer first: the shortest needle's length (digits in a row count their number), then fewer
    needles; then the needles themselves, so that the order never depends on the hash seed."""
    return min(_run_of(needle) or len(needle) for needle in need), -len(need), tuple(sorted(need))


def _sequence(items: _parser.SubPattern, folded: bool) -> list[_OneOf]:
    """Every requirement that a match of the sequence `items` must meet (all of them)."""
    needs: list[_OneOf] = []
    run: list[str] = []
    in_a_row = 0  # mandatory digits in a row so far

    def end_run() -> None:
        if run:
            literal = "".join(run)
            # One beyond ASCII is never in a text that is filtered (all ASCII): an expression (or
            # a branch) that needs it is skipped there, unless under IGNORECASE it matches an ASCII
            # letter too (the Kelvin sign a "k"). None may pass for a `digits()` needle.
            beyond = not literal.isascii() and folded and _folds_to_ascii(literal)
            if not beyond and not literal.startswith(_DIGITS_NEEDLE):
                needs.append(frozenset({literal.lower() if folded else literal}))
            run.clear()

    def end_digits() -> None:
        nonlocal in_a_row
        if in_a_row:
            needs.append(frozenset({digits(in_a_row)}))
            in_a_row = 0

    for op, av in items:
        if op is _c.LITERAL:
            end_digits()
            run.append(chr(av))
            continue
        end_run()
        count = _digits_counted(op, av)
        if count:
            in_a_row += count
            continue
        end_digits()
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
        elif op is _c.ATOMIC_GROUP:
            needs.extend(_sequence(av, folded))
        # Anything else (a class, a lookaround, an anchor, a back-reference) requires nothing here.
    end_run()
    end_digits()
    return needs


def _folds_to_ascii(literal: str) -> bool:
    """Whether, ignoring case as `re` does, a character of `literal` beyond ASCII matches an ASCII one."""
    return any(
        re.fullmatch(re.escape(char), chr(code), re.IGNORECASE)
        for char in literal
        if not char.isascii()
        for code in range(128)
    )


def _digits_counted(op: Any, av: Any) -> int:
    """How many digits in a row the item must match: a class of ASCII digits (1), or a repeat of one
    (its minimum); 0 for anything else."""
    if op is _c.IN:
        return 1 if _digits_only(av) else 0
    if op in _REPEATS:
        low: int = av[0]
        inner = av[2]
        if low >= 1 and len(inner) == 1 and inner[0][0] is _c.IN and _digits_only(inner[0][1]):
            return low
    return 0


def _branches(branches: list[_parser.SubPattern], folded: bool) -> _OneOf | None:
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
