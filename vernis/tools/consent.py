"""Whether a chat message approves the change the assistant just proposed (SPEC §5, §24).

A write confirmed in the chat runs only when the user's message is an approval: short, opening with
an affirmative ("yes", "go ahead", "ok, do it", "👍"), and with no negation or hesitation in it
("no", "don't", "wait", "cancel"). Anything else ("thanks", "what would it cost?", "no, leave it")
approves nothing: the card's buttons still can. The check is deliberately narrow: a false "no" only
costs the user a click, a false "yes" would write without consent.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["approves"]

# At most this many words: a longer message is a new request or a question, not a yes.
MAX_WORDS = 12

_AFFIRMATIVE = (
    "yes",
    "y",
    "yeah",
    "yep",
    "yup",
    "sure",
    "ok",
    "okay",
    "k",
    "go ahead",
    "go for it",
    "do it",
    "just do it",
    "please do",
    "proceed",
    "confirm",
    "confirmed",
    "i confirm",
    "approve",
    "approved",
    "i approve",
    "correct",
    "right",
    "sounds good",
    "looks good",
    "lgtm",
    "absolutely",
    "of course",
    "send it",
    "that's right",
    "that is right",
    "all good",
    "ja",
    "oui",
    "si",
    "sí",
    "да",
)
_NEGATIVE = frozenset(
    {
        "no",
        "nope",
        "nah",
        "not",
        "don't",
        "dont",
        "do not",
        "never",
        "stop",
        "wait",
        "hold",
        "cancel",
        "reject",
        "decline",
        "abort",
        "but",
        "instead",
        "nein",
        "non",
        "нет",
    }
)
_FILLER = ("please", "pls", "thanks", "thank you", "well", "alright", "great", "perfect", "fine")
_APPROVING_MARKS = ("👍", "✅", "👌")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def approves(text: str) -> bool:
    """`text` approves the proposed change (see the module's contract)."""
    normal = unicodedata.normalize("NFKC", text).strip().lower().replace("\u2019", "'")
    if not normal:
        return False
    words = _WORD.findall(normal)
    if not words:
        return any(mark in normal for mark in _APPROVING_MARKS)
    if len(words) > MAX_WORDS or "?" in normal:
        return False
    joined = " ".join(words)
    if any(f" {negative} " in f" {joined} " for negative in _NEGATIVE):
        return False
    while True:
        if any(joined == phrase or joined.startswith(phrase + " ") for phrase in _AFFIRMATIVE):
            return True
        filler = next((f for f in _FILLER if joined.startswith(f + " ")), None)
        if filler is None:
            return False
        joined = joined[len(filler) :].strip()
