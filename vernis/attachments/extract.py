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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pypdf import PageObject, PdfReader
    from pypdf.generic import PdfObject

__all__ = ["EXTRACT_SECONDS", "MAX_PDF_PAGES", "Extracted", "pdf_text", "plain_text"]

logger = logging.getLogger("vernis.attachments")

MAX_PDF_PAGES = 50
EXTRACT_SECONDS = 5.0
# The deepest page tree read (pypdf's own default limit): a real one is a few levels deep.
_MAX_TREE_DEPTH = 100


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
    note saying so.

    The worker thread's work is bounded by the pages it reads, not by the pages the PDF has: it stops
    at the time limit too, checked at every node of the page tree. What it cannot cut short is pypdf
    reading the file's cross-reference table and the page tree's root, and one page's text."""
    deadline = time.monotonic() + seconds
    work = asyncio.to_thread(_pdf_text, data, max_chars, deadline)
    try:
        # The thread checks the deadline at every node of the page tree and before every page; the wait
        # stops a page that runs long.
        return await asyncio.wait_for(work, seconds + 1.0)
    except TimeoutError:
        return Extracted("", note=f"reading the PDF took longer than {seconds:g} s: its text is left out")


def _pdf_text(data: bytes, max_chars: int, deadline: float) -> Extracted:
    """The text of `pdf_text`, read in the worker thread; its work is bounded by the pages it reads.

    The page count is the page tree's own /Count (the whole tree is never walked to count it); the
    pages come from `_PageWalk`, which stops at `MAX_PDF_PAGES` pages and at `deadline`. When the walk
    reaches the end of the tree, the pages it found are the count (a wrong /Count is corrected); when
    /Count is missing or invalid and the tree is not walked to its end, the count is unknown (None) and
    the notes leave it out.
    """
    # Imported on the first PDF, not at start: pypdf is a good part of a server process's imports.
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError, PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            return Extracted("", note="the PDF is encrypted: its text could not be read")
        walk = _PageWalk(reader, deadline)
        total = walk.declared_count
        texts: list[str] = []
        length = 0
        read = 0
        for page in walk.pages(MAX_PDF_PAGES):
            page_text = page.extract_text() or ""
            read += 1
            texts.append(page_text)
            length += len(page_text) + 2
            if length >= max_chars:
                break
        if walk.more is False:
            total = read
        elif total is not None and (total < read or (walk.more and total == read)):
            total = None  # /Count is less than the pages there are: the true count is not known
        of = "" if total is None else f" of {total:,}"
        note = None
        if walk.out_of_time:
            note = f"reading stopped after {read}{of} pages (time limit)"
        text = "\n\n".join(texts)
        if len(text) > max_chars:
            text = text[:max_chars]
            note = f"the text is cut after {max_chars:,} characters (page {read}{of})"
        elif note is None and (read < total if total is not None else walk.more is not False):
            note = f"only the first {read}{of} pages were read"
        return Extracted(text, pages=read, total_pages=total, note=note)
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        logger.info("a PDF attachment could not be read: %s", type(exc).__name__)
        return Extracted("", note="the PDF could not be read: its text is left out")


class _PageWalk:
    """A PDF's pages, read lazily from its page tree: never more of the tree than the pages asked for.

    pypdf's own page list (`reader.pages`, `len(reader.pages)`) flattens the WHOLE page tree first, one
    page object per leaf, which for a hostile 100,000-page PDF is seconds of work that no deadline can
    cut. This walk gives the same pages, in the same order, with the same inherited attributes (pypdf's
    `_flatten`), but one at a time:

    - `declared_count` is the tree root's /Count if it is a non-negative integer, else None.
    - `pages(limit)` yields at most `limit` pages, depth first over /Kids in order, each a `PageObject`
      with /Resources, /MediaBox, /CropBox and /Rotate inherited from its /Pages ancestors where it has
      none of its own. Its work is the tree nodes up to the last page yielded, then up to the next leaf
      (to learn whether there is one), never the rest of the tree.
    - The deadline is checked at every /Kids entry: once it has passed, the walk ends and
      `out_of_time` is set (unless `limit` pages were already yielded).
    - `more` is True when a page was found past the limit, False when the whole tree was walked, and
      None when it is not known (the walk ended at the deadline or was left before its end).
    - A malformed tree raises PdfReadError where the walk meets it: /Pages not a dictionary, /Kids not
      an array, a /Pages node reached a second time (a cycle, or a node shared by two parents) or a
      tree deeper than `_MAX_TREE_DEPTH`. Entries of /Kids that are not dictionaries, or are empty ones,
      are skipped, as pypdf does; a page listed many times is read each time, as pypdf does.
    """

    def __init__(self, reader: PdfReader, deadline: float) -> None:
        from pypdf.errors import PdfReadError
        from pypdf.generic import DictionaryObject, NullObject

        self._reader = reader
        self._deadline = deadline
        root = reader.root_object.get("/Pages", NullObject()).get_object()
        if not isinstance(root, DictionaryObject):
            raise PdfReadError("Invalid object in /Pages")
        self._root: DictionaryObject = root
        count = root.get("/Count", NullObject()).get_object()
        valid = isinstance(count, int) and not isinstance(count, bool) and count >= 0
        self.declared_count: int | None = int(count) if valid else None
        self.out_of_time = False
        self.more: bool | None = None

    def pages(self, limit: int) -> Iterator[PageObject]:
        from pypdf import PageObject
        from pypdf.errors import PdfReadError
        from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, NameObject, NullObject

        inheritable = [NameObject(name) for name in ("/Resources", "/MediaBox", "/CropBox", "/Rotate")]
        # The /Pages nodes walked so far, by reference: a cycle comes back to one of them.
        seen: set[tuple[int, int]] = set()
        # The /Pages nodes on the path from the root: their /Kids not reached yet, the attributes
        # those kids inherit, and the kids' depth. The root is the one kid of a node above it.
        root_reference = getattr(self._root, "indirect_reference", None)
        root = root_reference if isinstance(root_reference, IndirectObject) else self._root
        stack: list[tuple[Iterator[PdfObject], dict[NameObject, PdfObject], int]] = [(iter([root]), {}, 0)]
        yielded = 0
        while stack:
            if time.monotonic() > self._deadline:
                self.out_of_time = yielded < limit
                return
            kids, inherit, depth = stack[-1]
            kid = next(kids, None)
            if kid is None:
                stack.pop()
                continue
            node = kid.get_object()
            if not isinstance(node, DictionaryObject) or not node:
                continue
            if depth > _MAX_TREE_DEPTH:
                raise PdfReadError(f"the page tree is deeper than {_MAX_TREE_DEPTH}")
            reference = kid if isinstance(kid, IndirectObject) else None
            # As pypdf: a node without /Type is a page unless it has /Kids; other types are skipped.
            declared = node.get("/Type")
            kind = declared.get_object() if declared is not None else "/Pages" if "/Kids" in node else "/Page"
            if kind == "/Pages":
                if reference is not None:
                    key = (reference.idnum, reference.generation)
                    if key in seen:
                        raise PdfReadError("a /Pages node of the page tree is reached twice")
                    seen.add(key)
                node_kids = node.get("/Kids", NullObject()).get_object()
                if isinstance(node_kids, NullObject):
                    node_kids = ArrayObject()
                elif not isinstance(node_kids, ArrayObject):
                    raise PdfReadError(f"/Kids is {type(node_kids).__name__}, not an array")
                inherited = dict(inherit)
                for name in inheritable:
                    if name in node:
                        inherited[name] = node[name]
                stack.append((iter(node_kids), inherited, depth + 1))
            elif kind == "/Page":
                if yielded == limit:
                    self.more = True
                    return
                page = PageObject(self._reader, reference)
                if reference is None:
                    page.update(node)  # an inline page dictionary (the constructor copies referenced ones)
                for name, value in inherit.items():
                    if name not in page:
                        page[name] = value
                yielded += 1
                yield page
        self.more = False
