"""What a file is, from its bytes (vernis.attachments.sniff)."""

from __future__ import annotations

import pytest

from tests.attachments.samples import EXECUTABLE, SVG, jpeg, pdf, png, png_header_only
from vernis.attachments.sniff import MAX_IMAGE_PIXELS, TextCheck, TooLarge, Unsupported, image_size, sniff


@pytest.mark.parametrize(
    ("data", "name", "media_type", "kind"),
    [
        (png(), "x.txt", "image/png", "image"),
        (jpeg(), "x", "image/jpeg", "image"),
        (b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "x.gif", "image/gif", "image"),
        (b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f\x00\x00\x00", "x", "image/webp", "image"),
        (pdf(["hello"]), "x.png", "application/pdf", "document"),
        (b"a,b\n1,2\n", "x.csv", "text/csv", "text"),
        (b"# Title\n", "x.md", "text/markdown", "text"),
        (b'{"a": 1}', "x.json", "application/json", "text"),
        ("caf\u00e9\n".encode(), "x.exe", "text/plain", "text"),
    ],
)
def test_types_come_from_the_bytes(data: bytes, name: str, media_type: str, kind: str) -> None:
    """Images and PDF are known by their magic bytes whatever the name; text by being UTF-8 throughout, its flavour by the name."""
    sniffed = sniff(data, name, complete=True)
    assert (sniffed.media_type, sniffed.kind) == (media_type, kind)


@pytest.mark.parametrize("data", [EXECUTABLE, SVG, b"\x00\x01\x02binary", b""])
def test_executables_svg_binary_and_empty_files_are_refused(data: bytes) -> None:
    """An executable, an SVG, binary bytes and an empty file are not accepted, whatever they are named."""
    with pytest.raises(Unsupported):
        sniff(data, "picture.png", complete=True)


def test_text_check_follows_a_file_split_inside_a_character() -> None:
    """A character split between two chunks is still text; a NUL byte later on is not."""
    check = TextCheck()
    encoded = "d\u00e9j\u00e0 vu".encode()
    assert check.feed(encoded[:2])
    assert check.feed(encoded[2:], final=True)
    later = TextCheck()
    assert later.feed(b"fine so far ")
    assert not later.feed(b"\x00 then binary", final=True)


def test_image_size_reads_the_header_only() -> None:
    """An image's size comes from its header; one of 40,000 x 40,000 pixels is refused without being decoded."""
    assert image_size(png(7, 5)) == (7, 5)
    with pytest.raises(TooLarge):
        image_size(png_header_only(40_000, 40_000))
    side = int(MAX_IMAGE_PIXELS**0.5) + 1
    with pytest.raises(TooLarge):
        image_size(png_header_only(side, side))
