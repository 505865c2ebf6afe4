"""Rendering document pages to images: `render_document_page`, `render_document_thumbnail` and
`read_document_pages_as_images`.

PDFs are rendered with pymupdf; DOCX / XLSX / PPTX (and other Office files) are converted to
PDF with LibreOffice first. Image files are refused: `read_image` returns those. Every page
image is an image block of the result, referenced from the structured content by its
`image_index`.
"""

from __future__ import annotations

import math

import pymupdf
from pydantic import Field

from . import pagespec
from .pdf import Scale, fitted_scale, open_pdf, refuse_images, render_page
from .results import EncodedImage, ToolOutput, encode_for_model
from .tooling import PATH_DOC, Args, Output, Workspace, document_tool

THUMBNAIL_EDGE_PX = 256

_OFFICE_NOTE = (
    "PDF files are rendered directly with pymupdf; DOCX / XLSX / PPTX are converted to PDF with "
    "LibreOffice headless first. Image files (.png, .jpg, .gif, .bmp, .tiff, .webp) are refused: use "
    "read_image for those. Page images larger than 1568 px on the long edge or 3 MB are scaled down. "
    "In a script, attach an image block with artifact() to look at it."
)
_SCALE_DOC = "Render scale: 1.0 is 72 dpi (1 pixel per PDF point), 2.0 is 144 dpi."


class RenderedPage(Output):
    page: int = Field(description="Page number, 1-based.")
    width: int = Field(description="Width of the page's image block, in pixels.")
    height: int = Field(description="Height of the page's image block, in pixels.")
    image_index: int = Field(description="Index of the page's image among the result's image blocks (0-based).")


class RenderPageArgs(Args):
    path: str = Field(description=PATH_DOC + " A PDF, or an Office file (DOCX, XLSX, PPTX, ...).")
    page: int = Field(default=1, ge=1, description="Page to render, 1-based.")
    scale: Scale = Field(default=2.0, description=_SCALE_DOC)


class RenderPageOutput(Output):
    path: str = Field(description="Absolute path of the document.")
    page: int = Field(description="The page rendered, 1-based.")
    page_count: int = Field(description="Number of pages in the whole document.")
    scale: float = Field(description="The scale asked for (1.0 is 72 dpi).")
    full_width: int = Field(description="Width of the page at that scale, in pixels, before any scaling down.")
    full_height: int = Field(description="Height of the page at that scale, in pixels, before any scaling down.")
    width: int = Field(description="Width of the image block returned, in pixels.")
    height: int = Field(description="Height of the image block returned, in pixels.")
    scaled_down: bool = Field(description="Whether the image was scaled down to the image limits.")
    image_index: int = Field(description="Index of the page's image among the result's image blocks (0-based).")


def _for_model(doc: pymupdf.Document, number: int, scale: float) -> EncodedImage:
    """Page `number` at `scale`, rendered directly at the size the model may receive."""
    return encode_for_model(render_page(doc, number, fitted_scale(doc, number, scale)))


def render_document_page(ws: Workspace, args: RenderPageArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    refuse_images(path, "read_image")
    with open_pdf(ws.office.pdf_of(path)) as doc:
        (number,) = pagespec.select_pages(str(args.page), doc.page_count, field="page")
        rect = doc[number - 1].rect
        encoded = _for_model(doc, number, args.scale)
        page_count = doc.page_count
    full = (math.ceil(rect.width * args.scale - 1e-3), math.ceil(rect.height * args.scale - 1e-3))
    data = RenderPageOutput(
        path=str(path), page=number, page_count=page_count, scale=args.scale, full_width=full[0],
        full_height=full[1], width=encoded.width, height=encoded.height,
        scaled_down=(encoded.width, encoded.height) != full, image_index=0,
    )
    summary = (f"render_document_page: {path.name}, page {number} of {page_count}, "
               f"{encoded.width}x{encoded.height} px{' (scaled down)' if data.scaled_down else ''}")
    return ToolOutput(data=data, summary=summary, images=[encoded])


class ThumbnailArgs(Args):
    path: str = Field(description=PATH_DOC + " A PDF, or an Office file (DOCX, XLSX, PPTX, ...).")
    max_pages: int = Field(default=5, ge=1, le=50, description="How many pages, from the first, to render.")


class ThumbnailOutput(Output):
    path: str = Field(description="Absolute path of the document.")
    page_count: int = Field(description="Number of pages in the whole document.")
    pages: list[RenderedPage] = Field(description="One thumbnail per page, from page 1, in order.")


def _rendered(pages: list[int], images: list[EncodedImage]) -> list[RenderedPage]:
    return [RenderedPage(page=number, width=image.width, height=image.height, image_index=index)
            for index, (number, image) in enumerate(zip(pages, images))]


def render_document_thumbnail(ws: Workspace, args: ThumbnailArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    refuse_images(path, "image_resize")
    images = []
    with open_pdf(ws.office.pdf_of(path)) as doc:
        count = min(args.max_pages, doc.page_count)
        for number in range(1, count + 1):
            rect = doc[number - 1].rect
            scale = THUMBNAIL_EDGE_PX / max(rect.width, rect.height)
            images.append(encode_for_model(render_page(doc, number, scale)))
        page_count = doc.page_count
    pages = list(range(1, count + 1))
    data = ThumbnailOutput(path=str(path), page_count=page_count, pages=_rendered(pages, images))
    summary = f"render_document_thumbnail: {path.name}, {pagespec.describe(pages, page_count)}, {len(images)} thumbnail(s)"
    return ToolOutput(data=data, summary=summary, images=images)


class PagesAsImagesArgs(Args):
    path: str = Field(description=PATH_DOC + " A PDF, or an Office file (DOCX, XLSX, PPTX, ...).")
    pages: pagespec.PageSpec = Field(default="all", description=pagespec.PAGES_DOC + " Prefer a bounded range.")
    scale: Scale = Field(default=2.0, description=_SCALE_DOC)
    max_pages: int = Field(default=20, ge=1, le=200, description="At most this many page images are returned; "
                                                                  "the pages beyond are listed in dropped_pages.")


class PagesAsImagesOutput(Output):
    path: str = Field(description="Absolute path of the document.")
    page_count: int = Field(description="Number of pages in the whole document.")
    pages: list[RenderedPage] = Field(description="The pages rendered, in the order asked.")
    dropped_pages: list[int] | None = Field(default=None, description="Pages asked for but not rendered "
                                                                      "(beyond max_pages), 1-based.")
    hint: str | None = Field(default=None, description="Set when pages were dropped: how to get them.")


def read_document_pages_as_images(ws: Workspace, args: PagesAsImagesArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    refuse_images(path, "read_image")
    images = []
    with open_pdf(ws.office.pdf_of(path)) as doc:
        selected = pagespec.select_pages(args.pages, doc.page_count)
        kept, dropped = selected[: args.max_pages], selected[args.max_pages :]
        for number in kept:
            images.append(_for_model(doc, number, args.scale))
        page_count = doc.page_count
    data = PagesAsImagesOutput(path=str(path), page_count=page_count, pages=_rendered(kept, images))
    summary = f"read_document_pages_as_images: {path.name}, {pagespec.describe(kept, page_count)}"
    if dropped:
        data.dropped_pages = dropped
        data.hint = f"{len(dropped)} page(s) beyond max_pages={args.max_pages} were dropped; ask for them by range"
        summary += f"; {pagespec.describe(dropped)} dropped (over max_pages={args.max_pages})"
    return ToolOutput(data=data, summary=summary, images=images)


TOOLS = [
    document_tool(
        name="render_document_page",
        description=(
            "Render one page of a PDF / DOCX / XLSX / PPTX to an image.\n\n" + _OFFICE_NOTE + "\n\n"
            "Returns: the page's image block (image_index) and its sizes, with the document's page count."
        ),
        args=RenderPageArgs,
        output=RenderPageOutput,
        run=render_document_page,
    ),
    document_tool(
        name="render_document_thumbnail",
        description=(
            "Render small thumbnails (256 px long edge) of the first pages of a PDF / DOCX / XLSX / "
            "PPTX, for a glance at the layout (e.g. to pick the page to work on). For a thumbnail of "
            "an image file, use image_resize.\n\n" + _OFFICE_NOTE + "\n\n"
            "Returns: one image block per page, each listed with its page number and image_index."
        ),
        args=ThumbnailArgs,
        output=ThumbnailOutput,
        run=render_document_thumbnail,
    ),
    document_tool(
        name="read_document_pages_as_images",
        description=(
            "Render several pages of a PDF / DOCX / XLSX / PPTX to full-resolution images, one per page: "
            "the way to see scanned or image- and diagram-heavy documents that read_pdf / read_word / "
            "read_excel / read_powerpoint read as near-empty.\n\n"
            "pages='all' on a large document makes one image per page: prefer a bounded range (e.g. "
            "'1-10'). At most max_pages images are returned; the pages beyond are listed in "
            "dropped_pages.\n\n" + _OFFICE_NOTE + "\n\n"
            "Returns: one image block per page, each listed with its page number and image_index."
        ),
        args=PagesAsImagesArgs,
        output=PagesAsImagesOutput,
        run=read_document_pages_as_images,
    ),
]
