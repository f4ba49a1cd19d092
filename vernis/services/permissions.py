"""Roles and the permissions they hold (SPEC §5).

Permissions are `resource:action` strings. `owner` and `admin` hold all of them; `member` holds every
read plus the contact, message, task, plan and notification writes; `viewer` holds the reads only.
Every role may use the assistant (`assistant:use`); an organization can take that, or any other
permission, away from one member (`Member.revoked_permissions`).
"""

from __future__ import annotations

from collections.abc import Iterable

from vernis.db.models import Role

__all__ = ["ALL_PERMISSIONS", "ASSISTANT_USE", "permissions_for"]

ASSISTANT_USE = "assistant:use"

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
        "organization:manage_ai_rules",
    }
)
ALL_PERMISSIONS = READS | MEMBER_WRITES | ADMIN_WRITES | {ASSISTANT_USE}

_ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    Role.OWNER: ALL_PERMISSIONS,
    Role.ADMIN: ALL_PERMISSIONS,
    Role.MEMBER: READS | MEMBER_WRITES | {ASSISTANT_USE},
    Role.VIEWER: READS | {ASSISTANT_USE},
}


def permissions_for(role: str, revoked: Iterable[str] = ()) -> frozenset[str]:
    """The permissions of a member with `role`, less the ones revoked for them. Unknown role: none."""
    return _ROLE_PERMISSIONS.get(role, frozenset()) - frozenset(revoked)
