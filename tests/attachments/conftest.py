"""An S3-compatible server of the tests' own: moto's server mode, a real HTTP server in a process of
its own on a free port (no mocked client: aiobotocore talks to it over loopback)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from aiobotocore.session import get_session

from tests.utils import free_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "vernis-test",
    "AWS_SECRET_ACCESS_KEY": "vernis-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class S3Server:
    url: str


def _start() -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    assert binary is not None, "moto_server is not installed (moto[server], a dev dependency)"
    for _ in range(5):
        port = free_port()
        process = subprocess.Popen(
            [binary, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/moto-api/", timeout=0.5).status_code == 200:
                    return process, url
            except httpx.TransportError:
                time.sleep(0.05)
        process.kill()
        process.wait()
    raise AssertionError("moto_server did not start on a free port after 5 tries")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    process, url = _start()
    try:
        yield S3Server(url)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
async def s3_bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new bucket on the S3 server, with the AWS credentials set in the environment."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    bucket = f"vernis-{uuid.uuid4().hex[:12]}"
    async with get_session().create_client("s3", endpoint_url=s3_server.url) as client:
        await client.create_bucket(Bucket=bucket)
    return bucket
