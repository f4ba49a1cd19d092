"""The `vernis` command line (SPEC §13) against a real SQLite file.

The commands run in the test's process (`vernis.cli.main`, with the environment, working directory,
stdout and stderr each test gives it): a process of their own costs seconds of imports each. The
seeded database every test copies is made by a real `python -m vernis seed-demo` process, which
proves the entry point itself.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.utils import vernis_command
from vernis.store.migrate import head_revision

REPO = Path(__file__).resolve().parent.parent
SECRET = "cli-test-secret-that-is-long-enough-for-hs256"
# A deadline, not a wait: generous, for a machine busy with the rest of the suite (pytest-xdist).
COMMAND_TIMEOUT = 180


def environment(database: Path, *, secret: str | None = SECRET) -> dict[str, str]:
    """The caller's environment without any Vernis or OpenAI setting, pointed at `database`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERNIS_") and k != "OPENAI_API_KEY"}
    env["PYTHONPATH"] = str(REPO)
    env["VERNIS_DATABASE_URL"] = f"sqlite+aiosqlite:///{database}"
    if secret is not None:
        env["VERNIS_JWT_SECRET"] = secret
    return env


def vernis(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return vernis_command(*args, env=env, cwd=cwd)


def vernis_process(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m vernis ARGS`: the real command, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "vernis", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def rows(database: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(database) as connection:
        return connection.execute(sql).fetchall()


def counts(database: Path) -> dict[str, int]:
    tables = ("organization", "member", "organization_ai_rules")
    return {table: int(rows(database, f"SELECT count(*) FROM {table}")[0][0]) for table in tables}


@pytest.fixture(scope="module")
def seeded_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh database that `vernis seed-demo` has migrated and seeded (tests copy it, never change it)."""
    directory = tmp_path_factory.mktemp("seeded")
    database = directory / "vernis.db"
    result = vernis_process("seed-demo", env=environment(database), cwd=directory)
    assert result.returncode == 0, result.stderr
    assert "rows added" in result.stdout
    return database


@pytest.fixture
def database(seeded_database: Path, tmp_path: Path) -> Path:
    """A private copy of the seeded database, in a directory of its own."""
    copy = tmp_path / "data" / "vernis.db"
    copy.parent.mkdir()
    shutil.copyfile(seeded_database, copy)
    return copy


def test_db_upgrade_creates_the_schema(tmp_path: Path) -> None:
    """`vernis db upgrade` creates a missing SQLite file and migrates it to the newest revision."""
    database = tmp_path / "fresh.db"
    result = vernis("db", "upgrade", env=environment(database), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    tables = {name for (name,) in rows(database, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"organization", "member", "assistant_conversation", "assistant_message"} <= tables
    assert rows(database, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
    assert counts(database) == {"organization": 0, "member": 0, "organization_ai_rules": 0}


def test_seed_demo_is_idempotent(database: Path) -> None:
    """`vernis seed-demo` loads the demo members of both organizations; running it again adds nothing."""
    emails = {email for (email,) in rows(database, "SELECT email FROM member")}
    assert emails == {
        "owner@acme.test",
        "admin@acme.test",
        "member@acme.test",
        "viewer@acme.test",
        "owner@globex.test",
    }
    before = counts(database)
    assert before["organization"] == 2

    again = vernis("seed-demo", env=environment(database), cwd=database.parent)
    assert again.returncode == 0, again.stderr
    assert counts(database) == before
    assert "crm: demo data ready (already seeded)" in again.stdout


def test_token_decodes_to_the_member_with_the_requested_ttl(database: Path) -> None:
    """`vernis token owner@acme.test --ttl 60` prints one HS256 JWT naming the demo member as the demo host does, expiring in 60 s."""
    before = time.time()
    result = vernis("token", "owner@acme.test", "--ttl", "60", env=environment(database), cwd=database.parent)
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert result.stdout == token + "\n"
    claims = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert (claims["sub"], claims["org"], claims["role"]) == ("owner@acme.test", "acme", "owner")
    assert (claims["name"], claims["email"]) == ("Dana Whitfield", "owner@acme.test")
    assert before + 60 - 2 <= claims["exp"] <= time.time() + 60 + 1


def test_token_for_unknown_email_fails_clearly(database: Path) -> None:
    """`vernis token` for an e-mail no member has exits 1, prints nothing on stdout and names the e-mail on stderr."""
    result = vernis("token", "nobody@acme.test", env=environment(database), cwd=database.parent)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "nobody@acme.test" in result.stderr
    assert "no demo member" in result.stderr
    assert "Traceback" not in result.stderr


def test_development_secret_is_generated_once_beside_the_database(database: Path, tmp_path: Path) -> None:
    """In demo mode without VERNIS_JWT_SECRET a secret is written once to <data dir>/.vernis/jwt-secret (0600) and reused."""
    env = environment(database, secret=None)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    secret_file = database.parent / ".vernis" / "jwt-secret"
    assert not secret_file.exists()

    first = vernis("token", "member@acme.test", env=env, cwd=elsewhere)
    assert first.returncode == 0, first.stderr
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    secret = secret_file.read_text().strip()
    assert len(secret) >= 32
    # The data directory is where the database lives, not the working directory.
    assert not (elsewhere / ".vernis").exists()

    second = vernis("token", "member@acme.test", env=env, cwd=elsewhere)
    assert second.returncode == 0, second.stderr
    assert secret_file.read_text().strip() == secret
    for token in (first.stdout.strip(), second.stdout.strip()):
        assert jwt.decode(token, secret, algorithms=["HS256"])["sub"] == "member@acme.test"


def test_token_for_host_ids_carries_the_claims_given(tmp_path: Path) -> None:
    """`vernis token --sub --org --role --name --email` signs a host token with those string ids; no database needed."""
    env = environment(tmp_path / "none.db")
    result = vernis(
        "token", "--sub", "u-42", "--org", "tenant-7", "--role", "agent", "--name", "Ada", "--email", "ada@x.test",
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    claims = jwt.decode(result.stdout.strip(), SECRET, algorithms=["HS256"])
    assert {k: claims[k] for k in ("sub", "org", "role", "name", "email")} == {
        "sub": "u-42",
        "org": "tenant-7",
        "role": "agent",
        "name": "Ada",
        "email": "ada@x.test",
    }
    assert not (tmp_path / "none.db").exists()


def test_token_without_a_secret_names_the_setting(tmp_path: Path) -> None:
    """Outside the demo, `vernis token` with no VERNIS_JWT_SECRET exits 2 and says which setting signs tokens."""
    result = vernis(
        "token", "--sub", "u", "--org", "o", env=environment(tmp_path / "x.db", secret=None), cwd=tmp_path
    )
    assert result.returncode == 2
    assert "VERNIS_JWT_SECRET" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".vernis").exists()


def test_serve_in_product_mode_refuses_to_start_without_a_way_to_verify_tokens(tmp_path: Path) -> None:
    """`vernis serve` with no secret, public key or JWKS exits 2 naming the three settings, and serves nothing."""
    result = vernis("serve", "--port", "1", env=environment(tmp_path / "v.db", secret=None), cwd=tmp_path)
    assert result.returncode == 2
    for setting in ("VERNIS_JWT_SECRET", "VERNIS_JWT_PUBLIC_KEY", "VERNIS_JWKS_URL"):
        assert setting in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "v.db").exists()


@pytest.mark.parametrize("variable", ["VERNIS_ADMIN_TOKEN", "VERNIS_METRICS_TOKEN"])
def test_serve_refuses_a_bearer_token_shorter_than_32_bytes(tmp_path: Path, variable: str) -> None:
    """`vernis serve` with a 31-byte admin or metrics token exits 2 naming the setting (not its value), and serves nothing."""
    env = environment(tmp_path / "v.db") | {variable: "not-long-enough-for-a-bearer-31"}
    result = vernis("serve", "--port", "1", env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert f"{variable}: Value error, must be at least 32 bytes long" in result.stderr
    assert "not-long-enough" not in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "v.db").exists()


def test_demo_binds_beyond_loopback_only_when_asked(tmp_path: Path) -> None:
    """`vernis serve --demo --host 0.0.0.0` is refused (exit 2, naming --demo-public) before anything is served."""
    result = vernis("serve", "--demo", "--host", "0.0.0.0", env=environment(tmp_path / "v.db"), cwd=tmp_path)
    assert result.returncode == 2
    assert "--demo-public" in result.stderr
    assert not (tmp_path / "v.db").exists()


def test_check_config_lists_the_tools_each_role_gets(tmp_path: Path) -> None:
    """`vernis check-config` with the CRM toolkit and a configured role lists, per role, the tools a member gets."""
    config = tmp_path / "vernis.toml"
    config.write_text(
        '[assistant]\nname = "Ada"\n[roles.receptionist]\npermissions = ["assistant:use", "contact:list"]\n'
        '[[toolkits]]\nname = "crm"\n'
    )
    env = environment(tmp_path / "v.db") | {"VERNIS_CONFIG": str(config)}
    result = vernis("check-config", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "assistant: Ada" in lines
    assert "toolkits: crm (40 tools)" in lines
    assert "  receptionist: search_contacts" in lines
    viewer = next(line for line in lines if line.startswith("  viewer: "))
    assert "search_contacts" in viewer
    assert "create_contact" not in viewer
    owner = next(line for line in lines if line.startswith("  owner: "))
    assert len(owner.split(", ")) == 40
    assert lines[-1] == "configuration is valid"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[assistant]\nnmae = "Ada"\n', "assistant.nmae: unknown key"),
        ("[roles.agent]\npermissions = 3\n", "roles.agent.permissions"),
        ('[[toolkits]]\nname = "nope"\n', "no toolkit named 'nope'"),
        ('[[pages]]\nroute = "/tickets"\nentity_type = "ticket"\n', "pages.0.route"),
        ("[assistant\n", "not valid TOML"),
        (
            '[[toolkits]]\nname = "crm"\n[[toolkits]]\nname = "crm"\nkey = "${NOT_SET_ANYWHERE}"\n',
            "NOT_SET_ANYWHERE",
        ),
    ],
)
def test_bad_configuration_stops_with_the_file_and_key(tmp_path: Path, text: str, named: str) -> None:
    """An invalid configuration file stops `check-config` (exit 2) with one message naming the file and the key."""
    config = tmp_path / "vernis.toml"
    config.write_text(text)
    env = environment(tmp_path / "v.db") | {"VERNIS_CONFIG": str(config)}
    result = vernis("check-config", env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    assert named in result.stderr
    assert "Traceback" not in result.stderr


def test_check_config_refuses_a_plain_http_webhook_beyond_loopback(tmp_path: Path) -> None:
    """`vernis check-config` exits 2 naming webhooks.0.url for an http:// receiver that is not on loopback."""
    config = tmp_path / "vernis.toml"
    config.write_text(
        '[[webhooks]]\nurl = "http://crm.example.com/hooks"\nevents = ["answer.completed"]\nsecret_env = "HOOK"\n'
    )
    env = environment(tmp_path / "vernis.db") | {"VERNIS_CONFIG": str(config), "HOOK": "s3cret"}
    refused = vernis("check-config", env=env, cwd=tmp_path)
    assert refused.returncode == 2
    assert "webhooks.0.url: must be https:// (plain http:// only to a loopback address)" in refused.stderr
    config.write_text(config.read_text().replace("http://crm.example.com", "https://crm.example.com"))
    accepted = vernis("check-config", env=env, cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stderr
    assert "webhook: https://crm.example.com/hooks (answer.completed)" in accepted.stdout


def test_check_config_refuses_a_local_attachment_directory_for_several_instances(tmp_path: Path) -> None:
    """With VERNIS_REDIS_URL set (several instances), `check-config` exits 2 naming VERNIS_ATTACHMENT_STORE while attachments go to a local directory, and accepts s3://bucket/prefix."""
    env = environment(tmp_path / "v.db") | {"VERNIS_REDIS_URL": "redis://127.0.0.1:1/0"}
    refused = vernis("check-config", env=env, cwd=tmp_path)
    assert refused.returncode == 2
    assert "VERNIS_ATTACHMENT_STORE: several instances" in refused.stderr
    assert "s3://bucket/prefix" in refused.stderr
    shared = vernis("check-config", env=env | {"VERNIS_ATTACHMENT_STORE": "s3://files/vernis"}, cwd=tmp_path)
    assert shared.returncode == 0, shared.stderr
    assert "attachments: s3://files/vernis" in shared.stdout.splitlines()
    alone = vernis("check-config", env=environment(tmp_path / "v.db"), cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    assert f"attachments: {tmp_path / 'attachments'}" in alone.stdout.splitlines()
