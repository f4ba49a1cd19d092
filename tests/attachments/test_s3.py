"""Attachments on S3-compatible storage (vernis.attachments.s3), against a real S3 server process
(moto's server mode), directly and through a running Vernis."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import httpx
import pytest
from aiobotocore.session import get_session

from tests.attachments.conftest import S3Server
from tests.attachments.samples import EXECUTABLE, pdf, png
from tests.fixtures.server import VernisFactory
from vernis.attachments.s3 import S3BlobStore


async def object_keys(s3_server: S3Server, bucket: str) -> list[str]:
    async with get_session().create_client("s3", endpoint_url=s3_server.url) as client:
        listed = await client.list_objects_v2(Bucket=bucket)
    return sorted(item["Key"] for item in listed.get("Contents", []))


@pytest.fixture
async def s3_store(s3_server: S3Server, s3_bucket: str) -> AsyncIterator[S3BlobStore]:
    async with S3BlobStore.open(f"s3://{s3_bucket}/files/", endpoint_url=s3_server.url) as store:
        yield store


async def test_blob_is_put_under_its_digest_read_back_and_deleted(
    s3_store: S3BlobStore, s3_server: S3Server, s3_bucket: str
) -> None:
    """A committed upload becomes the object prefix/ab/<digest>; it reads back whole, the same bytes again add nothing, and delete removes it."""
    data = bytes(range(256)) * 2000
    digest = hashlib.sha256(data).hexdigest()
    for _ in range(2):
        writer = await s3_store.writer()
        await writer.write(data[:1000])
        await writer.write(data[1000:])
        await writer.commit(digest)
    assert await object_keys(s3_server, s3_bucket) == [f"files/{digest[:2]}/{digest}"]
    assert b"".join([chunk async for chunk in s3_store.read(digest, 4096)]) == data
    await s3_store.delete(digest)
    assert not await s3_store.exists(digest)
    with pytest.raises(FileNotFoundError):
        [chunk async for chunk in s3_store.read(digest)]


async def test_aborted_upload_never_reaches_the_bucket(
    s3_store: S3BlobStore, s3_server: S3Server, s3_bucket: str
) -> None:
    """An aborted upload puts nothing in the bucket."""
    writer = await s3_store.writer()
    await writer.write(b"half an upload")
    await writer.abort()
    assert await object_keys(s3_server, s3_bucket) == []


async def test_vernis_stores_serves_and_deletes_attachments_on_s3(
    vernis_factory: VernisFactory, s3_server: S3Server, s3_bucket: str
) -> None:
    """With VERNIS_ATTACHMENT_STORE=s3://bucket/prefix a running Vernis puts uploads in the bucket (the same file once), serves them back, refuses a disguised executable without writing, and the admin erase deletes the objects."""
    admin_token = "s3-attachments-admin-token-long-enough"
    image, document = png(9, 9), pdf(["Stored on S3"])
    async with (
        vernis_factory(
            attachment_store=f"s3://{s3_bucket}/vernis",
            attachment_s3_endpoint=s3_server.url,
            admin_token=admin_token,
        ) as vernis,
        httpx.AsyncClient(base_url=vernis.http_url) as http,
    ):
        auth = {"Authorization": f"Bearer {vernis.token()}"}

        async def upload(name: str, data: bytes) -> httpx.Response:
            return await http.post("/api/assistant/attachments", headers=auth, files={"file": (name, data)})

        first = (await upload("a.png", image)).json()
        second = (await upload("b.png", image)).json()
        sent_pdf = (await upload("doc.pdf", document)).json()
        assert (await upload("c.png", EXECUTABLE)).status_code == 415
        digests = sorted(hashlib.sha256(data).hexdigest() for data in (image, document))
        assert await object_keys(s3_server, s3_bucket) == sorted(f"vernis/{d[:2]}/{d}" for d in digests)
        for sent, data in ((first, image), (second, image), (sent_pdf, document)):
            fetched = await http.get(f"/api/assistant/attachments/{sent['attachment_id']}", headers=auth)
            assert fetched.content == data
        async with vernis.opened() as client:
            await client.send("user_message", content="Read it", attachments=[sent_pdf["attachment_id"]])
            await client.until("assistant_end")
        request = [body for body in vernis.scripted.requests if body["model"] == vernis.settings.llm_model][
            -1
        ]
        assert "Stored on S3" in str(request["messages"][-1]["content"])
        erased = await http.delete(
            "/api/admin/members/conversations",
            params={"org": "acme", "sub": "member@acme.test"},
            headers={"Authorization": f"Bearer {admin_token}"},
        )
        assert erased.json()["attachments"] == 3
    assert await object_keys(s3_server, s3_bucket) == []
