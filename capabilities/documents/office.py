"""Office files read directly (no LibreOffice): `read_excel` (openpyxl), `read_word`
(python-docx) and `read_powerpoint` (python-pptx).

The old binary formats (.xls, .doc, .ppt) are refused with the conversion that opens them.
"""

from __future__ import annotations

import datetime
import posixpath
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import docx
import openpyxl
import pptx
from docx.table import Table as WordTable
from openpyxl.utils.cell import get_column_letter, range_boundaries
from openpyxl.utils.exceptions import InvalidFileException

from .errors import BadDocument
from .results import ToolOutput
from .tooling import Args, ToolSpec, Workspace

_OLD_FORMATS = {".xls": "xlsx", ".doc": "docx", ".ppt": "pptx"}


def refuse_old_format(path: Path, tool: str) -> None:
    new = _OLD_FORMATS.get(path.suffix.lower())
    if new:
        raise BadDocument(
            f"{path.name!r} is in the old binary {path.suffix} format, which {tool} cannot read; convert "
            f"it first with convert_document(path, to='{new}') and read the .{new} file"
        )


def _corrupt(path: Path, kind: str, exc: Exception) -> BadDocument:
    return BadDocument(f"cannot open {path.name!r} as {kind} ({exc}); the file is corrupt or of another kind")


# --- Excel ---------------------------------------------------------------------------------


def cell_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)


_REL_NS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_DOC_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_MAIN_NS = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"


def _rels(archive: zipfile.ZipFile, part: str) -> list[tuple[str, str, str]]:
    """(id, type, absolute target) of the relationships of `part` inside the package."""
    folder, name = posixpath.split(part)
    rels_part = posixpath.join(folder, "_rels", name + ".rels")
    if rels_part not in archive.namelist():
        return []
    root = ElementTree.fromstring(archive.read(rels_part))
    found = []
    for rel in root.iter(f"{_REL_NS}Relationship"):
        target = rel.get("Target", "")
        target = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(folder, target))
        found.append((rel.get("Id", ""), rel.get("Type", ""), target))
    return found


def _sheet_visuals(path: Path) -> dict[str, dict[str, bool]]:
    """For each sheet name: whether its drawing holds images and charts (read from the package)."""
    visuals: dict[str, dict[str, bool]] = {}
    with zipfile.ZipFile(path) as archive:
        targets = {rid: target for rid, _, target in _rels(archive, "xl/workbook.xml")}
        workbook = ElementTree.fromstring(archive.read("xl/workbook.xml"))
        for sheet in workbook.iter(f"{_MAIN_NS}sheet"):
            part = targets.get(sheet.get(_DOC_REL, ""), "")
            found = {"has_images": False, "has_charts": False}
            for _, kind, drawing in _rels(archive, part):
                if kind.endswith("/drawing"):
                    for _, inner, _ in _rels(archive, drawing):
                        found["has_images"] |= inner.endswith("/image")
                        found["has_charts"] |= inner.endswith("/chart")
            visuals[sheet.get("name", "")] = found
    return visuals


class ReadExcelArgs(Args):
    path: str
    sheet: str | None = None
    range: str | None = None


def read_excel(ws: Workspace, args: ReadExcelArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    refuse_old_format(path, "read_excel")
    bounds = None
    if args.range:
        try:
            bounds = range_boundaries(args.range.replace("$", ""))
        except ValueError as exc:
            raise BadDocument(f"range {args.range!r} is not a cell range; use the form 'A1:D10'") from exc
        if None in bounds:
            raise BadDocument(f"range {args.range!r} must name both corners, e.g. 'A1:D10'")
    try:
        # data_only: the values saved in the file (a formula's last result), not formulas.
        book = openpyxl.load_workbook(path, data_only=True)
        visuals = _sheet_visuals(path)
    except (InvalidFileException, zipfile.BadZipFile, KeyError, OSError, ElementTree.ParseError) as exc:
        raise _corrupt(path, "an Excel workbook", exc) from exc
    try:
        if args.sheet is not None and args.sheet not in book.sheetnames:
            raise BadDocument(f"there is no sheet {args.sheet!r}; the sheets are {book.sheetnames}")
        sheet = book[args.sheet] if args.sheet is not None else book.active
        if bounds is None:
            bounds = (sheet.min_column, sheet.min_row, sheet.max_column, sheet.max_row)
        min_col, min_row, max_col, max_row = bounds
        rows = [
            [cell_text(v) for v in row]
            for row in sheet.iter_rows(min_row=min_row, max_row=max_row, min_col=min_col, max_col=max_col, values_only=True)
        ]
        data = {
            "path": str(path),
            "sheet": sheet.title,
            "sheets": book.sheetnames,
            "range": f"{get_column_letter(min_col)}{min_row}:{get_column_letter(max_col)}{max_row}",
            "headers": rows[0] if rows else [],
            "rows": rows[1:],
            "row_count": max(0, len(rows) - 1),
            "column_count": max_col - min_col + 1,
            "merged_ranges": [str(r) for r in sheet.merged_cells.ranges],
            **visuals.get(sheet.title, {"has_images": False, "has_charts": False}),
        }
    finally:
        book.close()
    return ToolOutput(data=data)


# --- Word ----------------------------------------------------------------------------------


def heading_level(style_name: str) -> int | None:
    if style_name == "Title":
        return 0
    if style_name.startswith("Heading "):
        tail = style_name.removeprefix("Heading ")
        return int(tail) if tail.isdigit() else None
    return None


def _word_table(table: WordTable) -> list[list[str]]:
    return [[cell.text for cell in row.cells] for row in table.rows]


def open_word(path: Path) -> docx.document.Document:
    refuse_old_format(path, "read_word")
    try:
        return docx.Document(str(path))
    except Exception as exc:  # PackageNotFoundError, BadZipFile, lxml errors from a damaged package
        raise _corrupt(path, "a Word document", exc) from exc


class PathArgs(Args):
    path: str


def read_word(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    document = open_word(path)
    lines: list[str] = []
    headings: list[dict] = []
    tables: list[dict] = []
    paragraphs = 0
    words = 0
    for block in document.iter_inner_content():
        if isinstance(block, WordTable):
            rows = _word_table(block)
            tables.append({"index": len(tables), "rows": rows})
            lines.extend("| " + " | ".join(cell.replace("\n", " ") for cell in row) + " |" for row in rows)
            words += sum(len(cell.split()) for row in rows for cell in row)
            continue
        text = block.text
        if not text.strip():
            continue
        paragraphs += 1
        words += len(text.split())
        level = heading_level(block.style.name if block.style is not None else "")
        if level is not None:
            headings.append({"level": level, "text": text})
            lines.append("#" * max(level, 1) + " " + text)
        else:
            lines.append(text)
    return ToolOutput(data={
        "path": str(path),
        "text": "\n".join(lines),
        "headings": headings,
        "tables": tables,
        "paragraph_count": paragraphs,
        "table_count": len(tables),
        "word_count": words,
    })


# --- PowerPoint ----------------------------------------------------------------------------


def open_presentation(path: Path) -> pptx.presentation.Presentation:
    refuse_old_format(path, "read_powerpoint")
    try:
        return pptx.Presentation(str(path))
    except Exception as exc:  # PackageNotFoundError, BadZipFile, lxml errors from a damaged package
        raise _corrupt(path, "a PowerPoint presentation", exc) from exc


def _shape_content(shapes, texts: list[str], tables: list[list[list[str]]]) -> None:
    for shape in shapes:
        if shape.shape_type == pptx.enum.shapes.MSO_SHAPE_TYPE.GROUP:
            _shape_content(shape.shapes, texts, tables)
        elif getattr(shape, "has_table", False) and shape.has_table:
            tables.append([[cell.text for cell in row.cells] for row in shape.table.rows])
        elif shape.has_text_frame and shape.text_frame.text.strip():
            texts.append(shape.text_frame.text)


def slide_title(slide) -> str:
    title = slide.shapes.title
    return title.text_frame.text if title is not None and title.has_text_frame else ""


def slide_notes(slide) -> str:
    if not slide.has_notes_slide:
        return ""
    frame = slide.notes_slide.notes_text_frame
    return frame.text if frame is not None else ""


def read_powerpoint(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    deck = open_presentation(path)
    slides = []
    for number, slide in enumerate(deck.slides, start=1):
        texts: list[str] = []
        tables: list[list[list[str]]] = []
        _shape_content(slide.shapes, texts, tables)
        slides.append({
            "slide": number,
            "title": slide_title(slide),
            "layout": slide.slide_layout.name,
            "texts": texts,
            "tables": tables,
            "notes": slide_notes(slide),
        })
    return ToolOutput(data={"path": str(path), "slide_count": len(slides), "slides": slides})


TOOLS = [
    ToolSpec(
        name="read_excel",
        description=(
            "Read Excel file content: cell values and sheet metadata.\n\n"
            "Cells come back as the values saved in the file (the last calculated result of a formula, "
            "not the formula itself), as strings. The first row is returned as headers. The result also "
            "lists merged ranges and says whether the sheet has images or charts. Old .xls files: "
            "convert_document(path, to='xlsx') first.\n\n"
            "Args:\n"
            "    path: Path to the Excel file (.xlsx / .xlsm).\n"
            "    sheet: Specific sheet name to read (default: the sheet that was active when the file was saved).\n"
            "    range: Cell range to read, e.g. 'A1:D10' (default: all data).\n\n"
            "Returns:\n"
            "    JSON {path, sheet, sheets, range, headers, rows, row_count, column_count, merged_ranges, "
            "has_images, has_charts}."
        ),
        args=ReadExcelArgs,
        run=read_excel,
    ),
    ToolSpec(
        name="read_word",
        description=(
            "Read Word document content (text, headings, tables) from a .docx file, in document order. "
            "Old .doc files: convert_document(path, to='docx') first.\n\n"
            "Args:\n    path: Path to the Word document.\n\n"
            "Returns:\n    JSON {path, text (headings marked with #, tables as | rows |), headings: "
            "[{level, text}], tables: [{index, rows}], paragraph_count, table_count, word_count}."
        ),
        args=PathArgs,
        run=read_word,
    ),
    ToolSpec(
        name="read_powerpoint",
        description=(
            "Read text, slide structure, and speaker notes from a .pptx file.\n\n"
            "For Word documents use read_word; for Excel use read_excel; for PDFs use read_pdf or "
            "ocr_pdf. Old .ppt files: convert_document(path, to='pptx') first.\n\n"
            "Args:\n    path: Path to the PowerPoint file.\n\n"
            "Returns:\n    JSON {path, slide_count, slides: [{slide, title, layout, texts, tables, notes}]}."
        ),
        args=PathArgs,
        run=read_powerpoint,
    ),
]
