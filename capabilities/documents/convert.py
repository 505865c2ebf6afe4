"""The `convert_document` tool: Office and OpenDocument files converted with LibreOffice
(`libreoffice.OfficeConverter`, owned by the server's `Workspace`), and any document's pages
written as PNG / JPEG images.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Literal

from pydantic import Field

from . import pagespec
from .errors import InvalidRequest, OutputExists
from .libreoffice import TIMEOUT_ENV, discard
from .paths import atomic_output
from .pdf import open_pdf, render_page
from .results import ToolOutput
from .tooling import PATH_DOC, WRITES_FILES, Args, Output, Workspace, document_tool

TEXT_SOURCES = {".docx", ".doc", ".odt", ".rtf", ".txt", ".html", ".htm", ".docm", ".dotx", ".fodt"}
SHEET_SOURCES = {".xlsx", ".xls", ".ods", ".csv", ".xlsm", ".fods"}
SLIDE_SOURCES = {".pptx", ".ppt", ".odp", ".pps", ".ppsx", ".fodp"}
TARGETS_BY_FAMILY = {
    "text document": ({"pdf", "docx", "odt", "html", "txt"}, TEXT_SOURCES),
    "spreadsheet": ({"pdf", "xlsx", "ods", "csv", "html"}, SHEET_SOURCES),
    "presentation": ({"pdf", "pptx", "odp", "html"}, SLIDE_SOURCES),
}
IMAGE_SCALE = 2.0


def _family_check(source: Path, to: str) -> None:
    suffix = source.suffix.lower()
    if suffix == ".pdf":
        if to not in ("png", "jpg"):
            raise InvalidRequest(
                f"a PDF can only be converted to png or jpg (one image per page), not {to}",
                hint="to read its text use read_pdf", field="to",
            )
        return
    if to in ("png", "jpg"):
        return
    for family, (targets, suffixes) in TARGETS_BY_FAMILY.items():
        if suffix in suffixes and to not in targets:
            raise InvalidRequest(
                f"a {family} ({suffix}) cannot be converted to {to}",
                hint=f"choose one of {', '.join(sorted(targets | {'png', 'jpg'}))}", field="to",
            )


class ConvertDocumentArgs(Args):
    path: str = Field(description=PATH_DOC + " An Office or OpenDocument file (DOCX, XLSX, PPTX, DOC, XLS, "
                                             "PPT, ODT, ODS, ODP, RTF, ...), or a PDF (to png / jpg only).")
    to: Literal["pdf", "docx", "xlsx", "pptx", "odt", "ods", "odp", "csv", "html", "txt", "png", "jpg"] = Field(
        description="The target format; png / jpg write one image per page.")
    outdir: str | None = Field(default=None, description="An existing folder inside the document roots to "
                                                         "write into (default: the source's folder).")
    page: pagespec.PageSpec = Field(default="all", description="For png / jpg only: " + pagespec.PAGES_DOC)
    overwrite: bool = Field(default=False, description="Replace output files that already exist.")
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=3600,
        description=f"Seconds before LibreOffice is stopped (default ${TIMEOUT_ENV} or 120).",
    )


class ConvertDocumentOutput(Output):
    path: str = Field(description="Absolute path of the source document.")
    output_files: list[str] = Field(description="Absolute paths of the files written, in page order for "
                                                "png / jpg.")
    pages: list[int] | None = Field(default=None, description="For png / jpg: the pages written, 1-based, "
                                                              "one file each.")
    page_count: int | None = Field(default=None, description="For pdf: the number of pages of the PDF written.")
    engine: Literal["libreoffice", "pymupdf", "libreoffice+pymupdf"] = Field(
        description="What converted it: LibreOffice, pymupdf (PDF pages to images), or both.")


def convert_document(ws: Workspace, args: ConvertDocumentArgs) -> ToolOutput:
    source = ws.roots.input_file(args.path)
    outdir = ws.roots.output_dir(args.outdir) if args.outdir else source.parent
    _family_check(source, args.to)
    if args.to not in ("png", "jpg"):
        if args.page.strip().lower() != "all":
            raise InvalidRequest(f"page selects pages only for png / jpg, not for {args.to}",
                                 hint=f"leave page as 'all' for {args.to}", field="page")
        target = outdir / f"{source.stem}.{args.to}"
        _check_target(source, target, args.overwrite)
        produced = ws.office.convert(source, args.to, args.timeout_seconds)
        try:
            with atomic_output(target) as tmp:
                shutil.copyfile(produced, tmp)
        finally:
            discard(produced)
        data = ConvertDocumentOutput(path=str(source), output_files=[str(target)], engine="libreoffice")
        summary = f"convert_document: {source.name} -> {target}"
        if args.to == "pdf":
            with open_pdf(target) as doc:
                data.page_count = doc.page_count
            summary += f" ({data.page_count} page{'s' if data.page_count != 1 else ''})"
        return ToolOutput(data=data, summary=summary)

    is_pdf = source.suffix.lower() == ".pdf"
    pdf = source if is_pdf else ws.office.to_pdf(source, args.timeout_seconds)
    with open_pdf(pdf) as doc:
        pages = pagespec.select_pages(args.page, doc.page_count, field="page")
        targets = [outdir / f"{source.stem}-p{n}.{args.to}" for n in pages]
        for target in targets:
            _check_target(source, target, args.overwrite)
        for number, target in zip(pages, targets):
            image = render_page(doc, number, IMAGE_SCALE)
            with atomic_output(target) as tmp:
                image.save(tmp, "PNG" if args.to == "png" else "JPEG", quality=90)
    data = ConvertDocumentOutput(path=str(source), output_files=[str(t) for t in targets], pages=pages,
                                 engine="pymupdf" if is_pdf else "libreoffice+pymupdf")
    summary = (f"convert_document: {source.name} -> {len(targets)} {args.to} file(s) in {outdir} "
               f"({pagespec.describe(pages)})")
    return ToolOutput(data=data, summary=summary)


def _check_target(source: Path, target: Path, overwrite: bool) -> None:
    if target == source:
        raise InvalidRequest(f"the output {str(target)!r} would replace the source itself",
                             hint="give another outdir", field="outdir")
    if target.exists() and not overwrite:
        raise OutputExists(f"{str(target)!r} already exists and was left as it is",
                           hint="pass overwrite=true to replace it, or give another outdir", field="overwrite")


TOOLS = [
    document_tool(
        name="convert_document",
        description=(
            "Convert a document to another format and write the result as files.\n\n"
            "Office and OpenDocument files (DOCX, XLSX, PPTX, DOC, XLS, PPT, ODT, ODS, ODP, RTF and "
            "similar) are converted with LibreOffice headless. Nothing is shown: to look at pages use "
            "read_document_pages_as_images or render_document_page.\n"
            "- png / jpg write one image per page, <name>-p<N>.<to>, rendered at 144 dpi (scale 2); "
            "choose pages with `page`. A PDF source can only be converted to png or jpg.\n"
            "- csv exports only the first sheet of a spreadsheet.\n"
            "- Other targets write one file, <name>.<to>.\n"
            "Output goes next to the source unless `outdir` names another folder. An existing file is "
            "never replaced unless overwrite=true. Conversions run one at a time; each is stopped "
            "after timeout_seconds (default 120).\n\n"
            "Returns: the paths of the files written (and the pages written, or the PDF's page count)."
        ),
        args=ConvertDocumentArgs,
        output=ConvertDocumentOutput,
        run=convert_document,
        annotations=WRITES_FILES,
    ),
]
