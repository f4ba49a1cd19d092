"""A member as the identity service makes one, for tests of tools and prompts that need no database."""

from __future__ import annotations

import uuid
from typing import Any

from vernis.identity import MemberInfo

__all__ = ["member"]


def member(**fields: Any) -> MemberInfo:
    """A current member of organization "acme" with role `member`; `fields` override any field."""
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "organization_id": uuid.uuid4(),
        "external_id": "m-1",
        "organization_external_id": "acme",
        "organization_name": "Acme",
        "organization_timezone": "UTC",
        "email": "m@acme.test",
        "name": "M",
        "role": "member",
        "removed": False,
    }
    return MemberInfo(**(values | fields))
