"""Attachments (SPEC §21): files a member uploads and sends with a message.

    base.py      the blob store's interface (content-addressed bytes)
    local.py     a local directory (the default)
    s3.py        S3-compatible storage (`s3://bucket/prefix`)
    sniff.py     what a file is, from its bytes
    upload.py    one upload, streamed from the request body to the store
    extract.py   a PDF's or a text file's text, within limits
    service.py   the rows, their links to messages, and what the model receives

`open_blob_store` opens the store `VERNIS_ATTACHMENT_STORE` names.
"""

from vernis.attachments.base import BlobStore, BlobWriter
from vernis.attachments.service import (
    MAX_ATTACHMENTS,
    AttachedContent,
    AttachmentInfo,
    AttachmentService,
    OverQuota,
    with_attachments,
)
from vernis.attachments.stores import is_shared_store, open_blob_store
from vernis.attachments.upload import Received, UploadRefused, receive

__all__ = [
    "MAX_ATTACHMENTS",
    "AttachedContent",
    "AttachmentInfo",
    "AttachmentService",
    "BlobStore",
    "BlobWriter",
    "OverQuota",
    "Received",
    "UploadRefused",
    "is_shared_store",
    "open_blob_store",
    "receive",
    "with_attachments",
]
