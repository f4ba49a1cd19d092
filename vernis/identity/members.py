"""Who is asking: the member a verified token names, and what they may do (SPEC §2, §14).

`MemberInfo` is the member as Vernis keeps them: its own internal ids (never shown outside Vernis)
beside the host's ids (`sub`, `org`). `Identity` is one authenticated use of a token: the member,
the permissions this token grants them, the verified claims and the token itself (a tool may call
the host's API with it, as that user).

`RoleTable` turns a role into permissions when a token carries no `permissions` claim: the core's
own defaults, then every toolkit's default grants, then the configuration's `[roles.*]`, which
replace a role's set whole. An unknown role holds none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from uuid import UUID

__all__ = [
    "ASSISTANT_ADMIN",
    "ASSISTANT_USE",
    "CORE_ROLE_GRANTS",
    "MANAGE_AI_RULES",
    "Identity",
    "MemberInfo",
    "RoleTable",
]

ASSISTANT_USE = "assistant:use"
ASSISTANT_ADMIN = "assistant:admin"
MANAGE_AI_RULES = "organization:manage_ai_rules"

# The roles every deployment understands before any toolkit or configuration adds to them.
CORE_ROLE_GRANTS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "owner": frozenset({ASSISTANT_USE, ASSISTANT_ADMIN, MANAGE_AI_RULES}),
        "admin": frozenset({ASSISTANT_USE, ASSISTANT_ADMIN, MANAGE_AI_RULES}),
        "member": frozenset({ASSISTANT_USE}),
        "viewer": frozenset({ASSISTANT_USE}),
    }
)


@dataclass(frozen=True, slots=True)
class MemberInfo:
    id: UUID
    organization_id: UUID
    # The host's ids: the token's `sub` and its organization claim.
    external_id: str
    organization_external_id: str
    organization_name: str
    organization_timezone: str
    email: str | None
    name: str
    role: str
    removed: bool
    # Taken away from this member whatever their token says (e.g. "assistant:use").
    revoked_permissions: tuple[str, ...] = ()
    # The admin API's revocation (epoch seconds): tokens issued at or before it are refused.
    tokens_revoked_at: float | None = None

    @property
    def sub(self) -> str:
        return self.external_id

    @property
    def org(self) -> str:
        return self.organization_external_id


@dataclass(frozen=True, slots=True)
class Identity:
    """A verified token and the member it names."""

    member: MemberInfo
    permissions: frozenset[str]
    expires_at: float
    token: str = field(repr=False)
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # The token's `iat` (epoch seconds); None when it has none.
    issued_at: float | None = None

    def revoked_by(self, revoked_at: float) -> bool:
        """Whether a revocation at `revoked_at` covers this token: issued at or before it (in
        whole seconds, as `iat` is), or of unknown age."""
        return self.issued_at is None or self.issued_at <= revoked_at


class RoleTable:
    """Role name -> permissions, for tokens without a `permissions` claim."""

    def __init__(
        self,
        grants: Iterable[Mapping[str, Iterable[str]]] = (),
        configured: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        roles: dict[str, set[str]] = {role: set(perms) for role, perms in CORE_ROLE_GRANTS.items()}
        for toolkit_grants in grants:
            for role, permissions in toolkit_grants.items():
                roles.setdefault(role, {ASSISTANT_USE}).update(permissions)
        for role, permissions in (configured or {}).items():
            roles[role] = set(permissions)
        self._roles = {role: frozenset(permissions) for role, permissions in roles.items()}

    @property
    def roles(self) -> Mapping[str, frozenset[str]]:
        return MappingProxyType(self._roles)

    def permissions(
        self, role: str, claimed: Iterable[str] | None = None, revoked: Iterable[str] = ()
    ) -> frozenset[str]:
        """What a member may do: the token's own `permissions` when it has them, else the role's set;
        less what was revoked for this member."""
        granted = frozenset(claimed) if claimed is not None else self._roles.get(role, frozenset())
        # The role's own set, shared, when nothing is taken away (no copy per socket).
        return granted - frozenset(revoked) if revoked else granted
