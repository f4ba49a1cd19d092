"""Personal data and secrets, found with the checks the libraries that specialise in them provide.

Each detector finds candidates with a cheap pattern, then lets a well-kept library decide:
`python-stdnum` (Luhn for cards, ISO 13616 for IBANs, each country's own check for national ids),
`phonenumbers` (numbering plans of every country), `detect-secrets` (the patterns of its plugins for
cloud keys, tokens and private keys; its JWT check that the header and claims decode), with the few
key shapes it has no plugin for written here (Anthropic, Google, Hugging Face, npm, HTTP Basic). A number
without a check digit of its own (a bare nine- or eleven-digit national id) counts only next to a
word that names it, so order numbers, dates and amounts in a CRM are not mistaken for one.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import phonenumbers
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from stdnum import iban, luhn
from stdnum.br import cpf
from stdnum.de import idnr
from stdnum.es import dni, nie
from stdnum.fr import nir
from stdnum.it import codicefiscale
from stdnum.nl import bsn
from stdnum.pl import pesel
from stdnum.se import personnummer
from stdnum.us import ssn

from vernis.guards.findings import Category, Finding, Severity
from vernis.guards.prefilter import Prefilter, digit_count

__all__ = ["detect_pii"]

SEVERITY = {
    Category.CARD: Severity.HIGH,
    Category.IBAN: Severity.HIGH,
    Category.NATIONAL_ID: Severity.HIGH,
    Category.EMAIL: Severity.LOW,
    Category.PHONE: Severity.LOW,
    Category.CREDENTIAL: Severity.CRITICAL,
    Category.JWT: Severity.CRITICAL,
}

# --- cards ---------------------------------------------------------------------------------------

# Between the groups of a card number: spaces or a line break (a few), or one of the marks people
# type between groups (dashes of every width with a space around them or not, dot, slash,
# underscore, comma). One number keeps one kind of separator; `_card_grouping` checks it.
_CARD_SEPARATOR = r"(?:\s{1,3}|\s?[-\u2010-\u2015\u2212]\s?|[./_,])"
# Not after "+": an international phone number (E.164) is often Luhn-valid by chance. Not ending
# before ".5", ",5" or "/5": the number goes on (a decimal, an amount, a date).
_CARD = re.compile(rf"(?<![\w.+-])\d(?:{_CARD_SEPARATOR}?\d){{12,18}}(?![\w-]|[.,/]\d)")
# Issuer prefixes of the card networks (Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay,
# Maestro): a Luhn-valid number outside them is some other number.
_CARD_PREFIX = re.compile(
    r"4|5[1-5]|2(?:2[2-9]|[3-6]|7[01]|720)|3[47]|3[05689]|6(?:011|5|4[4-9]|2)|5[06-9]|6"
)
_CARD_GAP = re.compile(r"\D+")


# The start of an IBAN ("DE89 "): the digits after it are an account, not a card.
_IBAN_START = re.compile(r"[A-Za-z]{2}\d{2}[ ]?$")


def _card_grouping(candidate: str) -> bool:
    """Written as cards are: in one run, one digit at a time, in fours (the last group shorter),
    Amex's 4-6-5, or in threes (the last group of one to four); with one kind of separator. Threes
    with thousands separators ("411,111,111,111,111") are an amount."""
    separators = {gap.strip() or " " for gap in _CARD_GAP.findall(candidate)}
    if len(separators) > 1:
        return False
    groups = [len(group) for group in _CARD_GAP.split(candidate)]
    if len(groups) == 1 or set(groups) == {1}:
        return True
    if (groups[:2] == [4, 6] and len(groups) == 3) or (set(groups[:-1]) == {4} and 1 <= groups[-1] <= 4):
        return True
    return set(groups[:-1]) == {3} and 1 <= groups[-1] <= 4 and not separators <= {",", "."}


_CARD_FILTER = Prefilter([_CARD])


def _cards(text: str) -> Iterator[tuple[int, int, str]]:
    if not _CARD_FILTER.candidates(text):  # no digit in it
        return
    for match in _CARD.finditer(text):
        digits = _CARD_GAP.sub("", match[0])
        if not (13 <= len(digits) <= 19 and _CARD_PREFIX.match(digits) and luhn.is_valid(digits)):
            continue
        if _card_grouping(match[0]) and not _IBAN_START.search(
            text[max(0, match.start() - 5) : match.start()]
        ):
            yield match.start(), match.end(), "luhn"


# --- IBAN ----------------------------------------------------------------------------------------

_IBAN = re.compile(r"(?<![\w])[A-Za-z]{2}\d{2}(?:[ ]?[A-Za-z0-9]){11,30}(?![\w])")
_IBAN_FILTER = Prefilter([_IBAN])


def _ibans(text: str) -> Iterator[tuple[int, int, str]]:
    if not _IBAN_FILTER.candidates(text):  # no two digits in a row
        return
    for match in _IBAN.finditer(text):
        candidate = match[0]
        # The pattern may run into the next word ("... 3000 please"): shorten until it checks.
        while len(candidate) >= 15:
            if iban.is_valid(candidate):
                yield match.start(), match.start() + len(candidate), "iban"
                break
            cut = candidate.rfind(" ")
            if cut < 0:
                break
            candidate = candidate[:cut]


# --- national ids --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _NationalId:
    name: str
    module: ModuleType
    pattern: re.Pattern[str]
    # Words one of which must stand within `_CONTEXT_CHARS` before the number (lower case); empty:
    # the number's own shape and check are distinctive enough.
    context: tuple[str, ...] = ()


_CONTEXT_CHARS = 48
_GENERIC = ("national id", "id number", "identity number", "id no", "social security", "tax id")
_NATIONAL_IDS = (
    _NationalId("us.ssn", ssn, re.compile(r"(?<![\w-])\d{3}-\d{2}-\d{4}(?![\w-])")),
    _NationalId("us.ssn", ssn, re.compile(r"(?<![\w-])\d{9}(?![\w-])"), ("ssn", *_GENERIC)),
    _NationalId("es.dni", dni, re.compile(r"(?<![\w-])\d{8}-?[A-Za-z](?![\w-])")),
    _NationalId("es.nie", nie, re.compile(r"(?<![\w-])[XYZxyz]-?\d{7}-?[A-Za-z](?![\w-])")),
    _NationalId(
        "it.codicefiscale",
        codicefiscale,
        re.compile(r"(?<![\w-])[A-Za-z]{6}\d{2}[A-Za-z]\d{2}[A-Za-z]\d{3}[A-Za-z](?![\w-])"),
    ),
    _NationalId("br.cpf", cpf, re.compile(r"(?<![\w-])\d{3}\.\d{3}\.\d{3}-\d{2}(?![\w-])")),
    _NationalId(
        "fr.nir",
        nir,
        re.compile(r"(?<![\w-])[12] ?\d{2} ?\d{2} ?(?:\d{2}|2[ABab]) ?\d{3} ?\d{3} ?\d{2}(?![\w-])"),
        ("nir", "sécurité sociale", "securite sociale", "sécu", "insee", *_GENERIC),
    ),
    _NationalId("nl.bsn", bsn, re.compile(r"(?<![\w-])\d{9}(?![\w-])"), ("bsn", "burgerservice", *_GENERIC)),
    _NationalId(
        "de.idnr",
        idnr,
        re.compile(r"(?<![\w-])\d{2} ?\d{3} ?\d{3} ?\d{3}(?![\w-])"),
        ("steuer", "idnr", "identifikationsnummer", *_GENERIC),
    ),
    _NationalId("pl.pesel", pesel, re.compile(r"(?<![\w-])\d{11}(?![\w-])"), ("pesel", *_GENERIC)),
    _NationalId(
        "se.personnummer",
        personnummer,
        re.compile(r"(?<![\w-])(?:\d{2})?\d{6}[-+]?\d{4}(?![\w-])"),
        ("personnummer", *_GENERIC),
    ),
)

# Each needs three digits in a row or more (`vernis.guards.prefilter`): a short number runs none.
_NATIONAL_FILTER = Prefilter([kind.pattern for kind in _NATIONAL_IDS])


def _national_ids(text: str) -> Iterator[tuple[int, int, str]]:
    lowered: str | None = None
    for index in _NATIONAL_FILTER.candidates(text):
        kind = _NATIONAL_IDS[index]
        for match in kind.pattern.finditer(text):
            if kind.context:
                if lowered is None:
                    lowered = text.lower()
                before = lowered[max(0, match.start() - _CONTEXT_CHARS) : match.start()]
                if not any(word in before for word in kind.context):
                    continue
            if kind.module.is_valid(match[0]):
                yield match.start(), match.end(), kind.name


# --- e-mail --------------------------------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![\w.+:/-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![\w.-]*\w)"
)


# Spelt out to get past filters: "jane (at) example (dot) com", "jane [at] example [dot] com".
_SPELT_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}\s*[(\[{]\s*at\s*[)\]}]\s*"
    r"[A-Za-z0-9-]{1,63}(?:\s*[(\[{]\s*dot\s*[)\]}]\s*[A-Za-z0-9-]{1,63})+",
    re.IGNORECASE,
)
# The part of `_SPELT_EMAIL` every match holds ("(at)", "[ at ]"): most texts say "at" in words only.
_SPELT_AT = re.compile(r"[(\[{]\s*at\s*[)\]}]", re.IGNORECASE)


def _emails(text: str) -> Iterator[tuple[int, int, str]]:
    if "@" in text:
        for match in _EMAIL.finditer(text):
            yield match.start(), match.end(), "address"
    if _SPELT_AT.search(text):
        for match in _SPELT_EMAIL.finditer(text):
            yield match.start(), match.end(), "spelt_address"


# --- phone numbers -------------------------------------------------------------------------------

# A number right after one of these is an order, invoice or ticket number, not a phone.
_NOT_A_PHONE = re.compile(
    r"(?:order|invoice|inv|ref|reference|ticket|case|id|no|nr|number|account|acct|po|sku|#)[\s.:#-]*$",
    re.IGNORECASE,
)


def _phones(text: str, region: str | None) -> Iterator[tuple[int, int, str]]:
    if digit_count(text) < 7:
        return
    for match in phonenumbers.PhoneNumberMatcher(text, region, leniency=phonenumbers.Leniency.VALID):
        before = text[max(0, match.start - 24) : match.start]
        # Part of a longer token ("ORD-2024-001234") or labelled as another kind of number.
        if before[-1:].isalnum() or re.search(r"\w[-/]$", before) or _NOT_A_PHONE.search(before):
            continue
        yield match.start, match.end, "phonenumbers"


# --- credentials ---------------------------------------------------------------------------------

# detect-secrets' plugins whose patterns name a kind of secret. Left out: the entropy detectors
# (every UUID and hash in a CRM record would be a "secret"), the public-IP detector (not a secret),
# the keyword detector (made for source files: `password = "..."`); JWTs are their own category.
_LEFT_OUT = {
    "Base64HighEntropyString",
    "HexHighEntropyString",
    "IPPublicDetector",
    "KeywordDetector",
    "JwtTokenDetector",
}


# detect-secrets' patterns replaced by ones that match the same secrets in time linear in the text.
# Its npm pattern (`//.+/:_authToken=...`) tries every `//` of a text to the end of its line and back:
# 8,000 slashes took 0.2 s, and a search holds the GIL to its end, whichever thread runs it. Here the
# registry's address is `//`, then parts without a slash or a space, one slash between them.
_REPLACED = {
    "NpmDetector": (re.compile(r"//[^\s/]+(?:/[^\s/]+)*/:_authToken=\s*((npm_\S+)|([A-Fa-f0-9-]{36})).*"),),
}


def _secret_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    patterns: list[tuple[str, re.Pattern[str]]] = []
    plugins: dict[str, Any] = get_mapping_from_secret_type_to_class()
    for plugin in plugins.values():
        if plugin.__name__ in _LEFT_OUT:
            continue
        detector: Any = plugin()
        if isinstance(detector, RegexBasedDetector):
            denylist = _REPLACED.get(plugin.__name__, detector.denylist)
            patterns.extend((plugin.__name__, pattern) for pattern in denylist)
    return tuple(patterns)


# Keys detect-secrets (1.5) has no plugin for, in the shapes their issuers document: Anthropic
# (`sk-ant-api03-...`), Google API keys (`AIza` and 35 characters), Hugging Face access tokens
# (`hf_` and 34 or more), npm access tokens (`npm_` and 36).
_KEY_PATTERNS = (
    ("AnthropicKey", re.compile(r"(?<![\w-])sk-ant-[A-Za-z0-9_-]{32,}")),
    ("GoogleApiKey", re.compile(r"(?<![\w-])AIza[0-9A-Za-z_-]{35}(?![\w-])")),
    ("HuggingFaceToken", re.compile(r"(?<![\w-])hf_[A-Za-z0-9]{34,}(?![\w-])")),
    ("NpmToken", re.compile(r"(?<![\w-])npm_[A-Za-z0-9]{36}(?![\w-])")),
)
_SECRET_PATTERNS = _secret_patterns() + _KEY_PATTERNS
# Most texts hold none of what these need (a prefix, a keyword): only those that may match are run.
_SECRET_FILTER = Prefilter([pattern for _, pattern in _SECRET_PATTERNS])
# An HTTP Basic credential (RFC 7617: base64 of "user:password"); it must decode to a pair, so
# "Authorization: Basic authentication is off" is prose.
_BASIC_AUTH = re.compile(
    r"authorization[\"']?\s*[:=]\s*[\"']?basic\s+(?P<value>[A-Za-z0-9+/]{6,}={0,2})(?![\w+/=])",
    re.IGNORECASE,
)
# Said in words rather than pasted from a file: "my password is ...", in a few languages. The value
# must look like a password (a digit or a sign in it), so "the password is reset" is not one.
_PASSWORD = re.compile(
    r"(?:password|passwd|passcode|pwd|pin code|mot de passe|passwort|kennwort|contraseña|contrasena|"
    r"senha|wachtwoord|пароль)\s*(?:is|was|:|=|est|ist|es|é|is now|ist jetzt)\s*[\"'“]?"
    r"(?P<value>(?=\S*\d|\S*[^\w\s]\S)\S{6,128})",
    re.IGNORECASE,
)

_WORDED_FILTER = Prefilter([_BASIC_AUTH, _PASSWORD])


def _credentials(text: str) -> Iterator[tuple[int, int, str]]:
    for index in _SECRET_FILTER.candidates(text):
        name, pattern = _SECRET_PATTERNS[index]
        for match in pattern.finditer(text):
            if match.end() > match.start():
                yield match.start(), match.end(), name
    worded = _WORDED_FILTER.candidates(text)
    for match in _BASIC_AUTH.finditer(text) if 0 in worded else ():
        if _is_user_password(match["value"]):
            yield match.start("value"), match.end("value"), "basic_auth"
    for match in _PASSWORD.finditer(text) if 1 in worded else ():
        value = match["value"].rstrip(".,;!?\"'”)")
        if len(value) >= 6:
            yield match.start("value"), match.start("value") + len(value), "password_phrase"


def _is_user_password(value: str) -> bool:
    try:
        decoded = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    return ":" in decoded and decoded.isprintable()


_JWT_DETECTOR = JwtTokenDetector()
_JWT = re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")


def _jwts(text: str) -> Iterator[tuple[int, int, str]]:
    if "eyJ" not in text:
        return
    for match in _JWT.finditer(text):
        if _JWT_DETECTOR.is_formally_valid(match[0]):
            yield match.start(), match.end(), "jwt"


_Detector = Callable[[str], Iterable[tuple[int, int, str]]]


def detect_pii(text: str, categories: Iterable[Category], region: str | None = None) -> list[Finding]:
    """The findings of the given categories in `text` (the `scan` view); overlapping ones of the
    same category are kept once."""
    detectors: dict[Category, _Detector] = {
        Category.CARD: _cards,
        Category.IBAN: _ibans,
        Category.NATIONAL_ID: _national_ids,
        Category.EMAIL: _emails,
        Category.PHONE: lambda value: _phones(value, region),
        Category.CREDENTIAL: _credentials,
        Category.JWT: _jwts,
    }
    findings: list[Finding] = []
    for category in categories:
        detector = detectors.get(category)
        if detector is None:
            continue
        taken: list[tuple[int, int]] = []
        for start, end, signal in detector(text):
            if any(start < other_end and other_start < end for other_start, other_end in taken):
                continue
            taken.append((start, end))
            findings.append(Finding(category, SEVERITY[category], signal, start, end))
    return findings
