"""Guards: personal data, secrets and prompt injection, checked before anything reaches the model.

`GuardService` is the one entry point (user messages, write-tool arguments, tool results);
`GuardPolicy` turns the `[guards]` configuration into each organization's actions and allow-list;
`scan_text` is one pure, synchronous scan (what the corpus command measures).
"""

from vernis.guards.findings import Action, Category, Finding, Location, Severity
from vernis.guards.policy import DEFAULT_ACTIONS, GuardPolicy, OrganizationPolicy
from vernis.guards.scan import Decided, ScanResult, scan_text
from vernis.guards.service import ArgumentsVerdict, GuardService, InputVerdict, ResultVerdict

__all__ = [
    "DEFAULT_ACTIONS",
    "Action",
    "ArgumentsVerdict",
    "Category",
    "Decided",
    "Finding",
    "GuardPolicy",
    "GuardService",
    "InputVerdict",
    "Location",
    "OrganizationPolicy",
    "ResultVerdict",
    "ScanResult",
    "Severity",
    "scan_text",
]
