"""`vernis.guards.prefilter`: an expression is skipped only for a text it cannot match."""

from __future__ import annotations

import os
import random
import re
import string
import subprocess
import sys
from pathlib import Path
from re import _constants as _c  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]
from typing import Any

import pytest

from vernis.guards import injection, pii
from vernis.guards.corpus import load_corpus
from vernis.guards.normalise import normalise, skeleton
from vernis.guards.prefilter import Prefilter, digit_count, digits, needs

SECRETS = [pattern for _, pattern in pii._SECRET_PATTERNS]
NATIONAL_IDS = [kind.pattern for kind in pii._NATIONAL_IDS]
INJECTION = [pattern for pattern, _, _ in injection._LATIN_PATTERNS]
WORDED = [pii._BASIC_AUTH, pii._PASSWORD]
GROUPS = {
    "secrets": SECRETS,
    "worded": WORDED,
    "national_ids": NATIONAL_IDS,
    "cards": [pii._CARD],
    "ibans": [pii._IBAN],
    "injection": INJECTION,
}
BEFORE = ["", "Hi, ", "see below:\n", "The value (from the CRM) is ", "ok "]
AFTER = ["", " thanks", ".\n", ", see above", "!"]
_WORD = string.ascii_letters + string.digits + "_"
_PRINTABLE = string.ascii_letters + string.digits + " -_.:/=+@'\"!?,;()[]<>#*\n"


def _char_of(members: list[tuple[Any, Any]], rng: random.Random) -> str:
    """A character of the class `members` (ASCII), or of its complement when negated."""
    negated = bool(members) and members[0][0] is _c.NEGATE
    if negated:
        excluded = re.compile("[" + "".join(_class_source(op, av) for op, av in members[1:]) + "]", re.ASCII)
        choices = [c for c in _PRINTABLE if not excluded.match(c)]
        return rng.choice(choices)
    pool: list[str] = []
    for op, av in members:
        if op is _c.LITERAL:
            pool.append(chr(av))
        elif op is _c.RANGE:
            low, high = av
            pool.extend(chr(code) for code in range(low, min(high, 126) + 1) if code < 128)
        elif op is _c.CATEGORY:
            pool.extend(
                {
                    _c.CATEGORY_DIGIT: string.digits,
                    _c.CATEGORY_WORD: _WORD,
                    _c.CATEGORY_SPACE: " \t\n",
                    _c.CATEGORY_NOT_WORD: " -.:/=",
                    _c.CATEGORY_NOT_DIGIT: "ab -",
                    _c.CATEGORY_NOT_SPACE: "ab1-",
                }.get(av, "a")
            )
    return rng.choice(pool or ["a"])


def _class_source(op: Any, av: Any) -> str:
    if op is _c.LITERAL:
        return re.escape(chr(av))
    if op is _c.RANGE:
        return f"{re.escape(chr(av[0]))}-{re.escape(chr(av[1]))}"
    if op is _c.CATEGORY:
        return {
            _c.CATEGORY_DIGIT: r"\d",
            _c.CATEGORY_WORD: r"\w",
            _c.CATEGORY_SPACE: r"\s",
            _c.CATEGORY_NOT_WORD: r"\W",
            _c.CATEGORY_NOT_DIGIT: r"\D",
            _c.CATEGORY_NOT_SPACE: r"\S",
        }[av]
    return ""


def _sample(items: Any, rng: random.Random, folded: bool) -> str:
    """A string the parsed expression `items` is likely to match (lookarounds are not honoured:
    the caller keeps only the texts that do match)."""
    out: list[str] = []
    for op, av in items:
        if op is _c.LITERAL:
            char = chr(av)
            out.append(char.swapcase() if folded and rng.random() < 0.5 else char)
        elif op is _c.IN:
            out.append(_char_of(av, rng))
        elif op is _c.ANY:
            out.append(rng.choice(_PRINTABLE.replace("\n", "")))
        elif op is _c.SUBPATTERN:
            out.append(_sample(av[3], rng, folded))
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            low, high, inner = av
            count = rng.randint(low, min(high, low + 3))
            out.extend(_sample(inner, rng, folded) for _ in range(count))
        elif op is _c.BRANCH:
            out.append(_sample(rng.choice(av[1]), rng, folded))
        elif op is _c.ATOMIC_GROUP:
            out.append(_sample(av, rng, folded))
    return "".join(out)


def _matching_texts(pattern: re.Pattern[str], rng: random.Random, tries: int) -> list[str]:
    parsed = _parser.parse(pattern.pattern, pattern.flags)
    folded = bool(pattern.flags & re.IGNORECASE)
    texts = []
    for _ in range(tries):
        text = rng.choice(BEFORE) + _sample(parsed, rng, folded) + rng.choice(AFTER)
        if text.isascii() and pattern.search(text):
            texts.append(text)
    return texts


@pytest.mark.parametrize("group", GROUPS)
def test_an_expression_is_kept_for_every_text_it_matches(group: str) -> None:
    """Texts made from each expression (its literals in random case where it ignores case, set in
    prose) that it matches: the prefilter keeps it for every one of them."""
    patterns = GROUPS[group]
    prefilter = Prefilter(patterns)
    rng = random.Random(f"prefilter-{group}")
    checked = 0
    for index, pattern in enumerate(patterns):
        texts = _matching_texts(pattern, rng, max(60, 300 // len(patterns)))
        assert len(texts) >= 10, f"too few texts made for {pattern.pattern!r}"
        for text in texts:
            assert index in prefilter.candidates(text), (pattern.pattern, text)
            checked += 1
    assert checked >= 30 * len(patterns)


def test_the_guards_corpus_loses_no_match_to_the_prefilter() -> None:
    """Every text of the guards' corpus, as the detectors read it: each expression that matches it
    is among the candidates."""
    corpus = load_corpus(Path(__file__).with_name("corpus.toml"))
    texts = [normalise(case.text).scan for case in corpus]
    views = {group: texts for group in GROUPS} | {"injection": [skeleton(text) for text in texts]}
    matched = 0
    for group, patterns in GROUPS.items():
        prefilter = Prefilter(patterns)
        for text in views[group]:
            kept = set(prefilter.candidates(text))
            for index, pattern in enumerate(patterns):
                if pattern.search(text):
                    matched += 1
                    assert index in kept, (pattern.pattern, text)
    assert matched >= 30


def test_a_text_without_what_they_need_runs_none_of_them() -> None:
    """An ordinary question runs no credential, national-id or injection expression, nor a short
    number any national-id one; a text holding a key's prefix runs those that need it."""
    question = normalise("How are my contacts doing this week?").scan
    assert list(Prefilter(SECRETS).candidates(question)) == []
    assert list(Prefilter(NATIONAL_IDS).candidates(question)) == []
    assert list(Prefilter(INJECTION).candidates(skeleton(question))) == []
    # A number too short for any national id (each needs three digits in a row or more).
    update = normalise("They agreed to 12 seats at the new price.").scan
    assert list(Prefilter(NATIONAL_IDS).candidates(update)) == []
    key = "my key is AKIAIOSFODNN7EXAMPLE"
    kept = [SECRETS[index].pattern for index in Prefilter(SECRETS).candidates(key)]
    assert any("AKIA" in source for source in kept)


def test_a_text_not_all_ascii_is_never_filtered() -> None:
    """Case folding beyond ASCII (the Kelvin sign, the long s) is the expressions' own: such a text
    runs them all."""
    patterns = [re.compile("key", re.IGNORECASE), re.compile("secret")]
    assert list(Prefilter(patterns).candidates("\N{KELVIN SIGN}ey")) == [0, 1]
    assert re.compile("key", re.IGNORECASE).search("\N{KELVIN SIGN}ey")


@pytest.mark.parametrize(
    ("source", "required"),
    [
        (r"sk-ant-[A-Za-z0-9]{32,}", [{"sk-ant-"}]),
        (r"(?:ghp|xoxb)_\w+", [{"ghp", "xoxb"}, {"_"}]),
        (r"\d{3}-\d{2}", [{digits(3)}, {"-"}, {digits(2)}]),
        (r"(?:\d{2})?\d{6}[-+]?\d{4}", [{digits(6)}, {digits(4)}]),
        (r"[12] ?\d{2}\d", [{digits(1)}, {digits(3)}]),
        (r"x?y{0,3}(?=abc)(?<!def)[a-z]+", []),
        (r"(?:token|)=", [{"="}]),
        (r"(?i:secret)", []),
        (r"\\d", [{"\\d"}]),
    ],
)
def test_what_an_expression_needs(source: str, required: list[set[str]]) -> None:
    """Literal runs, alternations and digits in a row are needs; optional parts, lookarounds, other
    classes, a branch that may be empty and inline flags need nothing; a literal backslash-d is no
    digit."""
    assert sorted(map(sorted, needs(re.compile(source)))) == sorted(map(sorted, required))


def test_under_ignorecase_the_needles_are_lowered() -> None:
    """An expression that ignores case needs its literals in the lowered text."""
    prefilter = Prefilter([re.compile("BEGIN RSA PRIVATE KEY", re.IGNORECASE)])
    assert list(prefilter.candidates("-----begin rsa private key-----")) == [0]
    assert list(prefilter.candidates("-----BEGIN DSA PRIVATE KEY-----")) == []


def test_a_spelt_address_is_found_however_its_at_is_written() -> None:
    """Texts the spelt-address pattern matches (brackets and spacing of "(at)" varied) all pass the
    cheap look for their "(at)" first, and are found."""
    rng = random.Random("spelt")
    texts = _matching_texts(pii._SPELT_EMAIL, rng, 200)
    assert len(texts) >= 100
    for text in texts:
        assert pii._SPELT_AT.search(text), text
        assert [signal for *_, signal in pii._emails(text)].count("spelt_address") >= 1, text


def test_a_need_beyond_ascii_skips_only_ascii_texts_and_never_one_that_folds_to_ascii() -> None:
    """A word beyond ASCII ("contraseña") is needed as it is: an ASCII text skips the expression, a
    text holding it runs it; a character that matches an ASCII letter ignoring case (the Kelvin
    sign) makes its literal need nothing."""
    spanish = Prefilter([re.compile("contraseña:", re.IGNORECASE)])
    assert list(spanish.candidates("my contrasena: x")) == []
    assert list(spanish.candidates("mi CONTRASEÑA: x")) == [0]
    kelvin = re.compile("\N{KELVIN SIGN}ey", re.IGNORECASE)
    assert kelvin.search("key")
    assert list(Prefilter([kelvin]).candidates("a key")) == [0]


@pytest.mark.parametrize(
    "text", ["", "no digits here", "call 555 0100 12", "a² b³ ٣ 12", "x" * 500 + "1234567"]
)
def test_the_digits_of_a_text_are_counted_as_str_isdigit_counts_them(text: str) -> None:
    """The phone detector's digit count, fast for ASCII, is `str.isdigit`'s in every text (superscripts
    and other scripts' digits included), before and after a filter of the same text shares its runs."""
    assert digit_count(text) == sum(char.isdigit() for char in text)
    Prefilter([re.compile(r"\d{3}")]).candidates(text)
    assert digit_count(text) == sum(char.isdigit() for char in text)


def test_the_index_does_not_depend_on_the_hash_seed() -> None:
    """Two processes under different hash seeds index every filtered group alike (which needles,
    which expressions under each, what else each needs)."""
    program = (
        "from vernis.guards import injection, pii\n"
        "out = []\n"
        "for f in (pii._SECRET_FILTER, pii._WORDED_FILTER, pii._NATIONAL_FILTER, injection._LATIN_FILTER):\n"
        "    out += [sorted(f._exact), sorted(f._lowered), f._runs, f._always,\n"
        "            sorted((k, sorted(map(sorted, v))) for k, v in f._others.items())]\n"
        "print(repr(out))\n"
    )
    indexes = [
        subprocess.run(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    ]
    assert indexes[0]
    assert indexes[0] == indexes[1]
