"""The app's resources (`vernis.runtime.open_services`, entered by the lifespan): a start that fails
half-way closes what it had opened, and a clean stop closes everything."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.scripted import ScriptedServer
from tests.fixtures.server import make_settings
from tests.utils import free_port
from vernis.app import create_app
from vernis.config import ConfigError, HostConfig
from vernis.runtime import open_services
from vernis.settings import Settings
from vernis.tools import Toolkit, ToolkitEnv
from vernis.tools.catalog import Catalog
from vernis.tools.toolkit import ToolkitError
from vernis.ws.encoder import encode

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


class Recorder:
    """A toolkit whose start-up opens a real file and whose shutdown closes it, noting both."""

    def __init__(self, tmp_path: Path, name: str = "recorder", *, fail: bool = False) -> None:
        self.path = tmp_path / f"{name}.log"
        self.opened: list[Any] = []
        self.closed: list[Any] = []
        self.fail = fail
        self.toolkit: Toolkit[Any] = Toolkit(name, startup=self._startup, shutdown=self._shutdown)

    async def _startup(self, env: ToolkitEnv) -> Any:
        if self.fail:
            raise RuntimeError("the toolkit's backend is down")
        handle = self.path.open("a")
        self.opened.append(handle)
        return handle

    async def _shutdown(self, handle: Any) -> None:
        handle.close()
        self.closed.append(handle)


def open_files_under(directory: Path) -> list[str]:
    """The files of `directory` this process holds open (the SQLite database and its journals)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


def settings_for(database_url: str, scripted: ScriptedServer, **overrides: Any) -> Settings:
    return make_settings(database_url, scripted, demo=False, **overrides)


def tasks_left() -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks() if task is not asyncio.current_task()}


async def test_clean_stop_closes_the_database_the_toolkits_and_the_tasks(
    migrated_database_url: str, scripted: ScriptedServer, tmp_path: Path
) -> None:
    """A start and a stop: the database is held open while running and released after, toolkits shut down, no task left."""
    database = Path(migrated_database_url.removeprefix("sqlite+aiosqlite:///")).parent
    recorder = Recorder(tmp_path)
    before = tasks_left()
    settings = settings_for(migrated_database_url, scripted)
    async with open_services(settings, HostConfig(), Catalog([recorder.toolkit]), encode=encode) as services:
        assert open_files_under(database), "the check below must be able to see an open database"
        assert recorder.opened
        assert not recorder.closed
        assert "hub upkeep" in tasks_left()
        assert services.answers.in_flight == 0
    assert recorder.closed == recorder.opened
    assert open_files_under(database) == []
    assert tasks_left() == before


async def test_redis_down_after_the_database_opened_releases_what_was_opened(
    migrated_database_url: str, scripted: ScriptedServer, tmp_path: Path
) -> None:
    """Redis unreachable once the database and the toolkits are open: the start fails and closes them all."""
    database = Path(migrated_database_url.removeprefix("sqlite+aiosqlite:///")).parent
    recorder = Recorder(tmp_path)
    before = tasks_left()
    settings = settings_for(migrated_database_url, scripted, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(ConfigError, match=r"VERNIS_REDIS_URL: Redis at 127\.0\.0\.1:\d+ cannot be reached"):
        async with open_services(settings, HostConfig(), Catalog([recorder.toolkit]), encode=encode):
            pytest.fail("the start must not succeed without Redis")
    assert recorder.opened, "the toolkit had started before Redis was needed"
    assert recorder.closed == recorder.opened
    assert open_files_under(database) == []
    assert tasks_left() == before


async def test_a_toolkit_failing_to_start_stops_the_ones_started_and_closes_the_database(
    migrated_database_url: str, scripted: ScriptedServer, tmp_path: Path
) -> None:
    """A toolkit's start-up hook raising, through the app's lifespan: the toolkit started before it is shut down, the database released."""
    database = Path(migrated_database_url.removeprefix("sqlite+aiosqlite:///")).parent
    first, broken = Recorder(tmp_path, "first"), Recorder(tmp_path, "broken", fail=True)
    settings = settings_for(migrated_database_url, scripted)
    app = create_app(settings, catalog=Catalog([first.toolkit, broken.toolkit]))
    starlette = app.app
    with pytest.raises(ToolkitError, match="'broken' failed to start"):
        async with starlette.router.lifespan_context(starlette):
            pytest.fail("the start must not succeed with a broken toolkit")
    assert first.opened
    assert first.closed == first.opened
    assert open_files_under(database) == []
