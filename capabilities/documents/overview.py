"""`get_file_overview`: a light, file-type-specific summary without the full content.

The output is one of several shapes, told apart by `type`; the tool's output schema is their
union (`OVERVIEW_SCHEMA`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import openpyxl
from pydantic import Field

from capabilities.contract import clean_schema

from . import office
from .errors import BadDocument
from .images import PathArgs, open_image
from .pdf import IMAGE_SUFFIXES, open_pdf, page_text
from .results import ToolOutput
from .tooling import Output, Workspace, document_tool

PREVIEW_CHARS = 200
PREVIEW_PAGES = 10
SAMPLE_ROWS = 3
TEXT_PREVIEW_LINES = 5


class Overview(Output):
    path: str = Field(description="Absolute path of the file.")
    file_size_bytes: int = Field(description="The file's size in bytes.")


class PdfPagePreview(Output):
    page: int = Field(description="Page number, 1-based.")
    width: float = Field(description="Page width in PDF points (1/72 inch).")
    height: float = Field(description="Page height in PDF points.")
    text_preview: str = Field(description=f"The first {PREVIEW_CHARS} characters of the page's text.")
    has_text: bool = Field(description="Whether the page has selectable text (if not: a scan, use ocr_pdf).")
    tables: int = Field(description="Number of tables detected on the page.")
    has_images: bool = Field(description="Whether the page holds images.")


class PdfOverview(Overview):
    type: Literal["pdf"]
    page_count: int = Field(description="Number of pages.")
    pages: list[PdfPagePreview] = Field(description=f"The first {PREVIEW_PAGES} pages, in order.")
    pages_previewed: int = Field(description="Number of pages in `pages`.")
    has_images: bool = Field(description="Whether any page holds images.")
    has_tables: bool = Field(description="Whether any previewed page holds a table.")
    metadata: dict[str, str] = Field(description="The PDF's non-empty metadata (title, author, ...).")


class SheetPreview(Output):
    name: str = Field(description="The sheet's name.")
    rows: int = Field(description="Number of rows in use.")
    columns: int = Field(description="Number of columns in use.")
    headers: list[str] = Field(description="The first row, as text.")
    sample_rows: list[list[str]] = Field(description=f"Up to {SAMPLE_ROWS} rows after the first, as text.")


class ExcelOverview(Overview):
    type: Literal["excel"]
    sheet_names: list[str] = Field(description="The sheets' names, in order.")
    sheets: list[SheetPreview] = Field(description="Each sheet's size and first rows, in order.")


class HeadingEntry(Output):
    level: int = Field(description="0 for the Title style, N for 'Heading N'.")
    text: str = Field(description="The heading's text.")


class WordOverview(Overview):
    type: Literal["word"]
    headings: list[HeadingEntry] = Field(description="The headings, in document order.")
    paragraph_count: int = Field(description="Number of non-empty paragraphs outside tables.")
    table_count: int = Field(description="Number of tables.")
    word_count: int = Field(description="Number of words outside tables.")


class SlideEntry(Output):
    slide: int = Field(description="Slide number, 1-based.")
    title: str = Field(description="The slide's title ('' when it has none).")
    has_notes: bool = Field(description="Whether the slide has speaker notes.")


class PowerPointOverview(Overview):
    type: Literal["powerpoint"]
    slide_count: int = Field(description="Number of slides.")
    slides: list[SlideEntry] = Field(description="Every slide, in order.")
    slides_with_notes: int = Field(description="Number of slides with speaker notes.")


class ImageOverview(Overview):
    type: Literal["image"]
    format: str = Field(description="Pillow's name of the format, e.g. 'PNG'.")
    width: int = Field(description="Width as stored, in pixels.")
    height: int = Field(description="Height as stored, in pixels.")
    mode: str = Field(description="Pillow's color mode, e.g. 'RGB'.")
    n_frames: int = Field(description="Number of frames (1 for a still image).")


class TextOverview(Overview):
    type: Literal["text"]
    line_count: int = Field(description="Number of lines.")
    first_lines: list[str] = Field(description=f"The first {TEXT_PREVIEW_LINES} lines.")
    last_lines: list[str] = Field(description=f"The last {TEXT_PREVIEW_LINES} lines (empty when the file has "
                                              f"no more than {TEXT_PREVIEW_LINES}).")


class BinaryOverview(Overview):
    type: Literal["binary"]
    hint: str = Field(description="What this file is not, and what to do with it.")


VARIANTS: tuple[type[Overview], ...] = (PdfOverview, ExcelOverview, WordOverview, PowerPointOverview,
                                        ImageOverview, TextOverview, BinaryOverview)
OVERVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The overview; `type` says which kind of file it is and which fields follow.",
    "oneOf": [clean_schema(variant) for variant in VARIANTS],
}


def _pdf(path: Path, size: int) -> PdfOverview:
    with open_pdf(path) as doc:
        pages = []
        has_images = False
        has_tables = False
        for index, page in enumerate(doc):
            page_has_images = bool(page.get_images())
            has_images |= page_has_images
            if index < PREVIEW_PAGES:
                text = page_text(page).strip()
                tables = len(page.find_tables().tables)
                has_tables |= tables > 0
                pages.append(PdfPagePreview(
                    page=index + 1, width=round(page.rect.width, 1), height=round(page.rect.height, 1),
                    text_preview=text[:PREVIEW_CHARS], has_text=bool(text), tables=tables,
                    has_images=page_has_images,
                ))
        return PdfOverview(
            path=str(path), file_size_bytes=size, type="pdf", page_count=doc.page_count, pages=pages,
            pages_previewed=len(pages), has_images=has_images, has_tables=has_tables,
            metadata={k: str(v) for k, v in (doc.metadata or {}).items() if v},
        )


def _excel(path: Path, size: int) -> ExcelOverview:
    office.refuse_old_format(path, "get_file_overview")
    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many kinds for a damaged package
        raise BadDocument(f"cannot open {path.name!r} as an Excel workbook ({exc})",
                          hint="check that it opens in a spreadsheet application") from exc
    try:
        sheets = []
        for sheet in book.worksheets:
            rows = [
                [office.cell_text(v) for v in row]
                for row in sheet.iter_rows(max_row=SAMPLE_ROWS + 1, values_only=True)
            ]
            sheets.append(SheetPreview(name=sheet.title, rows=sheet.max_row or 0, columns=sheet.max_column or 0,
                                       headers=rows[0] if rows else [], sample_rows=rows[1:]))
        return ExcelOverview(path=str(path), file_size_bytes=size, type="excel", sheet_names=book.sheetnames,
                             sheets=sheets)
    finally:
        book.close()


def _word(path: Path, size: int) -> WordOverview:
    document = office.open_word(path)
    headings, paragraphs, words = [], 0, 0
    for paragraph in document.paragraphs:
        if not paragraph.text.strip():
            continue
        paragraphs += 1
        words += len(paragraph.text.split())
        level = office.heading_level(paragraph.style.name if paragraph.style is not None else "")
        if level is not None:
            headings.append(HeadingEntry(level=level, text=paragraph.text))
    return WordOverview(path=str(path), file_size_bytes=size, type="word", headings=headings,
                        paragraph_count=paragraphs, table_count=len(document.tables), word_count=words)


def _powerpoint(path: Path, size: int) -> PowerPointOverview:
    deck = office.open_presentation(path)
    slides = [
        SlideEntry(slide=n, title=office.slide_title(s), has_notes=bool(office.slide_notes(s).strip()))
        for n, s in enumerate(deck.slides, start=1)
    ]
    return PowerPointOverview(path=str(path), file_size_bytes=size, type="powerpoint", slide_count=len(slides),
                              slides=slides, slides_with_notes=sum(s.has_notes for s in slides))


def _image(path: Path, size: int) -> ImageOverview:
    with open_image(path) as image:
        return ImageOverview(path=str(path), file_size_bytes=size, type="image",
                             format=image.format or path.suffix.lstrip(".").upper(), width=image.width,
                             height=image.height, mode=image.mode, n_frames=getattr(image, "n_frames", 1))


def _text(path: Path, size: int) -> TextOverview | BinaryOverview:
    with path.open("rb") as handle:
        head = handle.read(8192)
    if b"\0" in head:
        return BinaryOverview(path=str(path), file_size_bytes=size, type="binary",
                              hint="not a text file, nor a document or image this server reads")
    lines: list[str] = []
    count = 0
    last: list[str] = []
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            count += 1
            if count <= TEXT_PREVIEW_LINES:
                lines.append(line.rstrip("\n"))
            last.append(line.rstrip("\n"))
            if len(last) > TEXT_PREVIEW_LINES:
                last.pop(0)
    return TextOverview(path=str(path), file_size_bytes=size, type="text", line_count=count, first_lines=lines,
                        last_lines=last if count > TEXT_PREVIEW_LINES else [])


_BY_SUFFIX = {
    ".pdf": _pdf,
    ".xlsx": _excel, ".xlsm": _excel, ".xls": _excel,
    ".docx": _word, ".doc": _word,
    ".pptx": _powerpoint, ".ppt": _powerpoint,
    **{suffix: _image for suffix in IMAGE_SUFFIXES},
}


def _summary(data: Overview) -> str:
    if isinstance(data, PdfOverview):
        return f"PDF, {data.page_count} page(s){'' if any(p.has_text for p in data.pages) else ', no selectable text'}"
    if isinstance(data, ExcelOverview):
        return f"Excel workbook, {len(data.sheets)} sheet(s): {', '.join(data.sheet_names)}"
    if isinstance(data, WordOverview):
        return f"Word document, {len(data.headings)} heading(s), {data.word_count:,} words"
    if isinstance(data, PowerPointOverview):
        return f"PowerPoint, {data.slide_count} slide(s)"
    if isinstance(data, ImageOverview):
        return f"image, {data.format} {data.width}x{data.height} px"
    if isinstance(data, TextOverview):
        return f"text, {data.line_count:,} line(s)"
    return "binary file"


def get_file_overview(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    size = path.stat().st_size
    data = _BY_SUFFIX.get(path.suffix.lower(), _text)(path, size)
    return ToolOutput(data=data, summary=f"get_file_overview: {path.name}, {_summary(data)}, {size:,} bytes")


TOOLS = [
    document_tool(
        name="get_file_overview",
        description=(
            "Summarise a file without its full content, by kind (from the extension), for fast "
            "context-gathering; for the content use read_pdf, read_excel, read_word, read_powerpoint "
            "or read_image.\n\n"
            "- PDF: page count, and for the first 10 pages size, text preview, tables and images\n"
            "- Excel (.xlsx): sheet names, row / column counts, headers and sample rows\n"
            "- Word (.docx): headings, paragraph, table and word counts\n"
            "- PowerPoint (.pptx): slide count, titles, which slides have speaker notes\n"
            "- Image (.png, .jpg, .jpeg, .gif, .bmp, .tiff, .tif, .webp): format, size, color mode, frames\n"
            "- Any other file: as text (line count, first and last lines), or 'binary'\n\n"
            "Returns: the path, file size and `type` (pdf, excel, word, powerpoint, image, text, binary) "
            "with that kind's fields."
        ),
        args=PathArgs,
        output=OVERVIEW_SCHEMA,
        run=get_file_overview,
    ),
]
