"""Attachments on S3-compatible storage (`VERNIS_ATTACHMENT_STORE=s3://bucket/prefix`): the store
several instances share. Blobs are objects `<prefix>/<first two hex digits>/<digest>`.

aiobotocore is the client: credentials and region come from the usual `AWS_*` variables (or an
instance role), the server from `VERNIS_ATTACHMENT_S3_ENDPOINT` (MinIO, Ceph, R2...) or
`AWS_ENDPOINT_URL_S3`. An upload is spooled to a local temporary file while it arrives (its digest,
the object's key, is known only at its end), then put in one request streamed from that file; an
aborted one never reaches the bucket.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO, TYPE_CHECKING, Any

from aiobotocore.session import get_session
from botocore.exceptions import ClientError

from vernis.attachments.base import check_digest

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

__all__ = ["S3BlobStore"]

_MISSING = {"404", "NoSuchKey", "NotFound"}


def _missing(exc: ClientError) -> bool:
    return str(exc.response.get("Error", {}).get("Code")) in _MISSING


class S3BlobWriter:
    def __init__(self, store: S3BlobStore, spool: IO[bytes]) -> None:
        self._store = store
        self._spool = spool

    async def write(self, chunk: bytes) -> None:
        await asyncio.to_thread(self._spool.write, chunk)

    async def commit(self, digest: str) -> None:
        try:
            if not await self._store.exists(digest):
                await asyncio.to_thread(self._spool.seek, 0)
                await self._store.client.put_object(
                    Bucket=self._store.bucket, Key=self._store.key(digest), Body=self._spool
                )
        finally:
            self._spool.close()

    async def abort(self) -> None:
        self._spool.close()


class S3BlobStore:
    shared = True

    def __init__(self, client: S3Client, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    @classmethod
    @asynccontextmanager
    async def open(cls, location: str, *, endpoint_url: str | None = None) -> AsyncIterator[S3BlobStore]:
        """The store at `s3://bucket/prefix`; its client is closed on the way out."""
        bucket, _, prefix = location.removeprefix("s3://").partition("/")
        if not bucket:
            raise ValueError(f"{location!r} names no bucket: s3://bucket/prefix")
        session = get_session()
        options: dict[str, Any] = {} if endpoint_url is None else {"endpoint_url": endpoint_url}
        async with session.create_client("s3", **options) as client:
            yield cls(client, bucket, prefix.strip("/"))

    def key(self, digest: str) -> str:
        name = f"{check_digest(digest)[:2]}/{digest}"
        return f"{self.prefix}/{name}" if self.prefix else name

    async def writer(self) -> S3BlobWriter:
        spool: IO[bytes] = await asyncio.to_thread(tempfile.TemporaryFile, "w+b", prefix="vernis-upload-")
        return S3BlobWriter(self, spool)

    async def read(self, digest: str, chunk_size: int = 65536) -> AsyncIterator[bytes]:
        try:
            response = await self.client.get_object(Bucket=self.bucket, Key=self.key(digest))
        except ClientError as exc:
            if _missing(exc):
                raise FileNotFoundError(digest) from None
            raise
        async with response["Body"] as body:
            while chunk := await body.read(chunk_size):
                yield chunk

    async def exists(self, digest: str) -> bool:
        try:
            await self.client.head_object(Bucket=self.bucket, Key=self.key(digest))
        except ClientError as exc:
            if _missing(exc):
                return False
            raise
        return True

    async def delete(self, digest: str) -> None:
        await self.client.delete_object(Bucket=self.bucket, Key=self.key(digest))

    async def aclose(self) -> None:
        return None
