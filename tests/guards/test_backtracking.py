"""Texts built to make the guards' regular expressions backtrack are scanned in time linear in their
length: a search holds the GIL until it ends, so one slow search stops the whole server (found by
an audit of every pattern against runs of one or two characters; `bench/results/2026-11-server.md`,
session 22)."""

from __future__ import annotations

import re
import time

import pytest
from detect_secrets.plugins.npm import NpmDetector
from hypothesis import given, settings
from hypothesis import strategies as st

from vernis.guards import GuardPolicy
from vernis.guards.normalise import _HEX_ID, _LEET, _MIXED_WORD, _unleet
from vernis.guards.scan import scan_text

SIZE = 48_000

# Each took seconds before (its time grew with the square of its length): at 8,000 characters a
# second for the blank lines, 0.6 s for the "_@" run, 0.2 s for the slashes.
HOSTILE = {
    "blank lines after a fake system marker": "[system]\n" + "\n" * SIZE,
    "a run of word characters and at signs": "_@" * (SIZE // 2),
    "slashes before an npm registry token's key": "/" * SIZE + "/:_authToken=x",
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_text_is_scanned_well_within_the_deadline(text: str) -> None:
    """A 48,000-character text made to make a pattern backtrack is scanned in a fraction of the guards' deadline (2 s; tens of milliseconds here, many seconds before), on the caller's thread: the deadline cannot cut a search short, so this bound is the scan's own."""
    policy = GuardPolicy()
    started = time.perf_counter()
    scan_text(text, policy.for_organization("acme"), policy.phone_region)
    assert time.perf_counter() - started < policy.timeout / 4


# An .npmrc's registry lines, and lines like them that hold no token.
NPMRC = {
    "//registry.npmjs.org/:_authToken=npm_abc123": True,
    "//npm.pkg.github.com/acme/packages/:_authToken=12345678-1234-1234-1234-123456789abc": True,
    "  //registry.example.com:8443/npm/:_authToken= npm_x": True,
    "//registry.npmjs.org/:_authToken=${NPM_TOKEN}": False,
    "//registry.npmjs.org/:always-auth=true": False,
}


def test_npm_registry_tokens_are_found_as_by_detect_secrets_pattern() -> None:
    """The npm registry pattern that replaced detect-secrets' finds a token where detect-secrets' own pattern does, and nothing where it does not."""
    (theirs,) = NpmDetector().denylist
    policy = GuardPolicy()
    for line, holds_token in NPMRC.items():
        assert bool(theirs.search(line)) is holds_token, line
        signals = {d.finding.signal for d in scan_text(line, policy.for_organization("acme"), None).findings}
        assert ("NpmDetector" in signals) is holds_token, line


# The leetspeak pattern as it was, with a plain word boundary: the same words, slow on long runs.
_BOUNDARY_WORD = re.compile(r"\b(?=[\w@$]*[a-z])(?=[\w@$]*[0-9@$])[\w@$]+")


def _as_before(folded: str) -> str:
    def unleet(match: re.Match[str]) -> str:
        word = match[0]
        if sum(char.isdigit() for char in word) > sum(char.isalpha() for char in word) or _HEX_ID.fullmatch(
            word
        ):
            return word
        return word.translate(_LEET)

    return _BOUNDARY_WORD.sub(unleet, folded)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab1@$_ -.x0é9Z", max_size=16))
def test_leetspeak_words_are_read_as_with_a_plain_word_boundary(text: str) -> None:
    """The skeleton's leetspeak words are the ones the word-boundary pattern it replaced found, read the same, on any short text."""
    folded = text.lower()
    assert _MIXED_WORD.sub(_unleet, folded) == _as_before(folded)
