"""The product's tools, one module per domain, each exporting `TOOLS`.

`default_registry()` collects them all. A new domain module is picked up by being here: nothing
else lists it. Tools are offered in the order of `CATEGORY_ORDER`, then by declaration.
"""

from __future__ import annotations

import importlib
import pkgutil

from vernis.services.registry import Tool, ToolRegistry

__all__ = ["CATEGORY_ORDER", "all_tools", "default_registry"]

CATEGORY_ORDER = (
    "Contacts",
    "Calls",
    "Messages",
    "Analytics",
    "Workflow",
    "Infrastructure",
    "Tasks",
    "Notifications",
)


def all_tools() -> list[Tool]:
    tools: list[Tool] = []
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        tools.extend(getattr(module, "TOOLS", ()))
    rank = {category: index for index, category in enumerate(CATEGORY_ORDER)}
    return sorted(tools, key=lambda tool: rank.get(tool.category, len(rank)))


def default_registry() -> ToolRegistry:
    return ToolRegistry(all_tools())
