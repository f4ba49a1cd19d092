"""The CRM's permissions and its default role grants (SPEC §5).

Permissions are `resource:action` strings. `owner` and `admin` hold all of them; `member` holds every
read plus the contact, message, task, plan and notification writes; `viewer` holds the reads only.
`message:review` (owners and admins) reviews the SMS members send in demo mode (SPEC §23).
The core adds `assistant:use` for every role (and the AI-rules permission for owners and admins).
"""

from __future__ import annotations

import enum

__all__ = [
    "ADMIN_WRITES",
    "ALL_PERMISSIONS",
    "MEMBER_WRITES",
    "PERMISSIONS",
    "READS",
    "REVIEWS",
    "ROLE_GRANTS",
    "Role",
]


class Role(enum.StrEnum):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"


READS = frozenset(
    {
        "contact:list",
        "contact:view",
        "call:list",
        "call:view",
        "message:list",
        "dashboard:view",
        "plan_template:list",
        "phone:list",
        "agent:list",
        "analyzer:list",
        "task:list",
        "notification:list",
    }
)
MEMBER_WRITES = frozenset(
    {
        "contact:create",
        "contact:update",
        "message:create",
        "task:create",
        "task:update",
        "plan:create",
        "notification:update",
    }
)
ADMIN_WRITES = frozenset(
    {
        "plan_template:create",
        "plan_template:update",
        "phone:update",
        "agent:create",
        "agent:update",
        "analyzer:create",
        "analyzer:update",
    }
)
# Reviewing a write another member approved (SPEC §23): demo mode sends `send_sms` to review.
REVIEWS = frozenset({"message:review"})
ALL_PERMISSIONS = READS | MEMBER_WRITES | ADMIN_WRITES | REVIEWS

PERMISSIONS = {
    permission: permission.replace(":", " ").replace("_", " ") for permission in sorted(ALL_PERMISSIONS)
}

ROLE_GRANTS: dict[str, frozenset[str]] = {
    Role.OWNER: ALL_PERMISSIONS,
    Role.ADMIN: ALL_PERMISSIONS,
    Role.MEMBER: READS | MEMBER_WRITES,
    Role.VIEWER: READS,
}
