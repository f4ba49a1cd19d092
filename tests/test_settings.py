"""Settings (SPEC §12): every knob from its environment variable or a `.env` file, checked on load."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.utils import vernis_command
from vernis.settings import DEFAULT_LLM_BASE_URL, RateLimit, Settings, load_settings

SECRET = "settings-test-secret-long-enough-for-hs256"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No VERNIS_* or OPENAI_API_KEY from the caller's shell, and a working directory with no `.env`."""
    for name in list(os.environ):
        if name.startswith("VERNIS_") or name == "OPENAI_API_KEY":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    # A fixed secret keeps load_settings() from writing a development secret beside the database.
    monkeypatch.setenv("VERNIS_JWT_SECRET", SECRET)


def rate(limit: RateLimit) -> tuple[int, float]:
    return (limit.count, limit.seconds)


# (environment variable, value, how to read it back from Settings, expected)
ENVIRONMENT: list[tuple[str, str, str, Any]] = [
    ("VERNIS_DATABASE_URL", "postgresql+asyncpg://vernis@db.internal/vernis", "database_url", None),
    ("VERNIS_REDIS_URL", "redis://cache.internal:6379/0", "redis_url", None),
    ("VERNIS_JWT_SECRET", "another-secret-that-is-long-enough-too", "jwt_secret", None),
    ("VERNIS_LLM_BASE_URL", "http://llm.internal:8000/v1", "llm_base_url", None),
    ("VERNIS_LLM_API_KEY", "key-123", "llm_api_key", None),
    ("VERNIS_LLM_MODEL", "qwen2.5", "llm_model", None),
    ("VERNIS_TITLE_MODEL", "qwen2.5-mini", "title_model", None),
    ("VERNIS_LLM_STALL_TIMEOUT", "12.5", "llm_stall_timeout", 12.5),
    ("VERNIS_LLM_CONNECT_TIMEOUT", "3", "llm_connect_timeout", 3.0),
    ("VERNIS_LLM_MAX_RETRIES", "5", "llm_max_retries", 5),
    ("VERNIS_RATE_LIMIT", "5/30", "rate_limit", (5, 30.0)),
    ("VERNIS_MEMBER_RATE_LIMIT", "40/120", "member_rate_limit", (40, 120.0)),
    ("VERNIS_FLOOD_LIMIT", "100/5", "flood_limit", (100, 5.0)),
    ("VERNIS_WINDOW_MESSAGES", "30", "window_messages", 30),
    ("VERNIS_ROLLOVER_MESSAGES", "70", "rollover_messages", 70),
    ("VERNIS_MAX_TOOL_ROUNDS", "3", "max_tool_rounds", 3),
    ("VERNIS_APPROVAL_TTL", "600", "approval_ttl", 600.0),
    ("VERNIS_MAX_FRAME_BYTES", "131072", "max_frame_bytes", 131072),
    ("VERNIS_MAX_SOCKETS_PER_MEMBER", "4", "max_sockets_per_member", 4),
    ("VERNIS_PING_INTERVAL", "15", "ping_interval", 15.0),
    ("VERNIS_PING_TIMEOUT", "7", "ping_timeout", 7.0),
    ("VERNIS_AUTH_CHECK_INTERVAL", "45", "auth_check_interval", 45.0),
    ("VERNIS_SHUTDOWN_GRACE", "4", "shutdown_grace", 4.0),
    ("VERNIS_LOG_LEVEL", "DEBUG", "log_level", None),
    ("VERNIS_LOG_FORMAT", "text", "log_format", None),
]


@pytest.mark.parametrize(
    ("variable", "value", "attribute", "expected"), ENVIRONMENT, ids=[row[0] for row in ENVIRONMENT]
)
def test_each_setting_is_read_from_its_environment_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, attribute: str, expected: Any
) -> None:
    """Each setting of SPEC §12 (and the README's table) takes its value from VERNIS_<NAME>."""
    monkeypatch.setenv(variable, value)
    read = getattr(load_settings(), attribute)
    if isinstance(read, RateLimit):
        read = rate(read)
    assert read == (value if expected is None else expected)


def test_defaults_match_the_specification() -> None:
    """With nothing set, every setting has the default SPEC §12 gives it."""
    settings = load_settings()
    assert settings.database_url == "sqlite+aiosqlite:///./vernis.db"
    assert settings.redis_url is None
    assert settings.allowed_origins == []
    assert settings.title_model_name == settings.chat_model
    assert settings.llm_stall_timeout == 30
    assert rate(settings.rate_limit) == (10, 60)
    assert rate(settings.member_rate_limit) == (20, 60)
    assert rate(settings.flood_limit) == (60, 10)
    assert settings.window_messages == 50
    assert settings.rollover_messages == 50
    assert settings.max_tool_rounds == 8
    assert settings.approval_ttl == 1800
    assert settings.max_frame_bytes == 65536
    assert (settings.ping_interval, settings.ping_timeout) == (20, 20)


def test_allowed_origins_split_on_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    """VERNIS_ALLOWED_ORIGINS is a comma-separated list; blanks and trailing slashes are dropped."""
    monkeypatch.setenv("VERNIS_ALLOWED_ORIGINS", "https://app.acme.test, https://admin.acme.test/ ,")
    assert load_settings().allowed_origins == ["https://app.acme.test", "https://admin.acme.test"]


def test_rate_limit_text_parses() -> None:
    """`N/SECONDS` parses into a count and a window; fractional windows are allowed."""
    assert rate(RateLimit.parse("5/30")) == (5, 30.0)
    assert rate(RateLimit.parse("1/0.5")) == (1, 0.5)


@pytest.mark.parametrize(
    ("variable", "value", "field", "hint"),
    [
        ("VERNIS_RATE_LIMIT", "ten per minute", "rate_limit", "N/SECONDS"),
        ("VERNIS_MEMBER_RATE_LIMIT", "0/60", "member_rate_limit", "N/SECONDS such as 10/60, got '0/60'"),
        ("VERNIS_MAX_FRAME_BYTES", "lots", "max_frame_bytes", "integer"),
        ("VERNIS_WINDOW_MESSAGES", "1", "window_messages", "greater than or equal to 2"),
        ("VERNIS_SHUTDOWN_GRACE", "soon", "shutdown_grace", "number"),
    ],
)
def test_bad_value_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str, hint: str
) -> None:
    """A malformed setting fails loading with an error naming the setting and what was expected."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        load_settings()
    message = str(caught.value)
    assert field in message
    assert hint in message


def test_openai_api_key_without_base_url_selects_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_API_KEY and no VERNIS_LLM_BASE_URL: OpenAI's endpoint, that key, and an OpenAI model."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    settings = load_settings()
    assert settings.llm_base_url == "https://api.openai.com/v1"
    assert settings.llm_api_key == "sk-test-123"
    assert settings.chat_model == "gpt-4o-mini"


def test_explicit_base_url_wins_over_openai_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """With VERNIS_LLM_BASE_URL set, an OPENAI_API_KEY in the environment does not redirect the model."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    monkeypatch.setenv("VERNIS_LLM_BASE_URL", "http://vllm.internal:8000/v1")
    settings = load_settings()
    assert settings.llm_base_url == "http://vllm.internal:8000/v1"
    assert settings.llm_api_key is None


def test_default_model_is_local_ollama() -> None:
    """With no model settings at all, the endpoint is a local Ollama."""
    settings = load_settings()
    assert settings.llm_base_url == DEFAULT_LLM_BASE_URL == "http://127.0.0.1:11434/v1"
    assert settings.llm_api_key is None
    assert settings.chat_model == "llama3.1"


def test_dotenv_file_in_working_directory_is_read(tmp_path: Path) -> None:
    """A `.env` file in the working directory supplies settings the environment does not set."""
    (tmp_path / ".env").write_text(
        "VERNIS_LLM_MODEL=from-dotenv\nVERNIS_RATE_LIMIT=3/9\nVERNIS_ALLOWED_ORIGINS=https://a.test,https://b.test\n"
    )
    settings = load_settings()
    assert settings.chat_model == "from-dotenv"
    assert rate(settings.rate_limit) == (3, 9.0)
    assert settings.allowed_origins == ["https://a.test", "https://b.test"]


def test_environment_wins_over_dotenv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A variable set in the environment overrides the same one in `.env`."""
    (tmp_path / ".env").write_text("VERNIS_LLM_MODEL=from-dotenv\n")
    monkeypatch.setenv("VERNIS_LLM_MODEL", "from-environment")
    assert load_settings().chat_model == "from-environment"


def test_openai_api_key_in_dotenv_selects_openai(tmp_path: Path) -> None:
    """OPENAI_API_KEY written in `.env` (as the README suggests) selects OpenAI like the environment variable."""
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv\n")
    settings = load_settings()
    assert settings.llm_base_url == "https://api.openai.com/v1"
    assert settings.llm_api_key == "sk-from-dotenv"


def test_overrides_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keyword overrides to load_settings() (what `serve --scripted-model` uses) beat the environment."""
    monkeypatch.setenv("VERNIS_LLM_MODEL", "from-environment")
    settings = load_settings(llm_model="override")
    assert settings.chat_model == "override"
    assert isinstance(settings, Settings)


def test_several_workers_without_redis_are_refused_naming_the_setting(tmp_path: Path) -> None:
    """`vernis serve --workers 2` without VERNIS_REDIS_URL exits 2 with a message naming VERNIS_REDIS_URL, before serving anything."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERNIS_")}
    env |= {"VERNIS_JWT_SECRET": "x" * 40, "VERNIS_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'v.db'}"}
    result = vernis_command("serve", "--workers", "2", "--port", "1", env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "VERNIS_REDIS_URL" in result.stderr
    assert not (tmp_path / "v.db").exists()


@pytest.mark.parametrize("variable", ["VERNIS_ADMIN_TOKEN", "VERNIS_METRICS_TOKEN"])
@pytest.mark.parametrize("value", ["", "short-token", "x" * 31, "é" * 15])
def test_bearer_tokens_shorter_than_32_bytes_are_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """An admin or metrics token shorter than 32 bytes (or empty) fails loading, naming the setting and the length asked, never the value."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        load_settings()
    message = str(caught.value)
    assert variable.removeprefix("VERNIS_").lower() in message
    assert "at least 32 bytes" in message
    if value:
        assert value not in message


@pytest.mark.parametrize("variable", ["VERNIS_ADMIN_TOKEN", "VERNIS_METRICS_TOKEN"])
def test_bearer_tokens_of_32_bytes_are_taken(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    """A token of 32 bytes (here 16 two-byte characters) is taken as it is."""
    monkeypatch.setenv(variable, "é" * 16)
    assert getattr(load_settings(), variable.removeprefix("VERNIS_").lower()) == "é" * 16
