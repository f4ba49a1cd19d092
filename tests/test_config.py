"""The host configuration file (SPEC §14 item 2): read whole, validated whole, secrets from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from vernis.app import build_catalog
from vernis.config import ConfigError, HostConfig, load_config
from vernis.settings import load_settings

FULL = """
[assistant]
name = "Ada"
instructions = "You help dental practices run their front desk."

[roles.agent]
permissions = ["assistant:use", "ticket:view", "ticket:update"]

[[toolkits]]
name = "helpdesk"
api_url = "http://127.0.0.1:9100"
api_key = "${HELPDESK_KEY}"

[[pages]]
route = "/tickets/{id}"
entity_type = "ticket"

[[quick_actions]]
label = "My open tickets"
prompt = "List my open tickets, most urgent first."
permission = "ticket:view"
"""


def test_every_section_is_read(tmp_path: Path) -> None:
    """Assistant, roles, toolkits (with their own options), pages and quick actions come out typed; ${VAR} is filled in."""
    path = tmp_path / "vernis.toml"
    path.write_text(FULL)
    config = load_config(path, environ={"HELPDESK_KEY": "k-123"})
    assert (config.assistant.name, config.path) == ("Ada", path)
    assert config.roles["agent"].permissions == ["assistant:use", "ticket:view", "ticket:update"]
    (toolkit,) = config.toolkits
    assert toolkit.name == "helpdesk"
    assert toolkit.options == {"api_url": "http://127.0.0.1:9100", "api_key": "k-123"}
    assert (config.pages[0].route, config.pages[0].entity_type) == ("/tickets/{id}", "ticket")
    assert config.quick_actions[0].entity_types == []


def test_no_file_means_defaults_unless_one_was_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without VERNIS_CONFIG and no ./vernis.toml the defaults apply; a named file that is missing is an error."""
    monkeypatch.chdir(tmp_path)
    assert load_config(None).assistant.name == "Vernis"
    with pytest.raises(ConfigError, match=r"missing\.toml: no such file"):
        load_config(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[assistant]\nname = "Ada"\ncolour = "red"\n', "assistant.colour: unknown key"),
        ("[roles.agent]\npermissions = 3\n", "roles.agent.permissions: Input should be a valid list"),
        ('[[quick_actions]]\nlabel = "x"\n', "quick_actions.0.prompt: Field required"),
        (
            '[[toolkits]]\nname = "helpdesk"\nkey = "${NOT_SET}"\n',
            "toolkits.0.key: the environment variable NOT_SET",
        ),
        ('title = "x"\n', "title: unknown key"),
        (
            '[assistant]\navatar_url = "javascript:alert(1)"\n',
            "assistant.avatar_url: must be a path on the server",
        ),
        (
            '[assistant]\navatar_url = "//elsewhere.test/a.png"\n',
            "assistant.avatar_url: must be a path on the server",
        ),
        (f'[assistant]\ngreeting = "{"x" * 201}"\n', "assistant.greeting: String should have at most 200"),
        ("[assistant\n", "not valid TOML"),
        (
            '[[mcp_servers]]\nname = "b"\nurl = "http://x"\n[[mcp_servers]]\nname = "b"\nurl = "http://y"\n',
            "share a name",
        ),
    ],
)
def test_mistakes_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    """A wrong key, type, missing field, unset variable or bad TOML raises one ConfigError naming the file and the key."""
    path = tmp_path / "vernis.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert str(raised.value).startswith(f"{path}: ")
    assert message in str(raised.value)


MCP = """
[roles.accountant]
permissions = ["assistant:use", "billing:use"]

[[mcp_servers]]
name = "billing"
url = "https://billing.internal/mcp"
headers = { Authorization = "Bearer ${BILLING_MCP_TOKEN}" }
forward_member_token = true
read_only = ["preview_invoice"]
always_approve = ["search_invoices"]

[[mcp_servers]]
name = "wiki"
url = "http://127.0.0.1:9200/mcp"
permission = "wiki:read"

[[pages]]
route = "/invoices/{id}"
entity_type = "invoice"
resolve = { tool = "billing__get_invoice", arg = "invoice_id", name_field = "number" }
"""


def test_mcp_servers_are_read_with_their_defaults(tmp_path: Path) -> None:
    """[[mcp_servers]] come out typed with ${VAR} filled in headers and the documented defaults; a page may resolve through one of their tools."""
    path = tmp_path / "vernis.toml"
    path.write_text(MCP)
    config = load_config(path, environ={"BILLING_MCP_TOKEN": "s3cret"})
    billing, wiki = config.mcp_servers
    assert billing.headers == {"Authorization": "Bearer s3cret"}
    assert (billing.timeout, billing.connect_timeout, billing.trust_annotations) == (30.0, 10.0, True)
    assert (billing.tool_permission, wiki.tool_permission) == ("mcp:billing", "wiki:read")
    assert (wiki.forward_member_token, wiki.allow, wiki.deny) == (False, [], [])
    resolve = config.pages[0].resolve
    assert resolve is not None
    assert (resolve.tool, resolve.arg, resolve.name_field, resolve.summary_field) == (
        "billing__get_invoice",
        "invoice_id",
        "number",
        None,
    )
    assert config.mcp_server_of("billing__get_invoice") == billing
    assert config.mcp_server_of("ledger__get_invoice") is None


SERVER = '[[mcp_servers]]\nname = "billing"\nurl = "https://billing.internal/mcp"\n'


def test_an_external_servers_annotations_are_not_trusted_by_default(tmp_path: Path) -> None:
    """`external = true` makes trust_annotations default to false; an explicit trust_annotations = true stands; a server not marked external keeps trusting them."""
    path = tmp_path / "vernis.toml"
    path.write_text(
        SERVER
        + "external = true\n"
        + SERVER.replace("billing", "vouched")
        + "external = true\ntrust_annotations = true\n"
        + SERVER.replace("billing", "own")
    )
    billing, vouched, own = load_config(path, environ={}).mcp_servers
    assert (billing.external, billing.trust_annotations) == (True, False)
    assert (vouched.external, vouched.trust_annotations) == (True, True)
    assert (own.external, own.trust_annotations) == (False, True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[mcp_servers]]\nname = "billing"\n', "mcp_servers.0.url: Field required"),
        (
            '[[mcp_servers]]\nname = "billing"\nurl = "billing.internal/mcp"\n',
            "mcp_servers.0.url: must be an http:// or https:// URL",
        ),
        (
            '[[mcp_servers]]\nname = "Billing"\nurl = "http://x/mcp"\n',
            "mcp_servers.0.name: String should match",
        ),
        (SERVER + "timeout = 0\n", "mcp_servers.0.timeout: Input should be greater than 0"),
        (SERVER + 'trust = "yes"\n', "mcp_servers.0.trust: unknown key"),
        (SERVER + 'external = "sometimes"\n', "mcp_servers.0.external: Input should be a valid boolean"),
        (
            SERVER + 'headers = { Authorization = "Bearer ${BILLING_MCP_TOKEN}" }\n',
            "mcp_servers.0.headers.Authorization: the environment variable BILLING_MCP_TOKEN is not set",
        ),
        (SERVER + 'headers = { "Bad Header" = "x" }\n', "mcp_servers.0.headers.Bad Header.[key]"),
        (
            SERVER + 'read_only = ["refund"]\nalways_approve = ["refund"]\n',
            "mcp_servers.0: refund: listed in both read_only and always_approve",
        ),
        (
            SERVER
            + '[[pages]]\nroute = "/i/{id}"\nentity_type = "invoice"\nresolve = { tool = "ledger__get" }\n',
            "pages.0.resolve.tool: 'ledger__get' names no [[mcp_servers]] entry (billing)",
        ),
        (
            SERVER
            + '[[pages]]\nroute = "/i/{id}"\nentity_type = "invoice"\nresolve = { tool = "billing__get" }\n',
            "pages.0.resolve.tool: the MCP server 'billing' must have forward_member_token = true",
        ),
        (
            SERVER
            + '[[pages]]\nroute = "/i/{id}"\nentity_type = "invoice"\nresolve = { tool = "get_invoice" }\n',
            "pages.0.resolve.tool: String should match pattern",
        ),
        (
            SERVER + "forward_member_token = true\n"
            '[[pages]]\nroute = "/i/{id}"\nentity_type = "invoice"\nresolve = { tool = "billing__get" }\n'
            '[[pages]]\nroute = "/j/{id}"\nentity_type = "invoice"\nresolve = { tool = "billing__find" }\n',
            "pages.1.resolve: 'invoice' is resolved twice",
        ),
    ],
)
def test_mcp_mistakes_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    """Each mistake in an [[mcp_servers]] table or a page's resolve raises one ConfigError naming the file, the key and what is wrong."""
    path = tmp_path / "vernis.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert str(raised.value).startswith(f"{path}: ")
    assert message in str(raised.value)


def test_each_mcp_server_becomes_a_toolkit_that_may_resolve_pages(tmp_path: Path) -> None:
    """build_catalog makes each configured server a toolkit named after it (no tools until it connects), resolving the entity types its pages name; a server named like a loaded toolkit is refused."""
    path = tmp_path / "vernis.toml"
    path.write_text(MCP)
    config = load_config(path, environ={"BILLING_MCP_TOKEN": "s3cret"})
    catalog = build_catalog(load_settings(demo=False, toolkits=[]), config)
    assert [toolkit.name for toolkit in catalog.toolkits] == ["billing", "wiki"]
    assert [toolkit.tools for toolkit in catalog.toolkits] == [[], []]
    assert catalog.resolvers["invoice"][0] == "billing"
    assert catalog.tools_by_role()["accountant"] == []

    path.write_text(
        '[[toolkits]]\nname = "helpdesk"\n[[mcp_servers]]\nname = "helpdesk"\nurl = "http://x/mcp"\n'
    )
    with pytest.raises(ConfigError, match=r"mcp_servers\.0\.name: 'helpdesk' is already a toolkit's name"):
        build_catalog(load_settings(demo=False, toolkits=[]), load_config(path, environ={}))


def test_image_origins_are_read_as_browsers_write_origins(tmp_path: Path) -> None:
    """`[embed] image_origins` come out as origins (lower case, no default port, no trailing slash), each once; without the section, none."""
    path = tmp_path / "vernis.toml"
    path.write_text(
        '[embed]\nimage_origins = ["HTTPS://CDN.Example.com:443/", "http://127.0.0.1:8123", '
        '"https://cdn.example.com"]\n'
    )
    assert load_config(path).embed.image_origins == ["https://cdn.example.com", "http://127.0.0.1:8123"]
    assert load_config(None).embed.image_origins == []


@pytest.mark.parametrize(
    "origin",
    [
        "*",
        "https://cdn.example.com/images",
        "ftp://cdn.example.com",
        "https://a;b.example.com",
        "cdn.example.com",
    ],
)
def test_an_image_origin_that_is_not_one_is_refused(tmp_path: Path, origin: str) -> None:
    """A wildcard, a path, another scheme, a character a policy would read, or a bare host in `image_origins` stops the start naming the key."""
    path = tmp_path / "vernis.toml"
    path.write_text(f'[embed]\nimage_origins = ["{origin}"]\n')
    with pytest.raises(ConfigError, match=r"embed\.image_origins: .* is not an origin"):
        load_config(path)


REVIEWS = """
[[reviews]]
tools = ["send_sms", "create_agent"]
reviewer_permission = "message:review"
"""


def test_reviews_name_tools_and_their_reviewers_permission(tmp_path: Path) -> None:
    """`[[reviews]]` maps each named tool of the loaded toolkits to the permission its reviewer needs."""
    path = tmp_path / "vernis.toml"
    path.write_text(REVIEWS)
    catalog = build_catalog(load_settings(demo=False, toolkits=["crm"]), load_config(path, environ={}))
    assert catalog.reviews == {"send_sms": "message:review", "create_agent": "message:review"}
    assert catalog.reviewer_permissions(frozenset({"message:review", "contact:view"})) == {"message:review"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[[reviews]]\ntools = ["refund"]\nreviewer_permission = "billing:review"',
            "vernis.toml: reviews.0.tools: 'refund' is no tool of the loaded toolkits",
        ),
        (
            REVIEWS + '[[reviews]]\ntools = ["send_sms"]\nreviewer_permission = "other:review"',
            "vernis.toml: reviews.1.tools: 'send_sms' is reviewed twice",
        ),
        ('[[reviews]]\ntools = []\nreviewer_permission = "x:y"', "vernis.toml: reviews.0.tools: List should"),
        ('[[reviews]]\ntools = ["send_sms"]', "vernis.toml: reviews.0.reviewer_permission: Field required"),
    ],
)
def test_review_mistakes_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    """An unknown tool, a tool reviewed twice, no tools or no reviewer permission stop the start, naming the file and key."""
    path = tmp_path / "vernis.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        build_catalog(load_settings(demo=False, toolkits=["crm"]), load_config(path, environ={}))
    assert message in str(raised.value)


def test_demo_mode_sends_sms_to_review_by_admins() -> None:
    """In demo mode send_sms waits for a holder of message:review, which owners and admins hold and members do not."""
    catalog = build_catalog(load_settings(demo=True), HostConfig())
    assert catalog.reviews == {"send_sms": "message:review"}
    roles = catalog.roles.roles
    assert "message:review" in roles["admin"]
    assert "message:review" in roles["owner"]
    assert "message:review" not in roles["member"]
    assert "message:create" in roles["member"]


def webhook_file(tmp_path: Path, url: str, **keys: str) -> Path:
    path = tmp_path / "vernis.toml"
    extra = "".join(f"{key} = {value}\n" for key, value in keys.items())
    path.write_text(
        f'[[webhooks]]\nurl = "{url}"\nevents = ["answer.completed"]\nsecret_env = "HOOK"\n{extra}'
    )
    return path


@pytest.mark.parametrize(
    "url",
    ["https://crm.example.com/hooks", "http://127.0.0.1:9000/hooks", "http://localhost/h", "http://[::1]/h"],
)
def test_a_webhook_url_is_https_or_loopback(tmp_path: Path, url: str) -> None:
    """A webhook goes to an https:// URL, or over plain http:// to loopback only; text and private receivers are off by default."""
    config = load_config(webhook_file(tmp_path, url), environ={"HOOK": "s3cret"})
    (webhook,) = config.webhooks
    assert (webhook.url, webhook.events, webhook.secret_env) == (url, ["answer.completed"], "HOOK")
    assert (webhook.include_text, webhook.allow_private) == (False, False)


@pytest.mark.parametrize(
    "url",
    ["http://crm.example.com/hooks", "http://10.0.0.5/hooks", "ftp://crm.example.com/", "https:///nohost"],
)
def test_a_plain_http_webhook_beyond_loopback_is_refused(tmp_path: Path, url: str) -> None:
    """A webhook URL that is not https (beyond loopback) stops the configuration, naming the key."""
    path = webhook_file(tmp_path, url)
    with pytest.raises(ConfigError, match=r"webhooks\.0\.url: .*https://"):
        load_config(path, environ={"HOOK": "s3cret"})


def test_a_webhook_needs_a_known_event_and_its_secret(tmp_path: Path) -> None:
    """An unknown event, or a secret_env naming an unset variable, is refused with the key named."""
    path = webhook_file(tmp_path, "https://crm.example.com/hooks")
    with pytest.raises(
        ConfigError, match=r"webhooks\.0\.secret_env: the environment variable HOOK is not set"
    ):
        load_config(path, environ={})
    path.write_text(path.read_text().replace("answer.completed", "answer.started"))
    with pytest.raises(ConfigError, match=r"webhooks\.0\.events\.0: "):
        load_config(path, environ={"HOOK": "s3cret"})


def test_two_webhooks_cannot_share_a_url(tmp_path: Path) -> None:
    """Two [[webhooks]] entries with the same URL are refused (one entry lists all the events a receiver wants)."""
    path = webhook_file(tmp_path, "https://crm.example.com/hooks")
    path.write_text(path.read_text() * 2)
    with pytest.raises(ConfigError, match="webhooks: two entries share a url"):
        load_config(path, environ={"HOOK": "s3cret"})


FALLBACKS = """
[[model.fallbacks]]
base_url = "https://openrouter.example/api/v1/"
model = "deepseek/deepseek-chat"
api_key_env = "OPENROUTER_KEY"

[[model.fallbacks]]
base_url = "http://127.0.0.1:11434/v1"
model = "llama3.1"
"""


def test_model_fallbacks_are_read_in_order(tmp_path: Path) -> None:
    """[[model.fallbacks]] entries keep their order, their model, key variable and base URL (trailing slash dropped)."""
    path = tmp_path / "vernis.toml"
    path.write_text(FALLBACKS)
    config = load_config(path, environ={"OPENROUTER_KEY": "sk-or-1"})
    assert [(f.base_url, f.model, f.api_key_env) for f in config.model.fallbacks] == [
        ("https://openrouter.example/api/v1", "deepseek/deepseek-chat", "OPENROUTER_KEY"),
        ("http://127.0.0.1:11434/v1", "llama3.1", None),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (FALLBACKS, "model.fallbacks.0.api_key_env: the environment variable OPENROUTER_KEY is not set"),
        ('[[model.fallbacks]]\nbase_url = "ftp://x/v1"\nmodel = "m"\n', "model.fallbacks.0.base_url"),
        ('[[model.fallbacks]]\nbase_url = "http://x/v1?key=1"\nmodel = "m"\n', "model.fallbacks.0.base_url"),
        ('[[model.fallbacks]]\nbase_url = "http://x/v1"\nmodel = ""\n', "model.fallbacks.0.model"),
        ('[[model.fallbacks]]\nbase_url = "http://x/v1"\n', "model.fallbacks.0.model"),
        ('[[model.fallbacks]]\nbase_url = "http://x/v1"\nmodel = "m"\napi_key = "sk-1"\n', "api_key"),
    ],
)
def test_fallback_mistakes_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    """A fallback whose key variable is unset, whose URL is not http(s) or has a query, without a model, or with a key written in the file raises one ConfigError naming the key."""
    path = tmp_path / "vernis.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert str(raised.value).startswith(f"{path}: ")
    assert message in str(raised.value)
