"""One upload, streamed from the request body to the blob store (SPEC §21): never held whole.

The multipart body is parsed as it arrives (python-multipart's push parser); the file part's first
`SNIFF_BYTES` decide its type (`vernis.attachments.sniff`), then every chunk goes to a `BlobWriter`
while its SHA-256 and size are counted. A refusal (too large, over the quota, not an accepted type)
aborts the writer: nothing is stored; neither is anything of an upload whose client went away.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from vernis.attachments.base import BlobStore, BlobWriter
from vernis.attachments.sniff import (
    SNIFF_BYTES,
    Kind,
    Sniffed,
    TextCheck,
    TooLarge,
    Unsupported,
    image_size,
    sniff,
)

__all__ = ["MAX_NAME_CHARS", "Received", "UploadRefused", "receive", "safe_name"]

MAX_NAME_CHARS = 255
_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\]")


class UploadRefused(Exception):
    """The upload is refused with HTTP `status` and an error `code`; `message` is for the user,
    `fields` go into the error object too (the quota's)."""

    def __init__(self, status: int, code: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields


@dataclass(frozen=True, slots=True)
class Received:
    name: str
    media_type: str
    kind: Kind
    size: int
    digest: str


def safe_name(raw: str) -> str:
    """A file name to store and show: its last path segment, without control characters, at most
    `MAX_NAME_CHARS`; "attachment" when nothing is left."""
    name = unicodedata.normalize("NFC", raw).replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE.sub("", name).strip().strip(".") or "attachment"
    if len(name) > MAX_NAME_CHARS:
        stem, dot, suffix = name.rpartition(".")
        name = (
            f"{stem[: MAX_NAME_CHARS - len(suffix) - 1]}.{suffix}"
            if dot and len(suffix) < 16
            else name[:MAX_NAME_CHARS]
        )
    return name


@dataclass
class _Part:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    filename: str | None = None


class _Parser:
    """python-multipart's callbacks, turned into a list of what happened in the last chunk."""

    def __init__(self, boundary: bytes) -> None:
        self.events: list[tuple[str, bytes]] = []
        self._field = b""
        self._value = b""
        self.parser = MultipartParser(
            boundary,
            {
                "on_part_begin": lambda: self.events.append(("begin", b"")),
                "on_header_field": self._on_field,
                "on_header_value": self._on_value,
                "on_header_end": self._on_header_end,
                "on_part_data": lambda data, start, end: self.events.append(("data", data[start:end])),
                "on_part_end": lambda: self.events.append(("end", b"")),
            },
        )

    def _on_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _on_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _on_header_end(self) -> None:
        self.events.append(("header", self._field.lower() + b"\x00" + self._value))
        self._field = self._value = b""


async def receive(
    body: AsyncIterator[bytes],
    content_type: str,
    store: BlobStore,
    *,
    max_bytes: int,
    allowance: int | None,
) -> Received:
    """Read the multipart `body` and store its one file part (field `file`). `allowance`: how many
    more bytes the member's quota lets in (None: no quota). Raises `UploadRefused`; anything the
    body raises (the client went away) leaves nothing stored and goes on up."""
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise UploadRefused(
            400, "invalid_request", "Send the file as multipart/form-data, in a field named file."
        )
    parser = _Parser(boundary)
    upload = _Upload(store, max_bytes=max_bytes, allowance=allowance)
    part: _Part | None = None
    try:
        async for chunk in body:
            try:
                parser.parser.write(chunk)
            except MultipartParseError:
                raise UploadRefused(400, "invalid_request", "The multipart body is malformed.") from None
            events, parser.events = parser.events, []
            for what, data in events:
                if what == "begin":
                    part = _Part()
                elif what == "header" and part is not None:
                    name, _, value = data.partition(b"\x00")
                    part.headers[name] = value
                    if name == b"content-disposition":
                        _, disposition = parse_options_header(value)
                        if disposition.get(b"name") == b"file" and b"filename" in disposition:
                            part.filename = disposition[b"filename"].decode("utf-8", "replace")
                elif part is not None and part.filename is not None:
                    if upload.done:
                        raise UploadRefused(400, "invalid_request", "Send one file per upload.")
                    if what == "data":
                        await upload.feed(part.filename, data)
                    elif what == "end":
                        await upload.finish(part.filename)
        parser.parser.finalize()
        if not upload.done:
            raise UploadRefused(400, "invalid_request", "No file: send it in a multipart field named file.")
        # Kept only once the whole body has been read and found right.
        return await upload.commit()
    except BaseException:
        await upload.abort()
        raise


class _Upload:
    def __init__(self, store: BlobStore, *, max_bytes: int, allowance: int | None) -> None:
        self._store = store
        self._max_bytes = max_bytes
        self._allowance = allowance
        self._head = bytearray()
        self._sniffed: Sniffed | None = None
        self._writer: BlobWriter | None = None
        self._hash = hashlib.sha256()
        self._text: TextCheck | None = None
        self._received: Received | None = None
        self.size = 0
        self.done = False

    async def feed(self, name: str, data: bytes) -> None:
        self.size += len(data)
        self._check_size()
        self._hash.update(data)
        if self._writer is None:
            self._head += data
            if len(self._head) >= SNIFF_BYTES:
                await self._start(name, complete=False)
            return
        if self._text is not None and not self._text.feed(data):
            raise _unsupported_text()
        await self._writer.write(data)

    def _check_size(self) -> None:
        if self.size > self._max_bytes:
            raise UploadRefused(
                413,
                "too_large",
                f"The file is larger than {_mib(self._max_bytes)}, the most one upload may be.",
            )
        if self._allowance is not None and self.size > self._allowance:
            raise UploadRefused(429, "quota_exceeded", "")

    async def _start(self, name: str, *, complete: bool) -> None:
        head = bytes(self._head)
        self._head = bytearray()
        try:
            sniffed = sniff(head, name, complete=complete)
            if sniffed.kind == "image" and image_size(head) is None:
                raise Unsupported("The image could not be read.")
        except Unsupported as exc:
            raise UploadRefused(415, "unsupported_media_type", str(exc)) from None
        except TooLarge as exc:
            raise UploadRefused(413, "too_large", str(exc)) from None
        self._sniffed = sniffed
        if sniffed.kind == "text":
            self._text = TextCheck()
            self._text.feed(head)
        self._writer = await self._store.writer()
        await self._writer.write(head)

    async def finish(self, name: str) -> None:
        if self._writer is None:
            await self._start(name, complete=True)
        if self._text is not None and not self._text.feed(b"", final=True):
            raise _unsupported_text()
        assert self._sniffed is not None
        self.done = True
        self._received = Received(
            safe_name(name), self._sniffed.media_type, self._sniffed.kind, self.size, self._hash.hexdigest()
        )

    async def commit(self) -> Received:
        assert self._writer is not None
        assert self._received is not None
        writer, self._writer = self._writer, None
        await writer.commit(self._received.digest)
        return self._received

    async def abort(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await writer.abort()


def _unsupported_text() -> UploadRefused:
    return UploadRefused(
        415,
        "unsupported_media_type",
        "This file is not text throughout (it holds binary data): it is not accepted.",
    )


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB" if size >= 1024 * 1024 else f"{size:,} bytes"
