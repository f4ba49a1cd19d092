"""The text of an attachment for the model (SPEC §21): a PDF's text (pypdf), a text file as it is.

Extraction is bounded: at most `MAX_PDF_PAGES` pages, `EXTRACT_SECONDS` of work and `max_chars`
characters; what is left out is said in `note`. Only text is ever taken from a PDF: its scripts,
forms, attachments and images are never run or read.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from dataclasses import dataclass

__all__ = ["EXTRACT_SECONDS", "MAX_PDF_PAGES", "Extracted", "pdf_text", "plain_text"]

logger = logging.getLogger("vernis.attachments")

MAX_PDF_PAGES = 50
EXTRACT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Extracted:
    text: str
    # Pages read and in all (PDFs only).
    pages: int | None = None
    total_pages: int | None = None
    # What was left out, said plainly; None when the text is whole.
    note: str | None = None


def plain_text(data: bytes, max_chars: int) -> Extracted:
    text = data.decode("utf-8", "replace")
    if len(text) > max_chars:
        return Extracted(
            text[:max_chars],
            note=f"the file is cut here: only its first {max_chars:,} of {len(text):,} characters were read",
        )
    return Extracted(text)


async def pdf_text(data: bytes, max_chars: int, *, seconds: float = EXTRACT_SECONDS) -> Extracted:
    """The PDF's text, page by page, within the limits. A PDF that cannot be read gives no text and a
    note saying so."""
    deadline = time.monotonic() + seconds
    work = asyncio.to_thread(_pdf_text, data, max_chars, deadline)
    try:
        # The thread checks the deadline between pages; the wait stops a page that runs long.
        return await asyncio.wait_for(work, seconds + 1.0)
    except TimeoutError:
        return Extracted("", note=f"reading the PDF took longer than {seconds:g} s: its text is left out")


def _pdf_text(data: bytes, max_chars: int, deadline: float) -> Extracted:
    # Imported on the first PDF, not at start: pypdf is a good part of a server process's imports.
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError, PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            return Extracted("", note="the PDF is encrypted: its text could not be read")
        total = len(reader.pages)
        texts: list[str] = []
        length = 0
        read = 0
        note = None
        for index in range(min(total, MAX_PDF_PAGES)):
            if time.monotonic() > deadline:
                note = f"reading stopped after {read} of {total:,} pages (time limit)"
                break
            page_text = reader.pages[index].extract_text() or ""
            read += 1
            texts.append(page_text)
            length += len(page_text) + 2
            if length >= max_chars:
                break
        text = "\n\n".join(texts)
        if len(text) > max_chars:
            text = text[:max_chars]
            note = f"the text is cut after {max_chars:,} characters (page {read} of {total:,})"
        elif note is None and read < total:
            note = f"only the first {read} of {total:,} pages were read"
        return Extracted(text, pages=read, total_pages=total, note=note)
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        logger.info("a PDF attachment could not be read: %s", type(exc).__name__)
        return Extracted("", note="the PDF could not be read: its text is left out")
