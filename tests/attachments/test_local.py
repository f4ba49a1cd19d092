"""The local attachment directory (vernis.attachments.local)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from vernis.attachments.local import STALE_UPLOAD_SECONDS, LocalBlobStore


def stored(root: Path) -> list[str]:
    return sorted(path.name for path in root.glob("??/*"))


def partial(root: Path) -> list[str]:
    return sorted(path.name for path in (root / "tmp").iterdir())


async def test_committed_blob_is_read_back_and_stored_once(tmp_path: Path) -> None:
    """A committed upload is readable under its digest; the same bytes committed again leave one file."""
    store = LocalBlobStore(tmp_path)
    data = b"hello attachments" * 1000
    digest = hashlib.sha256(data).hexdigest()
    for _ in range(2):
        writer = await store.writer()
        await writer.write(data[:100])
        await writer.write(data[100:])
        await writer.commit(digest)
    assert b"".join([chunk async for chunk in store.read(digest, 1000)]) == data
    assert stored(tmp_path) == [digest]
    assert partial(tmp_path) == []
    await store.delete(digest)
    assert not await store.exists(digest)
    await store.delete(digest)  # a missing blob is no error


async def test_aborted_upload_leaves_nothing(tmp_path: Path) -> None:
    """An aborted upload's partial file is removed and nothing is stored."""
    store = LocalBlobStore(tmp_path)
    writer = await store.writer()
    await writer.write(b"partial")
    assert len(partial(tmp_path)) == 1
    await writer.abort()
    assert partial(tmp_path) == []
    assert stored(tmp_path) == []


def test_stale_partial_uploads_are_swept_at_start_and_fresh_ones_kept(tmp_path: Path) -> None:
    """Partial uploads a dead process left an hour ago are removed when the store opens; a fresh one (another instance's) stays."""
    (tmp_path / "tmp").mkdir()
    stale, fresh = tmp_path / "tmp" / "old.part", tmp_path / "tmp" / "new.part"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    old = time.time() - STALE_UPLOAD_SECONDS - 60
    os.utime(stale, (old, old))
    LocalBlobStore(tmp_path)
    assert partial(tmp_path) == ["new.part"]


async def test_keys_are_only_digests(tmp_path: Path) -> None:
    """A key that is not a SHA-256 in hex (a path, for one) is refused."""
    store = LocalBlobStore(tmp_path)
    with pytest.raises(ValueError, match="SHA-256"):
        await store.delete("../../etc/passwd")
