"""The blob store `VERNIS_ATTACHMENT_STORE` names: a directory (default: `attachments/` in the data
directory) or `s3://bucket/prefix`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from vernis.attachments.base import BlobStore
from vernis.attachments.local import LocalBlobStore
from vernis.settings import Settings

__all__ = ["S3_SCHEME", "is_shared_store", "open_blob_store", "store_location"]

S3_SCHEME = "s3://"


def store_location(settings: Settings) -> str:
    return settings.attachment_store or str(settings.data_dir / "attachments")


def is_shared_store(settings: Settings) -> bool:
    """Whether instances on several machines see the same attachments (S3: yes; a directory: no)."""
    return store_location(settings).startswith(S3_SCHEME)


@asynccontextmanager
async def open_blob_store(settings: Settings) -> AsyncIterator[BlobStore]:
    location = store_location(settings)
    if location.startswith(S3_SCHEME):
        # Here, not at the top: botocore takes a while to import, for deployments without S3.
        from vernis.attachments.s3 import S3BlobStore

        async with S3BlobStore.open(location, endpoint_url=settings.attachment_s3_endpoint) as store:
            yield store
        return
    local = LocalBlobStore(Path(location))
    try:
        yield local
    finally:
        await local.aclose()
