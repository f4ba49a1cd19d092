"""What the CRM's tools and resolvers receive: the CRM keeps its tables in Vernis's own database, so its
resources are that database's engine."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.tools import ToolContext

__all__ = ["CrmContext"]

CrmContext = ToolContext[AsyncEngine]
