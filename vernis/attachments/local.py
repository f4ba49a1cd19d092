"""Attachments in a local directory (the default): `<root>/<first two hex digits>/<digest>`.

Uploads are written to `<root>/tmp/` and renamed into place on commit (one rename: a reader never
sees half a blob). Only for one instance, or several on one machine: instances on other machines
need S3 (`vernis check-config` says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from vernis.attachments.base import check_digest

__all__ = ["STALE_UPLOAD_SECONDS", "LocalBlobStore"]

# An upload not written to for this long was left by a process that died.
STALE_UPLOAD_SECONDS = 3600.0


class LocalBlobWriter:
    def __init__(self, root: Path, temporary: Path, file: BinaryIO) -> None:
        self._root = root
        self._temporary = temporary
        self._file = file

    async def write(self, chunk: bytes) -> None:
        await asyncio.to_thread(self._file.write, chunk)

    async def commit(self, digest: str) -> None:
        target = self._root / check_digest(digest)[:2] / digest

        def place() -> None:
            self._file.close()
            if target.exists():
                self._temporary.unlink()
                return
            target.parent.mkdir(exist_ok=True)
            os.replace(self._temporary, target)

        await asyncio.to_thread(place)

    async def abort(self) -> None:
        def forget() -> None:
            self._file.close()
            self._temporary.unlink(missing_ok=True)

        # Even when the upload was cancelled: a half-written file must not stay.
        await asyncio.shield(asyncio.to_thread(forget))


class LocalBlobStore:
    shared = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self.temporary = root / "tmp"
        self.temporary.mkdir(parents=True, exist_ok=True)
        self.sweep()

    def _path(self, digest: str) -> Path:
        return self.root / check_digest(digest)[:2] / digest

    async def writer(self) -> LocalBlobWriter:
        path = self.temporary / f"{uuid.uuid4().hex}.part"
        file = await asyncio.to_thread(open, path, "xb")
        return LocalBlobWriter(self.root, path, file)

    async def read(self, digest: str, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        file = await asyncio.to_thread(open, self._path(digest), "rb")
        try:
            while chunk := await asyncio.to_thread(file.read, chunk_size):
                yield chunk
        finally:
            file.close()

    async def exists(self, digest: str) -> bool:
        return await asyncio.to_thread(self._path(digest).exists)

    async def delete(self, digest: str) -> None:
        await asyncio.to_thread(self._path(digest).unlink, missing_ok=True)

    async def aclose(self) -> None:
        return None

    def sweep(self, older_than: float = STALE_UPLOAD_SECONDS) -> int:
        """Remove the uploads a killed process left half-way (those not written to for
        `older_than` seconds: another instance sharing the directory may be writing the others)."""
        removed = 0
        limit = time.time() - older_than
        for leftover in self.temporary.glob("*.part"):
            with contextlib.suppress(OSError):
                if leftover.stat().st_mtime < limit:
                    leftover.unlink()
                    removed += 1
        return removed
