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
from pydantic import AfterValidator

from . import pagespec
from .errors import BadDocument, DocumentError
from .results import ToolOutput, image_limits
from .tooling import Args, ToolSpec, Workspace

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
            f"cannot open {path.name!r} as a PDF ({exc}); the file is corrupt or not a PDF. "
            f"For Office files use read_word / read_excel / read_powerpoint or convert_document"
        ) from exc
    try:
        if doc.needs_pass:
            raise BadDocument(
                f"{path.name!r} is encrypted (password-protected); it cannot be read without its "
                f"password. Ask the user for an unencrypted copy"
            )
        if doc.page_count == 0:
            raise BadDocument(f"{path.name!r} has no readable pages: the file is empty or corrupt; check it opens in a PDF viewer")
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
    """Render 1-indexed `page_number` at `scale` (1.0 = 72 dpi) to an RGB image."""
    page = doc[page_number - 1]
    pixels = page.rect.width * page.rect.height * scale * scale
    if pixels > MAX_RENDER_PIXELS:
        raise BadDocument(
            f"page {page_number} at scale {scale:g} would be {pixels / 1e6:.0f} megapixels; use a smaller scale"
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
        raise BadDocument(f"{path.name!r} is an image, not a document; use {instead} instead")


class ReadPdfArgs(Args):
    path: str
    pages: pagespec.PageSpec = "all"
    extract_tables: bool = False


def _table(table: pymupdf.table.Table) -> dict:
    rows = [["" if cell is None else str(cell) for cell in row] for row in table.extract()]
    return {
        "bbox": [round(v, 1) for v in table.bbox],
        "row_count": len(rows),
        "col_count": table.col_count,
        "rows": rows,
    }


def read_pdf(ws: Workspace, args: ReadPdfArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    with open_pdf(path) as doc:
        selected = pagespec.select_pages(args.pages, doc.page_count)
        pages = []
        for number in selected:
            page = doc[number - 1]
            entry: dict = {"page": number, "text": page_text(page)}
            if args.extract_tables:
                try:
                    entry["tables"] = [_table(t) for t in page.find_tables().tables]
                except (RuntimeError, ValueError) as exc:
                    raise DocumentError(f"table detection failed on page {number}: {exc}") from exc
            pages.append(entry)
        data: dict = {"path": str(path), "page_count": doc.page_count, "pages": pages}
        empty = [p["page"] for p in pages if not p["text"].strip()]
        if empty and len(empty) == len(pages):
            data["hint"] = (
                "no selectable text on the requested pages: this looks like a scanned or image-only "
                "PDF; use ocr_pdf to read it (or read_document_pages_as_images to look at it)"
            )
        elif empty:
            data["pages_without_text"] = empty
    return ToolOutput(data=data)


TOOLS = [
    ToolSpec(
        name="read_pdf",
        description=(
            "Extract text (and optionally tables) from a text-based PDF, read locally with pymupdf.\n\n"
            "For scanned / image PDFs without selectable text, use ocr_pdf instead (local Tesseract).\n\n"
            "Args:\n"
            "    path: Path to the PDF file.\n"
            "    pages: Which pages to read: 'all', '1-5', '1,3,7', mixed '1-3,7', or open-ended '21-'.\n"
            "    extract_tables: Whether to extract tables as well.\n\n"
            "Returns:\n"
            "    JSON: {path, page_count, pages: [{page, text, tables?: [{bbox, row_count, col_count, "
            "rows}]}]}, plus `hint` when no page has selectable text (then use ocr_pdf)."
        ),
        args=ReadPdfArgs,
        run=read_pdf,
    ),
]
