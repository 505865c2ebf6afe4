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
from pydantic import Field

from .errors import BadDocument, InvalidRequest, NotFound
from .results import ToolOutput
from .tooling import PATH_DOC, Args, Output, Workspace, document_tool

_OLD_FORMATS = {".xls": "xlsx", ".doc": "docx", ".ppt": "pptx"}


def refuse_old_format(path: Path, tool: str) -> None:
    new = _OLD_FORMATS.get(path.suffix.lower())
    if new:
        raise InvalidRequest(
            f"{path.name!r} is in the old binary {path.suffix} format, which {tool} cannot read",
            hint=f"convert it first with convert_document(path, to='{new}') and read the .{new} file",
            field="path",
        )


def _corrupt(path: Path, kind: str, exc: Exception) -> BadDocument:
    return BadDocument(f"cannot open {path.name!r} as {kind} ({exc}): the file is corrupt or of another kind",
                       hint="check that it opens in its application, or look at it with get_file_overview")


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
    path: str = Field(description=PATH_DOC + " An .xlsx or .xlsm workbook.")
    sheet: str | None = Field(default=None, description="Name of the sheet to read (default: the sheet "
                                                        "that was active when the file was saved).")
    range: str | None = Field(default=None, description="Cell range to read, e.g. 'A1:D10' (default: all "
                                                        "the sheet's data).")


class ReadExcelOutput(Output):
    path: str = Field(description="Absolute path of the workbook read.")
    sheet: str = Field(description="Name of the sheet read.")
    sheets: list[str] = Field(description="Names of all the workbook's sheets, in order.")
    range: str = Field(description="The cell range read, e.g. 'A1:C4'.")
    headers: list[str] = Field(description="The first row of the range, as text.")
    rows: list[list[str]] = Field(description="The rows after the first, each a list of cell texts "
                                              "('' for empty); a formula gives its last saved result.")
    row_count: int = Field(description="Number of rows in `rows` (the header row not counted).")
    column_count: int = Field(description="Number of columns in the range.")
    merged_ranges: list[str] = Field(description="Merged cell ranges of the sheet, e.g. 'A1:C1'.")
    has_images: bool = Field(description="Whether the sheet holds pictures (not returned; render the "
                                          "workbook to see them).")
    has_charts: bool = Field(description="Whether the sheet holds charts (not returned).")


def read_excel(ws: Workspace, args: ReadExcelArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    refuse_old_format(path, "read_excel")
    bounds = None
    if args.range:
        try:
            bounds = range_boundaries(args.range.replace("$", ""))
        except ValueError as exc:
            raise InvalidRequest(f"range {args.range!r} is not a cell range", hint="use the form 'A1:D10'",
                                 field="range") from exc
        if None in bounds:
            raise InvalidRequest(f"range {args.range!r} does not name both corners",
                                 hint="use the form 'A1:D10'", field="range")
    try:
        # data_only: the values saved in the file (a formula's last result), not formulas.
        book = openpyxl.load_workbook(path, data_only=True)
        visuals = _sheet_visuals(path)
    except (InvalidFileException, zipfile.BadZipFile, KeyError, OSError, ElementTree.ParseError) as exc:
        raise _corrupt(path, "an Excel workbook", exc) from exc
    try:
        if args.sheet is not None and args.sheet not in book.sheetnames:
            raise NotFound(f"there is no sheet {args.sheet!r}; the sheets are {book.sheetnames}",
                           hint="use one of those names", field="sheet")
        sheet = book[args.sheet] if args.sheet is not None else book.active
        if bounds is None:
            bounds = (sheet.min_column, sheet.min_row, sheet.max_column, sheet.max_row)
        min_col, min_row, max_col, max_row = bounds
        rows = [
            [cell_text(v) for v in row]
            for row in sheet.iter_rows(min_row=min_row, max_row=max_row, min_col=min_col, max_col=max_col, values_only=True)
        ]
        data = ReadExcelOutput(
            path=str(path),
            sheet=sheet.title,
            sheets=book.sheetnames,
            range=f"{get_column_letter(min_col)}{min_row}:{get_column_letter(max_col)}{max_row}",
            headers=rows[0] if rows else [],
            rows=rows[1:],
            row_count=max(0, len(rows) - 1),
            column_count=max_col - min_col + 1,
            merged_ranges=[str(r) for r in sheet.merged_cells.ranges],
            **visuals.get(sheet.title, {"has_images": False, "has_charts": False}),
        )
    finally:
        book.close()
    summary = (f"read_excel: {path.name}, sheet {data.sheet!r} {data.range}, {plural(data.row_count, 'row')} "
               f"after the header, {plural(data.column_count, 'column')} (sheets: {', '.join(data.sheets)})")
    return ToolOutput(data=data, summary=summary)


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
    path: str = Field(description=PATH_DOC)


class Heading(Output):
    level: int = Field(description="0 for the Title style, N for 'Heading N'.")
    text: str = Field(description="The heading's text.")


class WordTableContent(Output):
    index: int = Field(description="The table's position among the document's tables, 0-based.")
    rows: list[list[str]] = Field(description="The cells, row by row, as text.")


class ReadWordOutput(Output):
    path: str = Field(description="Absolute path of the document read.")
    text: str = Field(description="The whole text in document order: headings marked with '#' per level, "
                                  "tables as '| cell | cell |' lines.")
    headings: list[Heading] = Field(description="The headings, in document order.")
    tables: list[WordTableContent] = Field(description="The tables, in document order.")
    paragraph_count: int = Field(description="Number of non-empty paragraphs (headings included).")
    table_count: int = Field(description="Number of tables.")
    word_count: int = Field(description="Number of words, table cells included.")


def read_word(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    document = open_word(path)
    lines: list[str] = []
    headings: list[Heading] = []
    tables: list[WordTableContent] = []
    paragraphs = 0
    words = 0
    for block in document.iter_inner_content():
        if isinstance(block, WordTable):
            rows = _word_table(block)
            tables.append(WordTableContent(index=len(tables), rows=rows))
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
            headings.append(Heading(level=level, text=text))
            lines.append("#" * max(level, 1) + " " + text)
        else:
            lines.append(text)
    data = ReadWordOutput(path=str(path), text="\n".join(lines), headings=headings, tables=tables,
                          paragraph_count=paragraphs, table_count=len(tables), word_count=words)
    summary = (f"read_word: {path.name}, {plural(paragraphs, 'paragraph')}, {plural(len(headings), 'heading')}, "
               f"{plural(len(tables), 'table')}, {plural(words, 'word')}")
    return ToolOutput(data=data, summary=summary)


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


class SlideContent(Output):
    slide: int = Field(description="Slide number, 1-based.")
    title: str = Field(description="The title placeholder's text ('' when the slide has none).")
    layout: str = Field(description="Name of the slide's layout.")
    texts: list[str] = Field(description="Text of each shape with text (the title included), in shape order.")
    tables: list[list[list[str]]] = Field(description="Each table on the slide, as rows of cell texts.")
    notes: str = Field(description="The speaker notes ('' when there are none).")


class ReadPowerpointOutput(Output):
    path: str = Field(description="Absolute path of the presentation read.")
    slide_count: int = Field(description="Number of slides.")
    slides: list[SlideContent] = Field(description="Every slide, in order.")


def read_powerpoint(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    deck = open_presentation(path)
    slides = []
    for number, slide in enumerate(deck.slides, start=1):
        texts: list[str] = []
        tables: list[list[list[str]]] = []
        _shape_content(slide.shapes, texts, tables)
        slides.append(SlideContent(slide=number, title=slide_title(slide), layout=slide.slide_layout.name,
                                   texts=texts, tables=tables, notes=slide_notes(slide)))
    with_notes = sum(bool(s.notes.strip()) for s in slides)
    summary = f"read_powerpoint: {path.name}, {plural(len(slides), 'slide')}, {with_notes} with speaker notes"
    return ToolOutput(data=ReadPowerpointOutput(path=str(path), slide_count=len(slides), slides=slides),
                      summary=summary)


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


TOOLS = [
    document_tool(
        name="read_excel",
        description=(
            "Read the cell values of one sheet of an Excel workbook (.xlsx / .xlsm), with the workbook's "
            "sheet names.\n\n"
            "Cells come back as the values saved in the file (the last calculated result of a formula, "
            "not the formula itself), as strings; the first row of the range is returned as headers. "
            "Old .xls files: convert_document(path, to='xlsx') first.\n\n"
            "Returns: the headers and rows of the range read, merged ranges, and whether the sheet "
            "has images or charts."
        ),
        args=ReadExcelArgs,
        output=ReadExcelOutput,
        run=read_excel,
    ),
    document_tool(
        name="read_word",
        description=(
            "Read a Word document (.docx): its text, headings and tables, in document order. "
            "Old .doc files: convert_document(path, to='docx') first.\n\n"
            "Returns: the text (headings marked with #, tables as | rows |), the headings, the tables' "
            "cells and counts of paragraphs, tables and words."
        ),
        args=PathArgs,
        output=ReadWordOutput,
        run=read_word,
    ),
    document_tool(
        name="read_powerpoint",
        description=(
            "Read the text, slide structure and speaker notes of a PowerPoint file (.pptx).\n\n"
            "For Word documents use read_word; for Excel use read_excel; for PDFs use read_pdf or "
            "ocr_pdf. Old .ppt files: convert_document(path, to='pptx') first.\n\n"
            "Returns: each slide's title, layout, texts, tables and notes."
        ),
        args=PathArgs,
        output=ReadPowerpointOutput,
        run=read_powerpoint,
    ),
]
