"""Settings: every knob of SPEC §12, read from the environment and a `.env` file.

`Settings()` never connects to anything; `load_settings()` additionally resolves the values that
depend on the environment as a whole (the OpenAI fallback, the development JWT secret).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["DEFAULT_LLM_BASE_URL", "RateLimit", "Settings", "load_settings"]

DEFAULT_LLM_BASE_URL = "http://127.0.0.1:11434/v1"
OPENAI_BASE_URL = "https://api.openai.com/v1"
# The shortest bearer token the operations routes accept (VERNIS_METRICS_TOKEN, VERNIS_ADMIN_TOKEN).
MIN_TOKEN_BYTES = 32


class RateLimit:
    """`N/SECONDS`: at most N events in any sliding window of SECONDS."""

    __slots__ = ("count", "seconds")

    def __init__(self, count: int, seconds: float) -> None:
        if count < 1 or seconds <= 0:
            raise ValueError("a rate limit needs a positive count and window")
        self.count = count
        self.seconds = seconds

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        try:
            count, seconds = text.split("/")
            return cls(int(count), float(seconds))
        except ValueError:
            raise ValueError(f"expected N/SECONDS such as 10/60, got {text!r}") from None

    def __repr__(self) -> str:
        return f"RateLimit({self.count}/{self.seconds:g})"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="VERNIS_",
        env_file=".env",
        extra="ignore",
        arbitrary_types_allowed=True,
        # Settings hold secrets: an error names the setting and what is wrong, never the value.
        hide_input_in_errors=True,
    )

    database_url: str = "sqlite+aiosqlite:///./vernis.db"
    redis_url: str | None = None
    # Prefix of every Redis key and channel: several deployments (or tests) can share one Redis.
    redis_prefix: str = "vernis:"
    # PostgreSQL: connections per process (as many again in overflow), and the longest a statement runs.
    database_pool_size: int = Field(10, ge=1)
    database_statement_timeout: float = Field(30.0, gt=0)
    jwt_secret: str | None = Field(default=None, repr=False)
    # PEM text of the host's public key (RS256, ES256 or EdDSA), or the path of a PEM file.
    jwt_public_key: str | None = Field(default=None, repr=False)
    jwks_url: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_org_claim: str = "org"
    signing_key: str | None = Field(
        default=None,
        repr=False,
        description="Vernis's own private key (Ed25519 or EC P-256, the PEM text or the path of a PEM "
        "file), which signs the short-lived tokens MCP servers with `forward_member_token` receive "
        "(their public keys at `GET /api/assistant/jwks`). Unset: one is made once per data "
        "directory (`.vernis/signing-key.pem`); instances that do not share a data directory must "
        "all set the same key.",
    )
    # Demo mode (SPEC §13): the CRM toolkit, its demo data, demo host pages and login.
    demo: bool = False
    # The host configuration file (SPEC §14); `./vernis.toml` when present and this is unset.
    config: Path | None = None
    # Comma-separated toolkit entry-point names, added to the configuration's.
    toolkits: Annotated[list[str], NoDecode] = Field(default_factory=list)
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)

    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_model: str | None = None
    title_model: str | None = None
    llm_stall_timeout: float = 30.0
    llm_connect_timeout: float = 10.0
    llm_max_retries: int = 2
    llm_max_tokens: int | None = None
    # Unprefixed, so that the usual OPENAI_API_KEY works from the environment and from `.env` alike.
    openai_api_key: str | None = Field(default=None, validation_alias="OPENAI_API_KEY", repr=False)

    rate_limit: Annotated[RateLimit, NoDecode] = Field(default_factory=lambda: RateLimit(10, 60))
    member_rate_limit: Annotated[RateLimit, NoDecode] = Field(default_factory=lambda: RateLimit(20, 60))
    flood_limit: Annotated[RateLimit, NoDecode] = Field(default_factory=lambda: RateLimit(60, 10))
    window_messages: int = Field(50, ge=2)
    context_budget_tokens: int = Field(
        24_000,
        ge=500,
        description="Tokens (o200k_base, or the provider's count) the conversation's history may take "
        "in a request; past them, as past VERNIS_WINDOW_MESSAGES, its older messages are summarised "
        "(SPEC §19).",
    )
    context_keep_recent: int = Field(
        10,
        ge=1,
        description="Messages a full context window keeps whole when it summarises (or, when that "
        "fails, drops) the older ones at once (SPEC §19).",
    )
    rollover_messages: int = Field(50, ge=2)
    store_reasoning: bool = Field(
        True,
        description="`0`: the reasoning a model streams is shown live but not stored with the answer "
        "(SPEC §19).",
    )
    max_tool_rounds: int = Field(8, ge=0)
    approval_ttl: float = 1800.0
    review_ttl: float = Field(
        7 * 24 * 3600.0,
        gt=0,
        description="Seconds a review request (SPEC §23) waits for a reviewer before it expires.",
    )
    # How long an approved write may run before it is ended as failed (`timeout`).
    tool_timeout: float = Field(
        30.0, gt=0, description="Seconds an approved write may run before it ends as a timeout."
    )
    client_tool_timeout: float = Field(
        30.0,
        gt=0,
        description="Seconds the host page has to answer a call of one of its own tools (SPEC §18) "
        "before the call ends as a `timeout` and the answer goes on.",
    )
    max_frame_bytes: int = Field(65536, ge=1024)
    max_sockets_per_member: int = Field(16, ge=1)
    ping_interval: float = 20.0
    ping_timeout: float = 20.0
    shutdown_grace: float = 10.0
    auth_check_interval: float = 30.0
    log_level: str = "INFO"
    # Operations (SPEC §15): a bearer token /metrics asks for when set; the admin API's, off when unset.
    metrics_token: str | None = Field(
        default=None,
        repr=False,
        description="The bearer token `/metrics` asks for, at least 32 bytes (a shorter one stops the "
        "start); unset: none.",
    )
    admin_token: str | None = Field(
        default=None,
        repr=False,
        description="The bearer token of the admin API, at least 32 bytes (a shorter one stops the "
        "start); unset: the API is off (404).",
    )
    # Token quotas (SPEC §15): per member per UTC day, per organization per UTC month; None: none.
    member_daily_tokens: int | None = Field(default=None, ge=0)
    org_monthly_tokens: int | None = Field(default=None, ge=0)
    log_format: str = "json"
    # Webhooks (SPEC §22): the first retry's wait (doubled after each failure, at most an hour), how
    # long a delivery is retried, and how often the outbox is read for deliveries due.
    webhook_backoff: float = Field(10.0, gt=0, description="Seconds before a webhook's first retry.")
    webhook_retry_for: float = Field(24 * 3600.0, gt=0, description="Seconds a webhook is retried.")
    webhook_poll_interval: float = Field(1.0, gt=0, description="Seconds between reads of the outbox.")
    # Traces (SPEC §22) are on when OTEL_EXPORTER_OTLP_ENDPOINT is set (the standard OTEL_* variables).
    trace_content: bool = Field(
        False,
        description="Message text, tool arguments and results in the trace spans too; off: ids, names, "
        "counts and timings only.",
    )
    # Attachments (SPEC §21).
    attachment_store: str | None = Field(
        default=None,
        description="Where uploaded files are kept: a directory (content-addressed; default "
        "`attachments/` in the data directory) or `s3://bucket/prefix` on any S3-compatible store "
        "(needed by several instances).",
    )
    attachment_s3_endpoint: str | None = Field(
        default=None,
        description="The S3-compatible server's URL (MinIO, Ceph, R2...); unset: AWS itself, or "
        "`AWS_ENDPOINT_URL_S3`. Credentials and region come from the usual `AWS_*` variables.",
    )
    attachment_max_bytes: int = Field(
        10 * 1024 * 1024, ge=1, description="The largest file one upload may hold (larger: 413)."
    )
    attachment_quota_bytes: int = Field(
        200 * 1024 * 1024,
        ge=0,
        description="What one member's attachments may hold in all (over it: 429); 0: no quota.",
    )
    attachment_text_tokens: int = Field(
        8000,
        ge=1,
        description="The most text (in tokens, about four characters each) a message's attachments "
        "give the model; the rest is cut with a note.",
    )

    @field_validator("allowed_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [origin.strip().rstrip("/") for origin in value.split(",") if origin.strip()]
        return value

    @field_validator("toolkits", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @field_validator("metrics_token", "admin_token")
    @classmethod
    def _long_enough(cls, value: str | None) -> str | None:
        # A bearer token is guessed over the network, as fast as the server answers: a short one (or
        # an empty one, from a shell variable that was not set) is no lock. The value is never echoed.
        if value is not None and len(value.encode()) < MIN_TOKEN_BYTES:
            raise ValueError(
                f"must be at least {MIN_TOKEN_BYTES} bytes long (`openssl rand -hex 32` makes one), "
                f"got {len(value.encode())}; unset it to turn it off"
            )
        return value

    @field_validator("rate_limit", "member_rate_limit", "flood_limit", mode="before")
    @classmethod
    def _parse_rate(cls, value: object) -> object:
        if isinstance(value, str):
            return RateLimit.parse(value)
        return value

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def data_dir(self) -> Path:
        """Where development state lives: beside the SQLite file, or the working directory."""
        if self.is_sqlite:
            path = self.database_url.split(":///", 1)[-1]
            if path and path != ":memory:":
                return Path(path).resolve().parent
        return Path.cwd()

    @property
    def chat_model(self) -> str:
        assert self.llm_model is not None, "load_settings() resolves the model"
        return self.llm_model

    @property
    def title_model_name(self) -> str:
        return self.title_model or self.chat_model


def load_settings(**overrides: object) -> Settings:
    """Build the settings and resolve the defaults that depend on the environment.

    With no `VERNIS_LLM_BASE_URL`, an `OPENAI_API_KEY` selects OpenAI; otherwise a local Ollama is
    the default endpoint. In demo mode with no way to verify tokens configured, a secret is generated
    once per data directory (the demo login signs with it); the product needs its own.
    """
    settings = Settings(**overrides)  # type: ignore[arg-type]
    openai_key = settings.openai_api_key
    if settings.llm_base_url is None:
        if openai_key:
            settings.llm_base_url = OPENAI_BASE_URL
            settings.llm_api_key = settings.llm_api_key or openai_key
            settings.llm_model = settings.llm_model or "gpt-4o-mini"
        else:
            settings.llm_base_url = DEFAULT_LLM_BASE_URL
    if settings.llm_model is None:
        settings.llm_model = "llama3.1"
    if settings.demo and not (settings.jwt_secret or settings.jwt_public_key or settings.jwks_url):
        settings.jwt_secret = _development_secret(settings.data_dir)
    return settings


def _development_secret(directory: Path) -> str:
    path = directory / ".vernis" / "jwt-secret"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_urlsafe(48)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process of this data directory won the race
            return path.read_text().strip()
        with os.fdopen(fd, "w") as file:
            file.write(secret)
        return secret
