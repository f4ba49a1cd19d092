"""Files for the attachment tests, made here from their formats' specifications (no fixtures on disk)."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def png(width: int = 4, height: int = 3, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A real PNG image, drawn by Pillow."""
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, "PNG")
    return buffer.getvalue()


def jpeg(width: int = 8, height: int = 8) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 200)).save(buffer, "JPEG")
    return buffer.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims `width` x `height` pixels, with one tiny compressed row: decoding it
    whole would need gigabytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def pdf(pages: list[str], *, javascript: str | None = None, repeat_pages: int = 1) -> bytes:
    """A PDF with one page per text in `pages` (Helvetica, one line each), with a correct xref table.
    `javascript`: a document-level script run on open (PDF readers with scripting run it).
    `repeat_pages`: the page tree lists the pages that many times over (a 100,000-page PDF in a few
    hundred kilobytes)."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below
    tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    page_ids = []
    for text in pages:
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")
        stream = b"BT /F1 12 Tf 72 720 Td (" + escaped + b") Tj ET"
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        page_ids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (tree, content, font)
            )
        )
    kids = b" ".join(b"%d 0 R" % page for page in page_ids) + b" "
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        kids * repeat_pages,
        len(page_ids) * repeat_pages,
    )
    extra = b""
    if javascript is not None:
        script = add(b"<< /S /JavaScript /JS (" + javascript.encode("latin-1") + b") >>")
        extra = b" /OpenAction %d 0 R /Names << /JavaScript << /Names [(run) %d 0 R] >> >>" % (script, script)
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R%s >>" % (tree, extra)
    return pdf_of_objects(objects, root=catalog)


# An x86-64 Linux executable's first bytes (ELF header), then code-like bytes.
EXECUTABLE = (
    b"\x7fELF\x02\x01\x01\x00" + bytes(8) + b"\x02\x00\x3e\x00\x01\x00\x00\x00" + bytes(range(256)) * 4
)

SVG = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>\n'


def pdf_with_stream(stream: bytes) -> bytes:
    """A one-page PDF whose content stream is `stream`, FlateDecode-compressed as given."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    return pdf_of_objects(objects)


def zlib_bomb(megabytes: int) -> bytes:
    """`megabytes` MiB of zeros, compressed (about a thousandth of that)."""
    compressor = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    return b"".join(compressor.compress(chunk) for _ in range(megabytes)) + compressor.flush()


def pdf_of_objects(objects: list[bytes], *, root: int = 1) -> bytes:
    """A PDF of `objects`, numbered from 1 (object `root` is the catalog), with a correct xref table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    out.write(
        b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, root, xref)
    )
    return out.getvalue()


_HELVETICA = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
_PAGE_CONTENT = b"<< /Length 37 >>\nstream\nBT /F1 12 Tf 72 720 Td (page) Tj ET\nendstream"


def pdf_of_distinct_pages(count: int) -> bytes:
    """A PDF of `count` pages that each have a page object of their own (`pdf(repeat_pages=...)` lists
    one page object many times over), all showing "page" in a font and on a media box they inherit
    from the page tree's root: 100,000 pages in about 10 MB, the most one upload may be by default."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", _HELVETICA, _PAGE_CONTENT]
    first = len(objects) + 1
    objects += [b"<< /Type /Page /Parent 2 0 R /Contents 4 0 R >>"] * count
    kids = b" ".join(b"%d 0 R" % number for number in range(first, first + count))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d /MediaBox [0 0 612 792] %s >>" % (
        kids,
        count,
        b"/Resources << /Font << /F1 3 0 R >> >>",
    )
    return pdf_of_objects(objects)


def pdf_with_page_tree_cycle() -> bytes:
    """A PDF whose page tree loops: the root's second kid is a /Pages node whose /Kids lists a page,
    then the root again."""
    return pdf_of_objects(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R 5 0 R] /Count 3 /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 6 0 R >> >> >>",
            b"<< /Type /Page /Parent 2 0 R /Contents 4 0 R >>",
            _PAGE_CONTENT,
            b"<< /Type /Pages /Parent 2 0 R /Kids [3 0 R 2 0 R] /Count 2 >>",
            _HELVETICA,
        ]
    )


def pdf_with_nested_page_tree(depth: int) -> bytes:
    """A one-page PDF whose page lies `depth` /Pages nodes down its page tree. The page shows "page" in
    a font given on the tree's root only, whose encoding draws "p" as "X": its text is "Xage" only when
    the font is passed down the tree (the page has no /Parent, so only a walk of the tree does it)."""
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding << /Differences [112 /X] >> >>"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        number = len(objects) + 1
        inherited = b"/MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >> " % (depth + 4)
        objects.append(
            b"<< /Type /Pages /Kids [%d 0 R] /Count 1 %s>>" % (number + 1, inherited if level == 0 else b"")
        )
    objects.append(b"<< /Type /Page /Contents %d 0 R >>" % (depth + 3))
    objects += [_PAGE_CONTENT, font]
    return pdf_of_objects(objects)
