"""The tool framework (SPEC §5, §14): declaring tools, toolkits, and running calls in one place.

What a toolkit author needs is importable from here:

    from vernis.tools import Entity, PagePattern, QuickAction, Toolkit, ToolContext, ToolFailure
    from vernis.tools import Shown, entity, links, metrics, table  # UI blocks (SPEC §16)
    from vernis.tools import trace_headers  # an HTTP request's W3C traceparent (SPEC §22)
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
from vernis.tools.blocks import Shown, block, entity, links, metrics, table
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
from vernis.tracing.spans import trace_headers

__all__ = [
    "CONFIRMED",
    "ENTRY_POINT_GROUP",
    "Demo",
    "Entity",
    "EntityResolver",
    "JsonSchemaArgs",
    "PagePattern",
    "QuickAction",
    "Shown",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "Toolkit",
    "ToolkitEnv",
    "ToolkitError",
    "available_toolkits",
    "block",
    "entity",
    "error_envelope",
    "json_schema_args",
    "links",
    "load_toolkits",
    "metrics",
    "table",
    "tool",
    "trace_headers",
]
