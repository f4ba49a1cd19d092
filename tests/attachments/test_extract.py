"""Attachments' text for the model, within limits (vernis.attachments.extract)."""

from __future__ import annotations

import asyncio
import threading
import time
import tracemalloc
from typing import Any

import pytest

from tests.attachments.samples import (
    pdf,
    pdf_of_distinct_pages,
    pdf_with_nested_page_tree,
    pdf_with_page_tree_cycle,
    pdf_with_stream,
    zlib_bomb,
)
from vernis.attachments import extract
from vernis.attachments.extract import MAX_PDF_PAGES, Extracted, pdf_text, plain_text

# The time limit of the tests that are not about it: a busy machine (the suite's other tests beside
# them, under coverage) must not cut them.
GENEROUS = 60.0


async def test_pdf_text_is_read_page_by_page() -> None:
    """Each page's text comes out in order, with the page count."""
    extracted = await pdf_text(pdf(["Invoice 1042", "Total due: 300 EUR"]), 10_000, seconds=GENEROUS)
    assert "Invoice 1042" in extracted.text
    assert extracted.text.index("Invoice") < extracted.text.index("Total due")
    assert (extracted.pages, extracted.total_pages, extracted.note) == (2, 2, None)


async def test_a_pdfs_javascript_is_never_part_of_its_text() -> None:
    """A PDF with a script run on open gives its page text only."""
    extracted = await pdf_text(
        pdf(["Quarterly report"], javascript="app.alert('pwned')"), 10_000, seconds=GENEROUS
    )
    assert "Quarterly report" in extracted.text
    assert "pwned" not in extracted.text
    assert "alert" not in extracted.text


async def test_a_pdf_of_100000_pages_stops_at_the_page_limit() -> None:
    """A 100,000-page PDF is read up to the page limit, and the note says how much was left out (a generous time limit here: a busy machine must not turn this into the time-limit case)."""
    extracted = await pdf_text(pdf(["page text"], repeat_pages=100_000), 1_000_000, seconds=120)
    assert extracted.total_pages == 100_000
    assert extracted.pages == MAX_PDF_PAGES
    assert extracted.note is not None
    assert f"first {MAX_PDF_PAGES} of 100,000 pages" in extracted.note


async def test_pdf_reading_stops_at_its_time_limit() -> None:
    """Reading stops at the time limit, whatever the PDF holds, with a note saying so."""
    data = pdf(["page text"], repeat_pages=100_000)  # made before the clock starts: it takes seconds
    started = time.monotonic()
    extracted = await pdf_text(data, 1_000_000, seconds=0.05)
    assert time.monotonic() - started < 10
    assert extracted.note is not None
    assert "time limit" in extracted.note or "longer than" in extracted.note


async def test_pdf_text_is_cut_at_the_budget_with_a_note() -> None:
    """A PDF with more text than the budget gives exactly the budget's characters and says it was cut."""
    extracted = await pdf_text(pdf(["word " * 80] * 3), 100, seconds=GENEROUS)
    assert len(extracted.text) == 100
    assert extracted.note is not None
    assert "cut" in extracted.note


async def test_unreadable_pdf_gives_a_note_not_an_error() -> None:
    """Bytes that start like a PDF but are not one give no text and a note."""
    extracted = await pdf_text(b"%PDF-1.7\nnot really a pdf", 1000)
    assert extracted.text == ""
    assert extracted.note is not None


def test_plain_text_is_cut_with_a_note() -> None:
    """A text file longer than the budget is cut there, and the note gives both lengths."""
    extracted = plain_text(b"x" * 50, 20)
    assert extracted.text == "x" * 20
    assert extracted.note is not None
    assert "20 of 50" in extracted.note
    assert plain_text(b"short", 20).note is None


async def test_a_zip_bomb_in_a_pdf_is_read_in_bounded_time_and_memory() -> None:
    """A page whose compressed content inflates to 150 MiB is read in well under a second without the memory it would take to inflate it."""
    bomb = pdf_with_stream(zlib_bomb(150))
    assert len(bomb) < 1024 * 1024
    tracemalloc.start()
    try:
        started = time.monotonic()
        extracted = await pdf_text(bomb, 10_000)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 5
    assert peak < 100 * 1024 * 1024
    assert len(extracted.text) <= 10_000


async def test_a_100000_page_pdf_is_read_without_walking_its_whole_page_tree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading a 100,000-page PDF, to its page limit or stopped at a 0.05 s limit, builds no more page objects than the pages read (and the one after) and never flattens the whole page tree: the thread's work is bounded by the pages read, not the pages there are."""
    from pypdf import PageObject, PdfReader

    data = pdf_of_distinct_pages(100_000)
    flattened: list[int] = []
    built: list[int] = []
    flatten, build = PdfReader._flatten, PageObject.__init__

    def flattening(self: PdfReader, *args: Any, **kwargs: Any) -> None:
        flattened.append(1)
        flatten(self, *args, **kwargs)

    def building(self: PageObject, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        build(self, *args, **kwargs)

    monkeypatch.setattr(PdfReader, "_flatten", flattening)
    monkeypatch.setattr(PageObject, "__init__", building)

    extracted = await pdf_text(data, 1_000_000, seconds=GENEROUS)
    assert (extracted.pages, extracted.total_pages) == (MAX_PDF_PAGES, 100_000)
    assert flattened == []
    assert len(built) == MAX_PDF_PAGES

    built.clear()
    ended = threading.Event()
    read = extract._pdf_text

    def reading(data: bytes, max_chars: int, deadline: float) -> Extracted:
        try:
            return read(data, max_chars, deadline)
        finally:
            ended.set()

    monkeypatch.setattr(extract, "_pdf_text", reading)
    extracted = await pdf_text(data, 1_000_000, seconds=0.05)
    assert extracted.note is not None
    assert "time limit" in extracted.note or "longer than" in extracted.note
    # A thread cannot be stopped: wait for it (in another thread, the loop running on) to count its work.
    assert await asyncio.to_thread(ended.wait, 120)
    assert flattened == []
    assert len(built) <= MAX_PDF_PAGES


async def test_a_page_tree_that_loops_gives_a_note_not_a_hang() -> None:
    """A page tree whose /Kids leads back to an ancestor gives, promptly, no text and a note rather than a hang or an error."""
    started = time.monotonic()
    extracted = await pdf_text(pdf_with_page_tree_cycle(), 10_000, seconds=GENEROUS)
    assert time.monotonic() - started < 10
    assert extracted.text == ""
    assert extracted.note is not None
    assert "could not be read" in extracted.note


async def test_a_page_inherits_its_font_from_the_page_tree_above_it() -> None:
    """A page three /Pages nodes down is read with the font the tree's root gives it (the font draws "p" as "X")."""
    extracted = await pdf_text(pdf_with_nested_page_tree(3), 10_000, seconds=GENEROUS)
    assert (extracted.text, extracted.pages, extracted.total_pages, extracted.note) == ("Xage", 1, 1, None)


async def test_a_page_tree_too_deep_gives_a_note_not_an_error() -> None:
    """A page 10,000 /Pages nodes down gives no text and a note, not a recursion error or a long walk."""
    extracted = await pdf_text(pdf_with_nested_page_tree(10_000), 10_000, seconds=GENEROUS)
    assert extracted.text == ""
    assert extracted.note is not None
    assert "could not be read" in extracted.note


async def test_a_wrong_page_count_is_not_believed() -> None:
    """A page tree whose /Count is wrong is counted from its pages when all were read, and not counted at all when they were not."""
    two_pages = pdf(["first", "second"])
    assert b"/Count 2 >>" in two_pages
    extracted = await pdf_text(two_pages.replace(b"/Count 2 >>", b"/Count 9 >>"), 10_000, seconds=GENEROUS)
    assert (extracted.pages, extracted.total_pages, extracted.note) == (2, 2, None)

    many_pages = pdf(["page text"], repeat_pages=100_000)
    assert b"/Count 100000 >>" in many_pages  # replaced by a count of the same length: the xref stays right
    bad_count = many_pages.replace(b"/Count 100000 >>", b"/Count -99999 >>")
    extracted = await pdf_text(bad_count, 1_000_000, seconds=120)
    assert (extracted.pages, extracted.total_pages) == (MAX_PDF_PAGES, None)
    assert extracted.note == f"only the first {MAX_PDF_PAGES} pages were read"
