"""The host configuration file (SPEC §14 item 2): read whole, validated whole, secrets from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from vernis.app import build_catalog
from vernis.config import ConfigError, load_config
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
