"""Rendering document pages into the model's view: `render_document_page`,
`render_document_thumbnail` and `read_document_pages_as_images`.

PDFs are rendered with pymupdf; DOCX / XLSX / PPTX (and other Office files) are converted to
PDF with LibreOffice first. Image files are refused: `read_image` shows those.
"""

from __future__ import annotations

import math

import pymupdf
from pydantic import Field

from . import pagespec
from .convert import as_pdf
from .pdf import Scale, fitted_scale, open_pdf, refuse_images, render_page
from .results import EncodedImage, ToolOutput, encode_for_model
from .tooling import Args, ToolSpec, Workspace

THUMBNAIL_EDGE_PX = 256

_OFFICE_NOTE = (
    "PDF files are rendered directly via pymupdf; DOCX / XLSX / PPTX are first converted to PDF "
    "via LibreOffice headless, then rendered. Rejects image files (.png, .jpg, .gif, .bmp, .tiff, "
    ".webp): use read_image for those. Images larger than 1568 px on the long edge or 3 MB are "
    "scaled down before they are returned."
)


class RenderPageArgs(Args):
    path: str
    page: int = Field(default=1, ge=1)
    scale: Scale = 2.0


def _for_model(doc: pymupdf.Document, number: int, scale: float) -> EncodedImage:
    """Page `number` at `scale`, rendered directly at the size the model may receive."""
    return encode_for_model(render_page(doc, number, fitted_scale(doc, number, scale)))


def render_document_page(ws: Workspace, args: RenderPageArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    refuse_images(path, "read_image")
    with open_pdf(as_pdf(ws, path)) as doc:
        (number,) = pagespec.select_pages(str(args.page), doc.page_count)
        rect = doc[number - 1].rect
        encoded = _for_model(doc, number, args.scale)
        page_count = doc.page_count
    full = (math.ceil(rect.width * args.scale - 1e-3), math.ceil(rect.height * args.scale - 1e-3))
    return ToolOutput(
        data={
            "path": str(path),
            "page": number,
            "page_count": page_count,
            "scale": args.scale,
            "full_width": full[0],
            "full_height": full[1],
            "width": encoded.width,
            "height": encoded.height,
            "scaled_down": (encoded.width, encoded.height) != full,
        },
        images=[encoded],
    )


class ThumbnailArgs(Args):
    path: str
    max_pages: int = Field(default=5, ge=1, le=50)


def render_document_thumbnail(ws: Workspace, args: ThumbnailArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    refuse_images(path, "image_resize")
    images = []
    with open_pdf(as_pdf(ws, path)) as doc:
        count = min(args.max_pages, doc.page_count)
        for number in range(1, count + 1):
            rect = doc[number - 1].rect
            scale = THUMBNAIL_EDGE_PX / max(rect.width, rect.height)
            images.append(encode_for_model(render_page(doc, number, scale)))
        page_count = doc.page_count
    return ToolOutput(
        data={
            "path": str(path),
            "page_count": page_count,
            "pages": list(range(1, count + 1)),
            "sizes": [[i.width, i.height] for i in images],
        },
        images=images,
    )


class PagesAsImagesArgs(Args):
    path: str
    pages: pagespec.PageSpec = "all"
    scale: Scale = 2.0
    max_pages: int = Field(default=20, ge=1, le=200)


def read_document_pages_as_images(ws: Workspace, args: PagesAsImagesArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    refuse_images(path, "read_image")
    images = []
    with open_pdf(as_pdf(ws, path)) as doc:
        selected = pagespec.select_pages(args.pages, doc.page_count)
        kept, dropped = selected[: args.max_pages], selected[args.max_pages :]
        for number in kept:
            images.append(_for_model(doc, number, args.scale))
        page_count = doc.page_count
    data = {
        "path": str(path),
        "page_count": page_count,
        "pages": kept,
        "sizes": [[i.width, i.height] for i in images],
    }
    if dropped:
        data["dropped_pages"] = dropped
        data["hint"] = f"{len(dropped)} page(s) beyond max_pages={args.max_pages} were dropped; ask for them by range"
    return ToolOutput(data=data, images=images)


TOOLS = [
    ToolSpec(
        name="render_document_page",
        description=(
            "Render a single page of a PDF / DOCX / XLSX / PPTX into the model's vision context.\n\n"
            + _OFFICE_NOTE + "\n\n"
            "Args:\n"
            "    path: Path to the document file.\n"
            "    page: Page number to render (1-indexed, default 1).\n"
            "    scale: Render scale factor (default 2.0 for high-DPI; 1.0 is 72 dpi).\n\n"
            "Returns:\n"
            "    JSON {path, page, page_count, scale, rendered_width, rendered_height, width, height, "
            "scaled_down}, then the page as an image block."
        ),
        args=RenderPageArgs,
        run=render_document_page,
    ),
    ToolSpec(
        name="render_document_thumbnail",
        description=(
            "Render low-resolution thumbnails (256 px long edge) for the first N pages of a PDF / "
            "DOCX / XLSX / PPTX into the model's vision context, one image block per page, for "
            "at-a-glance inspection (e.g. picking the page to operate on).\n\n"
            + _OFFICE_NOTE + " For thumbnailing an image, use image_resize.\n\n"
            "Args:\n"
            "    path: Path to the document file.\n"
            "    max_pages: Maximum number of pages to render thumbnails for (default 5).\n\n"
            "Returns:\n"
            "    JSON {path, page_count, pages, sizes}, then one image block per page."
        ),
        args=ThumbnailArgs,
        run=render_document_thumbnail,
    ),
    ToolSpec(
        name="read_document_pages_as_images",
        description=(
            "Render multiple pages of a PDF / DOCX / XLSX / PPTX into the model's vision context as "
            "full-resolution images, one image block per page. This is the vision fallback for "
            "scanned or image/diagram-heavy documents that read_pdf / read_word / read_excel / "
            "read_powerpoint read as near-empty.\n\n"
            "WARNING: pages='all' on a large PDF returns one image per page and can overload the "
            "context window. Prefer a bounded range (e.g. '1-10'). max_pages caps how many pages are "
            "returned; pages beyond the cap are dropped (listed in dropped_pages).\n\n"
            + _OFFICE_NOTE + "\n\n"
            "Args:\n"
            "    path: Path to the document file.\n"
            "    pages: Which pages to render: 'all', '1-5', '1,3,7' or '21-' (1-indexed).\n"
            "    scale: Render scale factor (default 2.0 for high-DPI).\n"
            "    max_pages: Maximum number of page images to return (default 20).\n\n"
            "Returns:\n"
            "    JSON {path, page_count, pages, sizes, dropped_pages?}, then one image block per page."
        ),
        args=PagesAsImagesArgs,
        run=read_document_pages_as_images,
    ),
]
