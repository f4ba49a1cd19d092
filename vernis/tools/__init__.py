"""The product's tools, one module per domain; `default_registry()` collects them all."""

from __future__ import annotations

from vernis.services.registry import ToolRegistry
from vernis.tools import notifications

__all__ = ["default_registry"]


def default_registry() -> ToolRegistry:
    return ToolRegistry([*notifications.TOOLS])
