"""OCR, done locally by Tesseract: `ocr_pdf` (pages rendered at 300 dpi) and `ocr_image`.

Tesseract runs once per page, in a process group of its own: killed at the page's timeout, or
at once when the call is cancelled (`CallCancelled`)."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
from typing import Literal

from PIL import Image, ImageOps
from pydantic import Field

from capabilities.contract import current_cancellation

from . import pagespec
from .errors import InvalidRequest, MissingProgram, ProgramFailed, ProgramTimedOut
from .images import open_image
from .pdf import characters, open_pdf, render_page
from .results import ToolOutput
from .tooling import PATH_DOC, Args, Output, Workspace, document_tool

OCR_DPI = 300
PAGE_TIMEOUT_S = 180
NOT_INSTALLED = "Tesseract is not installed (no `tesseract` found)"
INSTALL_HINT = (
    "install it with `make install` (Debian package tesseract-ocr, plus tesseract-ocr-<lang> for "
    "other languages)"
)

Language = Field(
    default="eng",
    pattern=r"^[A-Za-z_]+(\+[A-Za-z_]+)*$",
    description="Tesseract language(s), e.g. 'eng' or 'eng+deu' (installed: see `tesseract --list-langs`).",
)


def recognize(image: Image.Image, lang: str) -> str:
    """The text Tesseract reads in `image`."""
    program = shutil.which("tesseract")
    if program is None:
        raise MissingProgram(NOT_INSTALLED, hint=INSTALL_HINT)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    argv = [program, "stdin", "stdout", "-l", lang, "--dpi", str(OCR_DPI)]
    cancellation = current_cancellation()
    cancellation.check()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, env={**os.environ, "OMP_THREAD_LIMIT": "1"},
    )
    try:
        with cancellation.on_cancel(lambda: _kill_group(proc)):
            out, err = proc.communicate(buffer.getvalue(), timeout=PAGE_TIMEOUT_S)
        cancellation.check()
    except subprocess.TimeoutExpired as exc:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ProgramTimedOut(f"Tesseract did not finish a page within {PAGE_TIMEOUT_S} s and was stopped",
                              hint="OCR fewer or smaller pages, or check the image") from exc
    if proc.returncode != 0:
        message = err.decode(errors="replace").strip()
        if "Failed loading language" in message or "Error opening data file" in message:
            raise InvalidRequest(
                f"Tesseract has no data for language {lang!r}",
                hint=f"install tesseract-ocr-{lang.split('+')[0]} or use one of the installed languages "
                     f"(`tesseract --list-langs`)",
                field="lang",
            )
        raise ProgramFailed(f"Tesseract failed (exit code {proc.returncode}): {message[-300:]}",
                            hint="check that the file shows text; try another lang")
    return out.decode(errors="replace").strip()


class OcrPdfArgs(Args):
    path: str = Field(description=PATH_DOC)
    pages: pagespec.PageSpec = Field(default="all", description=pagespec.PAGES_DOC + " A few seconds per page: "
                                                                            "narrow it when you can.")
    lang: str = Language


class OcrPageText(Output):
    page: int = Field(description="Page number, 1-based.")
    text: str = Field(description="The text Tesseract read on the page.")


class OcrPdfOutput(Output):
    path: str = Field(description="Absolute path of the PDF read.")
    page_count: int = Field(description="Number of pages in the whole document.")
    pages: list[OcrPageText] = Field(description="The requested pages, in the order asked.")
    lang: str = Field(description="The Tesseract language(s) used.")
    engine: Literal["tesseract"] = Field(description="The OCR engine.")


def ocr_pdf(ws: Workspace, args: OcrPdfArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    with open_pdf(path) as doc:
        page_count = doc.page_count
        selected = pagespec.select_pages(args.pages, page_count)
    pages = []
    for number in selected:
        # Render under the MuPDF lock, recognise outside it, so other tools are not held up.
        with open_pdf(path) as doc:
            image = render_page(doc, number, OCR_DPI / 72).convert("L")
        pages.append(OcrPageText(page=number, text=recognize(image, args.lang)))
    summary = (f"ocr_pdf: {path.name}, {pagespec.describe(selected, page_count)}, "
               f"{characters(sum(len(p.text) for p in pages))} (tesseract, {args.lang})")
    return ToolOutput(data=OcrPdfOutput(path=str(path), page_count=page_count, pages=pages, lang=args.lang,
                                        engine="tesseract"), summary=summary)


class OcrImageArgs(Args):
    path: str = Field(description=PATH_DOC + " EXIF orientation is applied first.")
    lang: str = Language


class OcrImageOutput(Output):
    path: str = Field(description="Absolute path of the image read.")
    text: str = Field(description="The text Tesseract read in the image.")
    lang: str = Field(description="The Tesseract language(s) used.")
    engine: Literal["tesseract"] = Field(description="The OCR engine.")


def ocr_image(ws: Workspace, args: OcrImageArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    with open_image(path) as image:
        upright = ImageOps.exif_transpose(image)
        gray = _on_white(upright.convert("RGBA")).convert("L")
    text = recognize(gray, args.lang)
    return ToolOutput(data=OcrImageOutput(path=str(path), text=text, lang=args.lang, engine="tesseract"),
                      summary=f"ocr_image: {path.name}, {characters(len(text))} (tesseract, {args.lang})")


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL Tesseract's process group, unless it was already reaped (by the waiting thread)."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _on_white(image: Image.Image) -> Image.Image:
    background = Image.new("RGB", image.size, "white")
    background.paste(image, mask=image.getchannel("A"))
    return background


TOOLS = [
    document_tool(
        name="ocr_pdf",
        description=(
            "OCR a scanned / image-only PDF locally with Tesseract (pages rendered at 300 dpi).\n\n"
            "Use this for PDFs whose text is not selectable (scans, photos of documents). For "
            "text-based PDFs prefer read_pdf: it is much faster. For a single image file "
            "(PNG/JPEG/...), use ocr_image.\n\n"
            "Returns: the text read on each requested page, with the document's page count."
        ),
        args=OcrPdfArgs,
        output=OcrPdfOutput,
        run=ocr_pdf,
    ),
    document_tool(
        name="ocr_image",
        description=(
            "OCR a single raster image (PNG/JPEG/WEBP/TIFF/BMP) locally with Tesseract.\n\n"
            "Use this for a photo or screenshot of text. For multi-page documents use ocr_pdf. For "
            "text already selectable in a PDF prefer read_pdf.\n\n"
            "Returns: the text read in the image."
        ),
        args=OcrImageArgs,
        output=OcrImageOutput,
        run=ocr_image,
    ),
]
