"""Where attachments' bytes live: one small interface, a backend per file beside it.

    BlobStore        local.LocalBlobStore (a directory, the default)
                     s3.S3BlobStore (`s3://bucket/prefix` on any S3-compatible store)

Blobs are content-addressed: a blob's key is the SHA-256 of its bytes (`digest`, 64 hex digits), so
the same file uploaded twice is stored once. An upload is written to a `BlobWriter` first (a
temporary file or object that nothing reads); `commit(digest)` puts it in place, `abort()` leaves
nothing behind. Which rows name a blob is the database's business: the store only keeps bytes.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Protocol

__all__ = ["DIGEST", "BlobStore", "BlobWriter", "check_digest"]

DIGEST = re.compile(r"[0-9a-f]{64}")


def check_digest(digest: str) -> str:
    """`digest` when it is a SHA-256 in hex, else ValueError (a key never comes from elsewhere)."""
    if not DIGEST.fullmatch(digest):
        raise ValueError(f"not a SHA-256 digest: {digest!r}")
    return digest


class BlobWriter(Protocol):
    """One upload on its way in. Exactly one of `commit` and `abort` ends it."""

    async def write(self, chunk: bytes) -> None: ...

    async def commit(self, digest: str) -> None:
        """Keep what was written as the blob `digest` (when that blob exists already: drop it)."""
        ...

    async def abort(self) -> None:
        """Forget what was written; nothing of it stays."""
        ...


class BlobStore(Protocol):
    #: Whether instances on other machines see the same blobs (a local directory: no).
    shared: bool

    async def writer(self) -> BlobWriter: ...

    def read(self, digest: str, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        """The blob's bytes in chunks; `FileNotFoundError` when there is no such blob."""
        ...

    async def exists(self, digest: str) -> bool: ...

    async def delete(self, digest: str) -> None:
        """Remove the blob; a missing one is no error."""
        ...

    async def aclose(self) -> None: ...
