"""OCR, done locally by Tesseract: `ocr_pdf` (pages rendered at 300 dpi) and `ocr_image`."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess

from PIL import Image, ImageOps
from pydantic import Field

from . import pagespec
from .errors import BadDocument, DocumentError, MissingProgram
from .images import open_image
from .pdf import open_pdf, render_page
from .results import ToolOutput
from .tooling import Args, ToolSpec, Workspace

OCR_DPI = 300
PAGE_TIMEOUT_S = 180
INSTALL_HINT = (
    "Tesseract is not installed (no `tesseract` found); install it with `make install` "
    "(Debian package tesseract-ocr, plus tesseract-ocr-<lang> for other languages)"
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
        raise MissingProgram(INSTALL_HINT)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    argv = [program, "stdin", "stdout", "-l", lang, "--dpi", str(OCR_DPI)]
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, env={**os.environ, "OMP_THREAD_LIMIT": "1"},
    )
    try:
        out, err = proc.communicate(buffer.getvalue(), timeout=PAGE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise DocumentError(f"Tesseract did not finish within {PAGE_TIMEOUT_S} s and was stopped") from exc
    if proc.returncode != 0:
        message = err.decode(errors="replace").strip()
        if "Failed loading language" in message or "Error opening data file" in message:
            raise BadDocument(
                f"Tesseract has no data for language {lang!r}; install tesseract-ocr-{lang.split('+')[0]} "
                f"or use one of the installed languages (`tesseract --list-langs`)"
            )
        raise DocumentError(f"Tesseract failed (exit code {proc.returncode}): {message[-300:]}")
    return out.decode(errors="replace").strip()


class OcrPdfArgs(Args):
    path: str
    pages: pagespec.PageSpec = "all"
    lang: str = Language


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
        pages.append({"page": number, "text": recognize(image, args.lang)})
    return ToolOutput(data={"path": str(path), "page_count": page_count, "pages": pages, "engine": "tesseract"})


class OcrImageArgs(Args):
    path: str
    lang: str = Language


def ocr_image(ws: Workspace, args: OcrImageArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    with open_image(path) as image:
        upright = ImageOps.exif_transpose(image)
        gray = _on_white(upright.convert("RGBA")).convert("L")
    return ToolOutput(data={"path": str(path), "text": recognize(gray, args.lang), "engine": "tesseract"})


def _on_white(image: Image.Image) -> Image.Image:
    background = Image.new("RGB", image.size, "white")
    background.paste(image, mask=image.getchannel("A"))
    return background


TOOLS = [
    ToolSpec(
        name="ocr_pdf",
        description=(
            "OCR a scanned / image-only PDF locally with Tesseract (pages rendered at 300 dpi).\n\n"
            "Use this for PDFs whose text is not selectable (scans, photos of documents). For "
            "text-based PDFs prefer read_pdf: it is much faster. For a single image file "
            "(PNG/JPEG/...), use ocr_image.\n\n"
            "Args:\n"
            "    path: Path to the PDF file.\n"
            "    pages: Which pages to OCR: 'all' (default), a range like '1-5', a list like '1,3,7', "
            "mixed ('1-3,7'), or an open-ended range like '21-' (page 21 to the end). Narrowing pages "
            "reduces latency (a few seconds per page).\n"
            "    lang: Tesseract language(s), default 'eng'.\n\n"
            "Returns:\n"
            "    JSON {path, page_count, pages: [{page, text}], engine}."
        ),
        args=OcrPdfArgs,
        run=ocr_pdf,
    ),
    ToolSpec(
        name="ocr_image",
        description=(
            "OCR a single raster image (PNG/JPEG/WEBP/TIFF/BMP) locally with Tesseract.\n\n"
            "Use this for a photo or screenshot of text. For multi-page documents use ocr_pdf. For "
            "text already selectable in a PDF prefer read_pdf.\n\n"
            "Args:\n"
            "    path: Path to the image file (EXIF orientation is applied first).\n"
            "    lang: Tesseract language(s), default 'eng'.\n\n"
            "Returns:\n"
            "    JSON {path, text, engine}."
        ),
        args=OcrImageArgs,
        run=ocr_image,
    ),
]
