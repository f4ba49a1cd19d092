"""The database layer. Importing any part of it registers every table on `SQLModel.metadata`
(the core tables of `models`, the CRM of `crm`), so the metadata is always complete."""

from vernis.db import crm, models

__all__ = ["crm", "models"]
