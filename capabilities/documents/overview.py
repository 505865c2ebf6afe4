"""`get_file_overview`: a light, file-type-specific summary without the full content."""

from __future__ import annotations

from pathlib import Path

import openpyxl

from . import office
from .errors import BadDocument
from .images import PathArgs, open_image
from .pdf import IMAGE_SUFFIXES, open_pdf, page_text
from .results import ToolOutput
from .tooling import ToolSpec, Workspace

PREVIEW_CHARS = 200
PREVIEW_PAGES = 10
SAMPLE_ROWS = 3
TEXT_PREVIEW_LINES = 5


def _pdf(path: Path) -> dict:
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
                pages.append({
                    "page": index + 1,
                    "width": round(page.rect.width, 1),
                    "height": round(page.rect.height, 1),
                    "text_preview": text[:PREVIEW_CHARS],
                    "has_text": bool(text),
                    "tables": tables,
                    "has_images": page_has_images,
                })
        return {
            "type": "pdf",
            "page_count": doc.page_count,
            "pages": pages,
            "pages_previewed": len(pages),
            "has_images": has_images,
            "has_tables": has_tables,
            "metadata": {k: v for k, v in (doc.metadata or {}).items() if v},
        }


def _excel(path: Path) -> dict:
    office.refuse_old_format(path, "get_file_overview")
    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many kinds for a damaged package
        raise BadDocument(f"cannot open {path.name!r} as an Excel workbook ({exc})") from exc
    try:
        sheets = []
        for sheet in book.worksheets:
            rows = [
                [office.cell_text(v) for v in row]
                for row in sheet.iter_rows(max_row=SAMPLE_ROWS + 1, values_only=True)
            ]
            sheets.append({
                "name": sheet.title,
                "rows": sheet.max_row or 0,
                "columns": sheet.max_column or 0,
                "headers": rows[0] if rows else [],
                "sample_rows": rows[1:],
            })
        return {"type": "excel", "sheet_names": book.sheetnames, "sheets": sheets}
    finally:
        book.close()


def _word(path: Path) -> dict:
    document = office.open_word(path)
    headings, paragraphs, words = [], 0, 0
    for paragraph in document.paragraphs:
        if not paragraph.text.strip():
            continue
        paragraphs += 1
        words += len(paragraph.text.split())
        level = office.heading_level(paragraph.style.name if paragraph.style is not None else "")
        if level is not None:
            headings.append({"level": level, "text": paragraph.text})
    return {
        "type": "word",
        "headings": headings,
        "paragraph_count": paragraphs,
        "table_count": len(document.tables),
        "word_count": words,
    }


def _powerpoint(path: Path) -> dict:
    deck = office.open_presentation(path)
    slides = [
        {"slide": n, "title": office.slide_title(s), "has_notes": bool(office.slide_notes(s).strip())}
        for n, s in enumerate(deck.slides, start=1)
    ]
    return {
        "type": "powerpoint",
        "slide_count": len(slides),
        "slides": slides,
        "slides_with_notes": sum(s["has_notes"] for s in slides),
    }


def _image(path: Path) -> dict:
    with open_image(path) as image:
        return {
            "type": "image",
            "format": image.format,
            "width": image.width,
            "height": image.height,
            "mode": image.mode,
            "n_frames": getattr(image, "n_frames", 1),
        }


def _text(path: Path) -> dict:
    with path.open("rb") as handle:
        head = handle.read(8192)
    if b"\0" in head:
        return {"type": "binary", "hint": "not a text file, nor a document or image this server reads"}
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
    return {
        "type": "text",
        "line_count": count,
        "first_lines": lines,
        "last_lines": last if count > TEXT_PREVIEW_LINES else [],
    }


_BY_SUFFIX = {
    ".pdf": _pdf,
    ".xlsx": _excel, ".xlsm": _excel, ".xls": _excel,
    ".docx": _word, ".doc": _word,
    ".pptx": _powerpoint, ".ppt": _powerpoint,
    **{suffix: _image for suffix in IMAGE_SUFFIXES},
}


def get_file_overview(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    summary = _BY_SUFFIX.get(path.suffix.lower(), _text)(path)
    size = path.stat().st_size
    return ToolOutput(data={"path": str(path), "file_size_bytes": size, **summary})


TOOLS = [
    ToolSpec(
        name="get_file_overview",
        description=(
            "Return a lightweight, file-type-specific summary without full content.\n\n"
            "Use for fast context-gathering; for full content use read_word, read_excel, read_pdf, "
            "read_powerpoint, or read_image.\n\n"
            "By extension:\n"
            "- PDF (.pdf): page count; per page (first 10): dimensions, text preview, tables, has_images; "
            "has_images, has_tables\n"
            "- Excel (.xlsx): sheet names, row/column counts per sheet, column headers, sample rows\n"
            "- Word (.docx): section headings, paragraph count, table count, word count\n"
            "- PowerPoint (.pptx): slide count, slide titles, speaker notes presence\n"
            "- Image (.png, .jpg, .jpeg, .gif, .bmp, .tiff, .tif, .webp): dimensions, format, color mode, "
            "frames\n"
            "- Any other extension: treated as text (line count, first/last lines preview)\n\n"
            "Args:\n    path: Path to the file.\n\n"
            "Returns:\n    JSON {path, file_size_bytes, type, ...the fields above}."
        ),
        args=PathArgs,
        run=get_file_overview,
    ),
]
