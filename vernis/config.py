"""The host configuration file (SPEC §14 item 2): `VERNIS_CONFIG`, or `./vernis.toml` when present.

    [assistant]
    name = "Ada"
    instructions = "You help dental practices run their front desk."
    ask_user = true                          # questions in a form (SPEC §17); false: not offered
    [[model.fallbacks]]                      # models that take over when the chat model is down (SPEC §19)
    base_url = "https://openrouter.ai/api/v1"
    model = "deepseek/deepseek-chat"
    api_key_env = "OPENROUTER_API_KEY"       # the environment variable holding its key (optional)
    [roles.agent]
    permissions = ["assistant:use", "ticket:view"]
    [[toolkits]]
    name = "helpdesk"
    api_url = "http://127.0.0.1:9000"        # any other key goes to the toolkit's startup hook
    [[mcp_servers]]                          # an MCP server's tools (streamable HTTP)
    name = "billing"
    url = "https://billing.internal/mcp"
    headers = { Authorization = "Bearer ${BILLING_MCP_TOKEN}" }
    forward_member_token = true              # X-Vernis-Member-Token: a token Vernis signs for it
    external = false                         # true: run by someone else; its annotations not believed
    permission = "billing:use"               # default "mcp:<name>"; granted to no role by default
    [[pages]]
    route = "/tickets/{id}"
    entity_type = "ticket"
    resolve = { tool = "billing__get_invoice", arg = "id", name_field = "number" }   # optional
    [[quick_actions]]
    label = "My open tickets"
    prompt = "List my open tickets, most urgent first."
    permission = "ticket:view"
    [[reviews]]                              # writes a second member approves (SPEC §23)
    tools = ["billing__refund"]
    reviewer_permission = "billing:review"
    [guards]                                 # personal data and prompt injection (vernis.guards)
    actions = { email = "warn" }             # category -> block / redact / warn / allow
    allow_phrases = ["act as a reseller"]    # never a finding, in any organization
    [guards.organizations."acme"]            # the host's organization id (the token's `org`)
    actions = { phone = "redact" }
    allow_phrases = ["ignore previous instructions"]
    [embed]                                  # what the panel shows from elsewhere
    image_origins = ["https://cdn.example.com"]  # markdown images load from these and Vernis only
    [[webhooks]]                             # the host hears of events (SPEC §22, docs/webhooks.md)
    url = "https://crm.example.com/vernis-events"   # https, or http on loopback only
    events = ["approval.requested", "answer.completed"]
    secret_env = "CRM_WEBHOOK_SECRET"        # the environment variable holding the signing secret
    include_text = false                     # true: message text goes along
    allow_private = false                    # true: loopback and private addresses too (development)
    [quotas]                                 # token quotas (SPEC §15); 0 = no quota
    member_daily_tokens = 200000             # VERNIS_MEMBER_DAILY_TOKENS wins over this
    org_monthly_tokens = 20000000            # VERNIS_ORG_MONTHLY_TOKENS wins over this
    [quotas.roles.admin]
    member_daily_tokens = 500000             # a role's wins over the organization's and the default
    [quotas.organizations."acme"]
    member_daily_tokens = 100000
    org_monthly_tokens = 0

Secrets never go in the file: a string value may name an environment variable as `${NAME}`.
`load_config` validates the whole file before anything uses it: a mistake raises `ConfigError`
naming the file, the key and what is wrong, and nothing of the file is applied.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from vernis.exceptions import ConfigError

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "GUARD_RULES",
    "WEBHOOK_EVENTS",
    "ConfigError",
    "EmbedSection",
    "FallbackEntry",
    "GuardsSection",
    "HostConfig",
    "McpServerEntry",
    "PageEntry",
    "PageResolve",
    "QuotasSection",
    "ReviewEntry",
    "WebhookEntry",
    "load_config",
]

DEFAULT_CONFIG_PATH = Path("vernis.toml")

_Name = Annotated[str, StringConstraints(min_length=1, max_length=64)]
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AssistantSection(_Section):
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "Vernis"
    instructions: Annotated[str, StringConstraints(max_length=8000)] | None = None
    # The built-in `ask_user` tool (SPEC §17): the model may ask the user questions in a form.
    ask_user: bool = True
    # The panel's empty conversation says this (default: "Hi, I'm <name>." and "How can I help?").
    greeting: (
        Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)] | None
    ) = None
    # The image beside the assistant's name (default: its initial): a path on the Vernis server, or an
    # http(s) URL on one of `[embed] image_origins` (the panel loads images from nowhere else).
    avatar_url: Annotated[str, StringConstraints(max_length=2048)] | None = None

    @field_validator("avatar_url")
    @classmethod
    def _avatar(cls, url: str | None) -> str | None:
        if url is not None and not re.fullmatch(r"(/(?!/)|https?://[^\s/?#]+/?)[^\s]*", url):
            raise ValueError("must be a path on the server (/...) or an http:// or https:// URL")
        return url


class FallbackEntry(_Section):
    """A model that takes over an answer when the ones before it fail before their first token
    (SPEC §19): its own OpenAI-compatible endpoint, model name, and the environment variable that
    holds its key (none: a local server that needs no key)."""

    base_url: Annotated[str, StringConstraints(max_length=2048)]
    model: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    api_key_env: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not re.fullmatch(r"https?://[^\s/?#]+[^\s?#]*", url):
            raise ValueError("must be an http:// or https:// URL (the endpoint's /v1), without a query")
        return url.rstrip("/")


class ModelSection(_Section):
    # The chat model reads images (SPEC §21): attached images go to it as image parts, else as a note.
    vision: bool = False
    # Tried in order when the chat model fails before its first token (SPEC §19).
    fallbacks: list[FallbackEntry] = Field(default_factory=list, max_length=8)


class RoleSection(_Section):
    permissions: list[_Name]


class ToolkitEntry(BaseModel):
    # Keys other than `name` are the toolkit's own options, handed to its startup hook.
    model_config = ConfigDict(extra="allow", frozen=True)

    name: _Name

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class McpServerEntry(_Section):
    """An MCP server whose tools Vernis offers as `<name>__<tool>` (SPEC §14 item 4)."""

    name: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
    url: Annotated[str, StringConstraints(max_length=2048)]
    # Sent with every request to the server; values may name environment variables (${NAME}).
    headers: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]{1,64}$")], str] = Field(
        default_factory=dict
    )
    # A token Vernis signs for this server, naming the member, goes along on their calls, in
    # X-Vernis-Member-Token (vernis.identity.signing); never the member's own token.
    forward_member_token: bool = False
    # Run by someone else (a vendor's, a public one): its annotations are not believed unless
    # trust_annotations = true says so.
    external: bool = False
    # Needed for any of its tools; default "mcp:<name>". No role holds it unless granted.
    permission: _Name | None = None
    # Seconds per call; and to connect (at start, and each reconnection).
    timeout: float = Field(30.0, gt=0, le=600)
    connect_timeout: float = Field(10.0, gt=0, le=120)
    # False: every tool is a write (approved first), whatever its annotations say. Default: true,
    # false for an external server.
    trust_annotations: bool = True
    # The server's tool names: reads whatever the annotations say / writes whatever they say.
    read_only: list[_Name] = Field(default_factory=list)
    always_approve: list[_Name] = Field(default_factory=list)
    # Only these of its tools (empty: all), and never these.
    allow: list[_Name] = Field(default_factory=list)
    deny: list[_Name] = Field(default_factory=list)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", url):
            raise ValueError("must be an http:// or https:// URL")
        return url

    @model_validator(mode="wrap")
    @classmethod
    def _external_annotations_untrusted(
        cls, data: Any, handler: ModelWrapValidatorHandler[McpServerEntry]
    ) -> McpServerEntry:
        entry = handler(data)
        if entry.external and "trust_annotations" not in entry.model_fields_set:
            return entry.model_copy(update={"trust_annotations": False})
        return entry

    @model_validator(mode="after")
    def _one_verdict_per_tool(self) -> McpServerEntry:
        both = sorted(set(self.read_only) & set(self.always_approve))
        if both:
            raise ValueError(f"{', '.join(both)}: listed in both read_only and always_approve")
        return self

    @property
    def tool_permission(self) -> str:
        return self.permission or f"mcp:{self.name}"


class PageResolve(_Section):
    """How a page's entity is named: by calling a read tool of an MCP server as the member."""

    # The tool as offered: "<server>__<tool>".
    tool: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,31}__[A-Za-z0-9_-]{1,64}$")]
    # The argument that receives the entity id, and the result's fields holding the name and summary.
    arg: _Name = "id"
    name_field: _Name = "name"
    summary_field: _Name | None = None


class PageEntry(_Section):
    route: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    entity_type: _Name
    resolve: PageResolve | None = None


class ReviewEntry(_Section):
    """Writes a second member approves (SPEC §23): after the member approves one of `tools`, it waits
    for a member of the same organization holding `reviewer_permission`."""

    tools: Annotated[list[_Name], Field(min_length=1)]
    reviewer_permission: _Name


WebhookEvent = Literal[
    "answer.completed",
    "approval.requested",
    "approval.resolved",
    "question.asked",
    "feedback.created",
    "review.requested",
    "review.resolved",
]
WEBHOOK_EVENTS: tuple[str, ...] = get_args(WebhookEvent)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class WebhookEntry(_Section):
    """A receiver the host runs (SPEC §22): the events it is sent, signed with the secret held by the
    environment variable `secret_env`."""

    url: Annotated[str, StringConstraints(max_length=2048)]
    events: Annotated[list[WebhookEvent], Field(min_length=1)]
    secret_env: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    # True: the message text goes along (an answer's, a question's); else ids and metadata only.
    include_text: bool = False
    # True: a receiver on a loopback, private or link-local address is sent to; false keeps the
    # outbox from reaching the host's internal network (loopback included: Vernis's own admin API).
    allow_private: bool = False

    @field_validator("url")
    @classmethod
    def _https_url(cls, url: str) -> str:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or not host:
            raise ValueError("must be an https:// URL")
        if parts.scheme == "http" and not _loopback(host):
            raise ValueError("must be https:// (plain http:// only to a loopback address)")
        return url


class QuickActionEntry(_Section):
    label: Annotated[str, StringConstraints(min_length=1, max_length=80)]
    prompt: Annotated[str, StringConstraints(min_length=1, max_length=2000)]
    entity_types: list[_Name] = Field(default_factory=list)
    permission: _Name | None = None


GuardRule = Literal[
    "card",
    "iban",
    "national_id",
    "email",
    "phone",
    "credential",
    "jwt",
    "injection_high",
    "injection_medium",
    "injection_low",
]
GUARD_RULES: tuple[str, ...] = get_args(GuardRule)
GuardAction = Literal["block", "redact", "warn", "allow"]
_Phrase = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=500)]


class GuardOrganizationSection(_Section):
    """One organization's changes to the guards: on top of the `[guards]` defaults."""

    actions: dict[GuardRule, GuardAction] = Field(default_factory=dict)
    allow_phrases: list[_Phrase] = Field(default_factory=list)

    @field_validator("actions")
    @classmethod
    def _injection_is_never_redacted(cls, actions: dict[str, str]) -> dict[str, str]:
        bad = sorted(
            rule for rule, action in actions.items() if rule.startswith("injection") and action == "redact"
        )
        if bad:
            raise ValueError(f"{', '.join(bad)}: an instruction cannot be redacted; use block, warn or allow")
        return actions


class GuardsSection(GuardOrganizationSection):
    """The input, tool-argument and tool-result guards (vernis.guards); see the README."""

    # Seconds a scan may take before it counts as failed (and what it checked is blocked).
    timeout: float = Field(2.0, gt=0, le=30)
    # Where phone numbers written without a country code are read from (ISO 3166 code); none: only
    # numbers written with +country count.
    phone_region: Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}$")] | None = "US"
    organizations: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=255)], GuardOrganizationSection
    ] = Field(default_factory=dict)


class QuotaValues(_Section):
    """Token quotas (SPEC §15); None: not set here; 0: no quota."""

    member_daily_tokens: Annotated[int, Field(ge=0)] | None = None
    org_monthly_tokens: Annotated[int, Field(ge=0)] | None = None


class RoleQuota(_Section):
    member_daily_tokens: Annotated[int, Field(ge=0)] | None = None


class QuotasSection(QuotaValues):
    """The defaults (below the `VERNIS_*_TOKENS` settings), and overrides per role and per
    organization (the host's organization id, the token's `org`)."""

    roles: dict[_Name, RoleQuota] = Field(default_factory=dict)
    organizations: dict[Annotated[str, StringConstraints(min_length=1, max_length=255)], QuotaValues] = Field(
        default_factory=dict
    )


_HOST = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?|\[[0-9a-f:.]+\]")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(value: str) -> str:
    """`value` as a browser writes an origin (lower case, no default port), or ValueError."""
    parts = urlsplit(value.strip())
    netloc = parts.netloc.lower()
    try:
        port = parts.port
    except ValueError:  # out of range, or not a number
        netloc = ""
        port = None
    host = netloc.rsplit(":", 1)[0] if port is not None else netloc
    # The host goes into a Content-Security-Policy: letters, digits, dots and dashes only.
    if (
        parts.scheme not in _DEFAULT_PORTS
        or not _HOST.fullmatch(host)
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise ValueError(f"{value!r} is not an origin such as https://cdn.example.com (no path)")
    return f"{parts.scheme}://{host}" + ("" if port in (None, _DEFAULT_PORTS[parts.scheme]) else f":{port}")


# A path of segments, each literal or one `{name}` placeholder.
_ROUTE = re.compile(r"/(?:(?:[A-Za-z0-9._~-]+|\{[A-Za-z_][A-Za-z0-9_]*\})(?:/|$))*")


class EmbedSection(_Section):
    """What the panel shows from other origins (SPEC §11)."""

    # Markdown images in answers load from Vernis's own origin and these only (any other is shown
    # as its alt text); Vernis's own pages allow them in their Content-Security-Policy too.
    image_origins: list[Annotated[str, StringConstraints(max_length=300)]] = Field(default_factory=list)
    # Absolute links in UI blocks (SPEC §16) may point to these origins; relative paths always may.
    link_origins: list[Annotated[str, StringConstraints(max_length=300)]] = Field(default_factory=list)

    @field_validator("image_origins", "link_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        return list(dict.fromkeys(_origin(origin) for origin in origins))

    # Routes the host page's built-in `navigate` tool (SPEC §18) may open, besides those of
    # `[[pages]]`: paths such as "/contacts" or "/tickets/{id}" ({name}: one path segment).
    navigable: list[Annotated[str, StringConstraints(max_length=256)]] = Field(default_factory=list)

    @field_validator("navigable")
    @classmethod
    def _routes(cls, routes: list[str]) -> list[str]:
        for route in routes:
            if not _ROUTE.fullmatch(route):
                raise ValueError(f"{route!r} is not a route: a path starting with /, without a query")
        return list(dict.fromkeys(routes))


class HostConfig(_Section):
    assistant: AssistantSection = Field(default_factory=AssistantSection)
    model: ModelSection = Field(default_factory=ModelSection)
    roles: dict[_Name, RoleSection] = Field(default_factory=dict)
    toolkits: list[ToolkitEntry] = Field(default_factory=list)
    mcp_servers: list[McpServerEntry] = Field(default_factory=list)
    pages: list[PageEntry] = Field(default_factory=list)
    quick_actions: list[QuickActionEntry] = Field(default_factory=list)
    reviews: list[ReviewEntry] = Field(default_factory=list)
    webhooks: list[WebhookEntry] = Field(default_factory=list)
    guards: GuardsSection = Field(default_factory=GuardsSection)
    quotas: QuotasSection = Field(default_factory=QuotasSection)
    embed: EmbedSection = Field(default_factory=EmbedSection)
    # Where it was read from (None: no file, the defaults).
    path: Path | None = None

    def mcp_server_of(self, tool: str) -> McpServerEntry | None:
        """The server offering the tool named `<server>__<tool>`, if one is configured."""
        found = [entry for entry in self.mcp_servers if tool.startswith(f"{entry.name}__")]
        return max(found, key=lambda entry: len(entry.name), default=None)


def load_config(path: Path | None, *, environ: dict[str, str] | None = None) -> HostConfig:
    """Read and validate the configuration. `path` None: `./vernis.toml` if it exists, else defaults."""
    explicit = path is not None
    path = path if path is not None else DEFAULT_CONFIG_PATH
    if not path.exists():
        if explicit:
            raise ConfigError(f"{path}: no such file (VERNIS_CONFIG names it)")
        return HostConfig()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    environ = environ if environ is not None else dict(os.environ)
    data = _interpolate(data, environ, path, ())
    if "path" in data:
        raise ConfigError(f"{path}: path: unknown key")
    try:
        config = HostConfig.model_validate({**data, "path": path})
    except ValidationError as exc:
        raise ConfigError(_describe(path, exc)) from None
    names = [entry.name for entry in config.mcp_servers]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: mcp_servers: two servers share a name")
    resolved: set[str] = set()
    for index, page in enumerate(config.pages):
        if page.resolve is None:
            continue
        key = f"{path}: pages.{index}.resolve.tool"
        server = config.mcp_server_of(page.resolve.tool)
        if server is None:
            known = ", ".join(sorted(names)) or "none is configured"
            raise ConfigError(f"{key}: {page.resolve.tool!r} names no [[mcp_servers]] entry ({known})")
        if not server.forward_member_token:
            # Without the member's token the server cannot answer as the member's organization.
            raise ConfigError(
                f"{key}: the MCP server {server.name!r} must have forward_member_token = true to "
                "resolve pages as the member"
            )
        if page.entity_type in resolved:
            raise ConfigError(f"{path}: pages.{index}.resolve: {page.entity_type!r} is resolved twice")
        resolved.add(page.entity_type)
    urls = [webhook.url for webhook in config.webhooks]
    if len(set(urls)) != len(urls):
        # A delivery names its receiver by URL: one entry per URL (list all its events there).
        raise ConfigError(f"{path}: webhooks: two entries share a url")
    for index, fallback in enumerate(config.model.fallbacks):
        if fallback.api_key_env is not None and not environ.get(fallback.api_key_env):
            name = fallback.api_key_env
            raise ConfigError(
                f"{path}: model.fallbacks.{index}.api_key_env: the environment variable {name} is not set"
            )
    for index, webhook in enumerate(config.webhooks):
        if not environ.get(webhook.secret_env):
            name = webhook.secret_env
            raise ConfigError(
                f"{path}: webhooks.{index}.secret_env: the environment variable {name} is not set"
            )
    return config


def _interpolate(value: Any, environ: dict[str, str], path: Path, where: tuple[str, ...]) -> Any:
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name = match[1]
            if name not in environ:
                key = ".".join(where) or "value"
                raise ConfigError(f"{path}: {key}: the environment variable {name} is not set")
            return environ[name]

        return _ENV.sub(substitute, value)
    if isinstance(value, dict):
        return {k: _interpolate(v, environ, path, (*where, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, environ, path, (*where, str(i))) for i, v in enumerate(value)]
    return value


def _describe(path: Path, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        message = message.removeprefix("Value error, ")
        problems.append(f"{path}: {key}: {message}")
    return "\n".join(problems)
