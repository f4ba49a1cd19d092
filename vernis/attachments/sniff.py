"""What a file is, from its bytes (SPEC §21): never from its name or the client's content type.

Images (PNG, JPEG, GIF, WebP) and PDF are recognised by their magic bytes (puremagic). Text has no
magic: a file is text when all of it is UTF-8 without NUL or other control characters
(`TextCheck` follows the upload chunk by chunk); only then does its name choose among plain text,
CSV, Markdown and JSON. SVG is refused (it can hold scripts), and so is anything else.
"""

from __future__ import annotations

import codecs
import io
import re
import warnings
from dataclasses import dataclass
from typing import Literal

import puremagic
from PIL import Image

__all__ = [
    "MAX_IMAGE_PIXELS",
    "SNIFF_BYTES",
    "Kind",
    "Sniffed",
    "TextCheck",
    "TooLarge",
    "Unsupported",
    "image_size",
    "sniff",
]

Kind = Literal["image", "document", "text"]

# How much of a file's start is read before its type is decided: enough for an image's size (a
# JPEG's frame header may follow its metadata), small enough to hold for every upload at once.
SNIFF_BYTES = 256 * 1024
# Larger images are refused, their size read from their header: never decoded whole.
MAX_IMAGE_PIXELS = 50_000_000

_BINARY: dict[str, Kind] = {
    "image/png": "image",
    "image/jpeg": "image",
    "image/gif": "image",
    "image/webp": "image",
    "application/pdf": "document",
}
_TEXT_BY_SUFFIX = {
    ".csv": "text/csv",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".json": "application/json",
}
# Control characters text never holds (tab, line feed, form feed and carriage return are fine).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_SVG = re.compile(rb"<svg[\s>]|<!doctype\s+svg", re.IGNORECASE)


class Unsupported(ValueError):
    """Not a type attachments may have (HTTP 415); the message says what was found, for the user."""


class TooLarge(ValueError):
    """An image with more pixels than `MAX_IMAGE_PIXELS` (HTTP 413)."""


@dataclass(frozen=True, slots=True)
class Sniffed:
    media_type: str
    kind: Kind


def _magic(head: bytes) -> str | None:
    try:
        found: str = puremagic.from_string(head, mime=True)
    except puremagic.PureError:
        return None
    return found or None


def sniff(head: bytes, name: str, *, complete: bool) -> Sniffed:
    """The type of a file that starts with `head` (all of it when `complete`), else `Unsupported`.
    A text type still needs `TextCheck` over the whole file."""
    if not head:
        raise Unsupported("The file is empty.")
    found = _magic(head)
    if found in _BINARY:
        return Sniffed(found, _BINARY[found])
    if found == "image/svg+xml" or _SVG.search(head[:4096]):
        raise Unsupported("SVG images are not accepted (they can hold scripts); send a PNG instead.")
    text = TextCheck()
    if text.feed(head, final=complete):
        lowered = name.lower()
        suffix = lowered[lowered.rfind(".") :] if "." in lowered else ""
        return Sniffed(_TEXT_BY_SUFFIX.get(suffix, "text/plain"), "text")
    raise Unsupported(
        "This kind of file is not accepted: send an image (PNG, JPEG, GIF, WebP), a PDF, "
        "or a text file (plain text, CSV, Markdown, JSON)."
    )


class TextCheck:
    """Follows a file chunk by chunk: is it all UTF-8 text?"""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.ok = True

    def feed(self, chunk: bytes, *, final: bool = False) -> bool:
        if self.ok:
            try:
                decoded = self._decoder.decode(chunk, final)
            except UnicodeDecodeError:
                self.ok = False
            else:
                self.ok = _CONTROL.search(decoded) is None
        return self.ok


def image_size(head: bytes) -> tuple[int, int] | None:
    """An image's width and height read from its header (never decoded), else None. `TooLarge` past
    `MAX_IMAGE_PIXELS`."""
    try:
        with warnings.catch_warnings():
            # Pillow warns of a large image before refusing a huge one: the check below decides.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(head)) as image:
                width, height = image.size
    except Image.DecompressionBombError:
        raise TooLarge(
            f"The image has too many pixels: at most {MAX_IMAGE_PIXELS // 1_000_000} megapixels."
        ) from None
    except (OSError, SyntaxError, ValueError):
        return None
    if width * height > MAX_IMAGE_PIXELS:
        raise TooLarge(
            f"The image is {width:,} by {height:,} pixels: "
            f"at most {MAX_IMAGE_PIXELS // 1_000_000} megapixels."
        )
    return width, height
