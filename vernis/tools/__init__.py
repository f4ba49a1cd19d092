"""The tool framework (SPEC §5, §14): declaring tools, toolkits, and running calls in one place.

What a toolkit author needs is importable from here:

    from vernis.tools import Entity, PagePattern, QuickAction, Toolkit, ToolContext, ToolFailure
"""

from vernis.tools.base import (
    CONFIRMED,
    JsonSchemaArgs,
    Tool,
    ToolContext,
    ToolFailure,
    error_envelope,
    json_schema_args,
    tool,
)
from vernis.tools.toolkit import (
    ENTRY_POINT_GROUP,
    Demo,
    Entity,
    EntityResolver,
    PagePattern,
    QuickAction,
    Toolkit,
    ToolkitEnv,
    ToolkitError,
    available_toolkits,
    load_toolkits,
)

__all__ = [
    "CONFIRMED",
    "ENTRY_POINT_GROUP",
    "Demo",
    "Entity",
    "EntityResolver",
    "JsonSchemaArgs",
    "PagePattern",
    "QuickAction",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "Toolkit",
    "ToolkitEnv",
    "ToolkitError",
    "available_toolkits",
    "error_envelope",
    "json_schema_args",
    "load_toolkits",
    "tool",
]
