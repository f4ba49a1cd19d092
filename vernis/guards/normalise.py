"""Unicode normalisation before any detector runs, so that obfuscation does not hide a finding.

Three views of one text:

- `clean`: NFKC (full-width, ligatures and mathematical letters become plain ones), look-alike
  spaces become a plain space, and the invisible characters that only serve to hide text (zero-width
  space, word joiner, byte-order mark, soft hyphen, bidirectional overrides, Unicode tag characters)
  are removed. This is what the model and the store see; a redaction is made in it.
- `scan`: `clean` without the joiners kept there for emoji and Indic/Persian spelling (ZWJ, ZWNJ,
  variation selectors), and with the digits of every script (Arabic-Indic, Devanagari, ...) read as
  ASCII ones, one for one (NFKC leaves them as they are); the personal-data detectors read it.
  `to_clean()` maps its spans back.
- `skeleton`: `scan` folded for the injection detectors: lower case, accents dropped, Cyrillic and
  Greek look-alikes mapped to the Latin letters they imitate, digits inside words read as the
  letters they stand for ("1gn0re"), and letters spaced out one by one ("i g n o r e") joined.
"""

# ruff: noqa: RUF001 (the look-alike letters are the point of this module)

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["ScanText", "normalise", "skeleton"]

# Removed from what the model sees: they carry no meaning in chat text, only hidden content.
_HIDDEN = {
    *range(0x200B, 0x200C),  # zero-width space
    *range(0x200E, 0x2010),  # LRM, RLM
    *range(0x202A, 0x202F),  # bidi embeddings and overrides
    *range(0x2060, 0x2065),  # word joiner, invisible operators
    *range(0x2066, 0x206A),  # bidi isolates
    *range(0x206A, 0x2070),  # deprecated format characters
    0x00AD,  # soft hyphen
    0x034F,  # combining grapheme joiner
    0x061C,  # Arabic letter mark
    0x115F,
    0x1160,
    0x3164,
    0xFFA0,  # Hangul fillers
    0x180E,  # Mongolian vowel separator
    0xFEFF,  # byte-order mark
    *range(0xE0000, 0xE0080),  # tag characters ("ASCII smuggling")
}
# Kept in `clean` (emoji sequences, Persian and Indic spelling) but not in `scan`.
_JOINERS = {0x200C, 0x200D, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)}
_HIDDEN_TABLE = dict.fromkeys(_HIDDEN)
_SPACES = re.compile(r"[^\S\n\r\t]")
# A decimal digit of any script but ASCII: a card number written "٤١١١ ..." is still a card number.
_OTHER_DIGIT = re.compile(r"(?![0-9])\d")

# Cyrillic and Greek letters drawn like Latin ones (lower case; the text is lowered first).
_HOMOGLYPHS = str.maketrans(
    {
        "а": "a", "в": "b", "с": "c", "ԁ": "d", "е": "e", "ё": "e", "һ": "h", "і": "i", "ї": "i",
        "ј": "j", "к": "k", "ӏ": "l", "м": "m", "н": "h", "о": "o", "р": "p", "ԛ": "q",
        "ѕ": "s", "т": "t", "ѵ": "v", "ԝ": "w", "х": "x", "у": "y", "ь": "b",
        "α": "a", "β": "b", "ϲ": "c", "δ": "d", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v",
        "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "γ": "y", "ω": "w", "μ": "u", "ς": "c",
        "ɡ": "g", "ı": "i", "ȷ": "j", "ℓ": "l",
    }
)  # fmt: skip
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"})
# A run of word characters, "@" and "$" with a letter and a digit, "@" or "$" in it, from its first
# word character on (the "@" or "$" before that are `lead`). Tried only where a run starts: from
# every word boundary inside one (as with a plain \b), each look ahead would read the rest of the run
# again, a search as slow as the square of the run's length ("_@" 4,000 times: 0.6 s).
_MIXED_WORD = re.compile(r"(?<![\w@$])(?P<lead>[@$]*)\b(?=[\w@$]*[a-z])(?=[\w@$]*[0-9@$])(?P<word>[\w@$]+)")
# What `_MIXED_WORD` needs somewhere in the text: without one of these it matches nowhere.
_LEET_HINT = re.compile(r"[0-9@$]")
# Three or more single letters, each followed by one separator: "i g n o r e", "i.g.n.o.r.e".
_SPACED = re.compile(r"(?<![^\W_])(?:[^\W\d_][ .\-_*·]){2,}[^\W\d_](?![^\W_])")
_SEPARATORS = re.compile(r"[ .\-_*·]")


@dataclass(frozen=True, slots=True)
class ScanText:
    """A text prepared for the detectors; see the module docstring for the three views."""

    original: str
    clean: str
    scan: str
    # For each character of `scan`, its index in `clean`; None when the two are the same text.
    _origin: tuple[int, ...] | None = None

    def to_clean(self, start: int, end: int) -> tuple[int, int]:
        """The span in `clean` of the span [start, end) of `scan`."""
        if self._origin is None or start >= end:
            return start, end
        return self._origin[start], self._origin[end - 1] + 1


def normalise(text: str) -> ScanText:
    if text.isascii():
        # Most messages: only control characters and NBSP-like spaces can hide anything, and in
        # ASCII those are tabs and the like, kept as they are.
        return ScanText(text, text, text)
    clean = unicodedata.normalize("NFKC", text).translate(_HIDDEN_TABLE)
    clean = _SPACES.sub(" ", clean)
    # One character for one: the spans of `scan` stay those of `clean` but for the joiners.
    scan = _OTHER_DIGIT.sub(lambda match: str(unicodedata.decimal(match[0])), clean)
    if not any(ord(char) in _JOINERS for char in scan):
        return ScanText(text, clean, scan)
    kept = [index for index, char in enumerate(scan) if ord(char) not in _JOINERS]
    return ScanText(text, clean, "".join(scan[index] for index in kept), tuple(kept))


_HEX_ID = re.compile(r"[0-9a-f]{12,}")


def _unleet(match: re.Match[str]) -> str:
    lead, word = match["lead"], match["word"]
    # An id or a hash (mostly digits, or long hexadecimal) is not a word written in leetspeak.
    if sum(char.isdigit() for char in word) > sum(char.isalpha() for char in word) or _HEX_ID.fullmatch(word):
        return match[0]
    return lead + word.translate(_LEET)


def skeleton(text: str) -> str:
    """The folded view the injection detectors read (see the module docstring)."""
    folded = text.lower()
    if not folded.isascii():
        folded = unicodedata.normalize("NFD", folded)
        folded = "".join(char for char in folded if not unicodedata.combining(char))
        folded = folded.translate(_HOMOGLYPHS)
    if _LEET_HINT.search(folded):
        folded = _MIXED_WORD.sub(_unleet, folded)
    return _SPACED.sub(lambda match: _SEPARATORS.sub("", match[0]), folded)
