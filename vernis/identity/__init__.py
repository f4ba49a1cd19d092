"""Who is asking (SPEC §2): the host's signed tokens, verified (`tokens`), where they come from
(`transport`), and the member they name, made just in time (`service`, `members`)."""

from vernis.identity.members import ASSISTANT_ADMIN, ASSISTANT_USE, Identity, MemberInfo, RoleTable
from vernis.identity.tokens import DEFAULT_TTL, ConfigError, HostClaims, TokenVerifier, issue_token
from vernis.identity.transport import COOKIE_NAME, extract_token

__all__ = [
    "ASSISTANT_ADMIN",
    "ASSISTANT_USE",
    "COOKIE_NAME",
    "DEFAULT_TTL",
    "ConfigError",
    "HostClaims",
    "Identity",
    "MemberInfo",
    "RoleTable",
    "TokenVerifier",
    "extract_token",
    "issue_token",
]
