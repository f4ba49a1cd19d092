"""What a guard finds and what it does about it: categories, severities, actions, findings.

A `Finding` names its category, how severe it is, which detector (`signal`) saw it and where in the
scanned text; it never holds the matched text itself, so a finding can be logged, audited and
counted without repeating the secret it is about.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "PII_CATEGORIES",
    "Action",
    "Category",
    "Finding",
    "Location",
    "Severity",
]


class Category(enum.StrEnum):
    CARD = "card"
    IBAN = "iban"
    NATIONAL_ID = "national_id"
    EMAIL = "email"
    PHONE = "phone"
    CREDENTIAL = "credential"
    JWT = "jwt"
    INJECTION = "injection"

    @property
    def marker(self) -> str:
        """What replaces a redacted span: `[CARD_REDACTED]`."""
        return f"[{self.value.upper()}_REDACTED]"


PII_CATEGORIES = tuple(category for category in Category if category is not Category.INJECTION)


class Severity(enum.IntEnum):
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @property
    def label(self) -> str:
        return self.name.lower()


class Action(enum.IntEnum):
    """Ordered: the strongest action of a text's findings is the text's action."""

    ALLOW = 0
    WARN = 1
    REDACT = 2
    BLOCK = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, label: str) -> Action:
        return cls[label.upper()]


class Location(enum.StrEnum):
    """Where the scanned text came from."""

    USER_INPUT = "user_input"
    TOOL_ARGUMENTS = "tool_arguments"
    TOOL_RESULT = "tool_result"


@dataclass(frozen=True, slots=True)
class Finding:
    category: Category
    severity: Severity
    # The detector that fired, e.g. "luhn", "AWSKeyDetector", "override_phrase": never the match.
    signal: str
    # The span in the scanned text (`ScanText.text`); redaction replaces exactly this.
    start: int
    end: int
