"""PDF reading with pymupdf: `read_pdf` (text and tables), and the page rendering the
render, OCR and conversion tools share.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import pymupdf
from PIL import Image
from pydantic import AfterValidator, Field

from capabilities.contract import current_cancellation

from . import pagespec
from .errors import BadDocument, InvalidRequest
from .results import ToolOutput, image_limits
from .tooling import PATH_DOC, Args, Output, Workspace, document_tool

MAX_RENDER_PIXELS = 80_000_000
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp"}


# MuPDF is not thread-safe and tools run in worker threads, so every use of a document
# happens inside `open_pdf`, under this one lock (the library's state is process-wide too).
_MUPDF_LOCK = threading.RLock()


@contextmanager
def open_pdf(path: Path) -> Iterator[pymupdf.Document]:
    """Open a PDF for reading, refusing corrupt, empty and password-protected files.

    The document may only be used inside the `with` block, which holds the MuPDF lock.
    """
    with _MUPDF_LOCK, _opened(path) as doc:
        yield doc


@contextmanager
def _opened(path: Path) -> Iterator[pymupdf.Document]:
    try:
        doc = pymupdf.open(path, filetype="pdf")
    except (pymupdf.FileDataError, pymupdf.EmptyFileError, RuntimeError, ValueError) as exc:
        raise BadDocument(
            f"cannot open {path.name!r} as a PDF ({exc}): the file is corrupt or not a PDF",
            hint="for Office files use read_word / read_excel / read_powerpoint or convert_document",
        ) from exc
    try:
        if doc.needs_pass:
            raise BadDocument(
                f"{path.name!r} is encrypted (password-protected); it cannot be read without its password",
                hint="ask the user for an unencrypted copy",
            )
        if doc.page_count == 0:
            raise BadDocument(f"{path.name!r} has no readable pages: the file is empty or corrupt",
                              hint="check that it opens in a PDF viewer")
        yield doc
    finally:
        doc.close()


# Ligatures split into letters, so code searching for "figures" finds "ﬁgures".
TEXT_FLAGS = pymupdf.TEXTFLAGS_TEXT & ~pymupdf.TEXT_PRESERVE_LIGATURES


def page_text(page: pymupdf.Page) -> str:
    """The page's text, block by block in the order the PDF stores them.

    (`sort=True` would reorder blocks by position but costs ~15x more per page here.)
    """
    return page.get_text("text", flags=TEXT_FLAGS)


def render_page(doc: pymupdf.Document, page_number: int, scale: float) -> Image.Image:
    """Render 1-indexed `page_number` at `scale` (1.0 = 72 dpi) to an RGB image (a call
    cancelled meanwhile stops here, between pages)."""
    current_cancellation().check()
    page = doc[page_number - 1]
    pixels = page.rect.width * page.rect.height * scale * scale
    if pixels > MAX_RENDER_PIXELS:
        raise InvalidRequest(
            f"page {page_number} at scale {scale:g} would be {pixels / 1e6:.0f} megapixels",
            hint="use a smaller scale", field="scale",
        )
    pixmap = page.get_pixmap(matrix=pymupdf.Matrix(scale, scale), alpha=False)
    return Image.frombytes("RGB", (pixmap.width, pixmap.height), pixmap.samples)


def fitted_scale(doc: pymupdf.Document, page_number: int, scale: float) -> float:
    """`scale`, lowered if needed so the page's long edge fits the model's image limit.

    Rendering straight at the fitted size is sharper and much cheaper than rendering big and
    resampling down.
    """
    max_edge, _ = image_limits()
    rect = doc[page_number - 1].rect
    longest = max(rect.width, rect.height) * scale
    if longest <= max_edge:
        return scale
    return scale * max_edge / longest * (1 - 1e-4)  # MuPDF rounds the pixel box outwards


def check_scale(scale: float) -> float:
    if not 0.05 <= scale <= 10:
        raise ValueError("scale must be between 0.05 and 10 (1.0 is 72 dpi, 2.0 is 144 dpi)")
    return scale


Scale = Annotated[float, AfterValidator(check_scale)]

def refuse_images(path: Path, instead: str) -> None:
    if path.suffix.lower() in IMAGE_SUFFIXES:
        raise InvalidRequest(f"{path.name!r} is an image, not a document", hint=f"use {instead} instead",
                             field="path")


def characters(count: int) -> str:
    return f"{count:,} character{'s' if count != 1 else ''}"


class ReadPdfArgs(Args):
    path: str = Field(description=PATH_DOC)
    pages: pagespec.PageSpec = Field(default="all", description=pagespec.PAGES_DOC)
    extract_tables: bool = Field(default=False, description="Also detect tables and return their cells (slower).")


class PdfTable(Output):
    bbox: list[float] = Field(description="The table's box [x0, y0, x1, y1] in PDF points (1/72 inch), "
                                          "from the page's top-left corner.")
    row_count: int = Field(description="Number of rows, the header row included.")
    col_count: int = Field(description="Number of columns.")
    rows: list[list[str]] = Field(description="The cells, row by row, as text ('' for an empty cell).")


class PdfPageText(Output):
    page: int = Field(description="Page number, 1-based.")
    text: str = Field(description="The page's selectable text, block by block in the PDF's order.")
    tables: list[PdfTable] | None = Field(default=None, description="Tables found on the page (only when "
                                                                    "extract_tables is true).")


class ReadPdfOutput(Output):
    path: str = Field(description="Absolute path of the PDF read.")
    page_count: int = Field(description="Number of pages in the whole document.")
    pages: list[PdfPageText] = Field(description="The requested pages, in the order asked.")
    pages_without_text: list[int] | None = Field(
        default=None, description="Requested pages (1-based) with no selectable text, when only some have none.")
    hint: str | None = Field(default=None, description="Set when no requested page has selectable text: "
                                                       "what to use instead (ocr_pdf).")


def _table(table: pymupdf.table.Table) -> PdfTable:
    rows = [["" if cell is None else str(cell) for cell in row] for row in table.extract()]
    return PdfTable(bbox=[round(v, 1) for v in table.bbox], row_count=len(rows), col_count=table.col_count,
                    rows=rows)


def read_pdf(ws: Workspace, args: ReadPdfArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    with open_pdf(path) as doc:
        selected = pagespec.select_pages(args.pages, doc.page_count)
        pages = []
        for number in selected:
            current_cancellation().check()
            page = doc[number - 1]
            entry = PdfPageText(page=number, text=page_text(page))
            if args.extract_tables:
                try:
                    entry.tables = [_table(t) for t in page.find_tables().tables]
                except (RuntimeError, ValueError) as exc:
                    raise BadDocument(f"table detection failed on page {number}: {exc}",
                                      hint="read the page without extract_tables") from exc
            pages.append(entry)
        data = ReadPdfOutput(path=str(path), page_count=doc.page_count, pages=pages)
    empty = [p.page for p in pages if not p.text.strip()]
    if empty and len(empty) == len(pages):
        data.hint = (
            "no selectable text on the requested pages: this looks like a scanned or image-only "
            "PDF; use ocr_pdf to read it (or read_document_pages_as_images to look at it)"
        )
    elif empty:
        data.pages_without_text = empty
    summary = (f"read_pdf: {path.name}, {pagespec.describe(selected, data.page_count)}, "
               f"{characters(sum(len(p.text) for p in pages))}")
    if args.extract_tables:
        found = sum(len(p.tables or []) for p in pages)
        summary += f", {found} table{'s' if found != 1 else ''}"
    if data.hint:
        summary += " (no selectable text: use ocr_pdf)"
    return ToolOutput(data=data, summary=summary)


TOOLS = [
    document_tool(
        name="read_pdf",
        description=(
            "Extract the text (and optionally the tables) of a text-based PDF, read locally with pymupdf.\n\n"
            "For scanned / image PDFs without selectable text, use ocr_pdf instead (local Tesseract).\n\n"
            "Returns: the text of each requested page (and its tables), with the document's page count."
        ),
        args=ReadPdfArgs,
        output=ReadPdfOutput,
        run=read_pdf,
    ),
]
