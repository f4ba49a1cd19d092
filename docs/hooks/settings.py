"""MkDocs hook: the settings table, generated from `vernis.settings.Settings`.

`<!-- settings:table -->` in a page becomes one row per field of `Settings`: the environment variable
that sets it, its default, and what it means (the field's description, or its entry in `MEANINGS`
here while it has none). A field with neither, or an entry naming no field, is a warning, and
`mkdocs build --strict` fails on it: a new setting cannot ship undocumented.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import annotated_types
from pydantic.fields import FieldInfo

from vernis.settings import RateLimit, Settings

log = logging.getLogger("mkdocs.hooks.settings")

PLACEHOLDER = "<!-- settings:table -->"

# What each setting means, for the fields of `Settings` that have no description.
MEANINGS = {
    "database_url": "The database: a SQLite file, or `postgresql+asyncpg://user@host/db`.",
    "redis_url": "Redis, for several instances (events and replay, answer leases, limits, revocations; "
    "see [Several instances](instances.md)). Needed for `--workers` above 1.",
    "redis_prefix": "The prefix of every Redis key and channel of this deployment.",
    "database_pool_size": "PostgreSQL connections per process: a fixed pool, none opened beyond it.",
    "database_statement_timeout": "Seconds a PostgreSQL statement may run.",
    "jwt_secret": "HS256 secret of the host's tokens (at least 32 bytes). In demo mode, when no way to "
    "verify tokens is set, one is generated once per data directory (`.vernis/jwt-secret`).",
    "jwt_public_key": "The host's public key (RS256, ES256 or EdDSA): the PEM text, or the path of a "
    "PEM file.",
    "jwks_url": "The host's JWKS endpoint: keys picked by `kid`, fetched again for an unknown `kid` "
    "(at most every 10 s).",
    "jwt_issuer": "When set, a token's `iss` must be this.",
    "jwt_audience": "When set, a token's `aud` must hold this.",
    "jwt_org_claim": "The name of the claim that holds the tenant's id.",
    "demo": "`1`: demo mode, as `--demo`.",
    "config": "The configuration file; unset: `./vernis.toml` when present.",
    "toolkits": "Comma-separated toolkit names, added to the configuration's (they get no options).",
    "allowed_origins": "Comma-separated origins that may open the socket from a browser; unset: the "
    "server's own origin.",
    "llm_base_url": "The OpenAI-compatible endpoint. Unset: OpenAI when `OPENAI_API_KEY` is set, else a "
    "local Ollama (`http://127.0.0.1:11434/v1`).",
    "llm_api_key": "The endpoint's key.",
    "llm_model": "The chat model. Unset: `gpt-4o-mini` on OpenAI, else `llama3.1`.",
    "title_model": "The model that writes conversation titles; unset: the chat model.",
    "llm_stall_timeout": "Seconds without a chunk: retried before the answer begins, the answer failed "
    "after.",
    "llm_connect_timeout": "Seconds to connect to the endpoint.",
    "llm_max_retries": "Retries of a failed request before the first token.",
    "llm_max_tokens": "The most tokens the model may write per request; unset: the endpoint's own limit.",
    "openai_api_key": "OpenAI's key: with no `VERNIS_LLM_BASE_URL`, selects OpenAI.",
    "rate_limit": "User messages / seconds, per socket.",
    "member_rate_limit": "User messages / seconds, per member across all their sockets (and instances).",
    "flood_limit": "Frames / seconds of any kind before the socket is closed (1008).",
    "window_messages": "Messages in the model's context window; a full window drops the older ones at "
    "once, down to `VERNIS_CONTEXT_KEEP_RECENT`.",
    "rollover_messages": "Stored messages that roll a conversation over into a new one.",
    "max_tool_rounds": "Tool rounds before the final round without tools.",
    "approval_ttl": "Seconds a write's preview can be approved.",
    "max_frame_bytes": "The largest frame accepted (larger: close 1009).",
    "max_sockets_per_member": "Sockets one member may hold open.",
    "ping_interval": "Seconds between keepalive pings.",
    "ping_timeout": "Seconds to wait for a pong (none: close 4408).",
    "shutdown_grace": "On shutdown, seconds running answers may take to finish.",
    "auth_check_interval": "Seconds between an open socket's checks that its member still exists and "
    "is not revoked.",
    "log_level": "The log level.",
    "metrics_token": "The bearer token `/metrics` asks for; unset: none.",
    "admin_token": "The bearer token of the admin API; unset: the API is off (404).",
    "member_daily_tokens": "Tokens a member may use per UTC day; unset or 0: no quota "
    "(`[quotas]` in `vernis.toml` sets it per role and organization).",
    "org_monthly_tokens": "Tokens an organization may use per UTC month; unset or 0: no quota.",
    "log_format": "`json`: one JSON object a line on stderr; `text`: for humans.",
}


def env_name(name: str, info: FieldInfo) -> str:
    """The environment variable that sets a field."""
    if isinstance(info.validation_alias, str):
        return info.validation_alias
    return f"{Settings.model_config.get('env_prefix', '')}{name}".upper()


def settings_table() -> str:
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for name, info in Settings.model_fields.items():
        meaning = info.description or MEANINGS.get(name)
        if meaning is None:
            log.warning(
                "setting %s has no description and no entry in MEANINGS (docs/hooks/settings.py)", name
            )
            meaning = ""
        limits = ", ".join(_limits(info.metadata))
        if limits:
            meaning = f"{meaning} {limits[0].upper()}{limits[1:]}."
        rows.append(f"| `{env_name(name, info)}` | {_default(info)} | {meaning} |")
    for name in sorted(MEANINGS.keys() - Settings.model_fields.keys()):
        log.warning("docs/hooks/settings.py describes %r, which is not a field of Settings", name)
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if PLACEHOLDER in markdown:
        markdown = markdown.replace(PLACEHOLDER, settings_table())
    return markdown


def _default(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if value is None or value == []:
        return "unset"
    if isinstance(value, bool):
        return "`1`" if value else "off"
    if isinstance(value, RateLimit):
        return f"`{value.count}/{value.seconds:g}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def _limits(metadata: list[Any]) -> Iterator[str]:
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            yield f"at least {item.ge}"
        elif isinstance(item, annotated_types.Gt):
            yield f"more than {item.gt}"
        elif isinstance(item, annotated_types.Le):
            yield f"at most {item.le}"
