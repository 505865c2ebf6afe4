"""The page family: `fetch` (a page over plain HTTP as markdown, text or HTML, paged),
`fetch_rendered` (the same, loaded by the session's Chromium in a throwaway context) and
`fetch_image` (an image block)."""

from __future__ import annotations

import io
from typing import Literal

import anyio
import mcp_types as types
from PIL import Image, UnidentifiedImageError
from pydantic import Field

from capabilities import contract
from capabilities.contract import OutputModel
from capabilities.documents.results import encode_for_model

from .errors import NotThisKind
from .fetcher import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, Fetched
from .pages import Format, convert_page, is_textual, page_of
from .tooling import Args, WebState, web_tool

URL_DOC = "The page's URL (http:// or https://)."
DEFAULT_MAX_CHARS = 20_000


class PageArgs(Args):
    url: str = Field(min_length=1, description=URL_DOC)
    format: Format = Field("markdown", description=(
        "markdown (headings, links, lists and tables kept), text (plain), or html (the source as it came)."))
    max_chars: int = Field(DEFAULT_MAX_CHARS, alias="maxChars", ge=1, le=1_000_000,
                           description="At most this many characters of the content in this answer.")
    offset: int = Field(0, ge=0, description=(
        "Where in the content to start, in characters: the next_offset of the previous answer."))
    timeout: float = Field(DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S, description=(
        "Seconds for the whole fetch, redirects included; a page still arriving then is cut off there."))


class PageOutput(OutputModel):
    url: str = Field(description="The URL asked for.")
    final_url: str = Field(description="Where the page was read from, after redirects.")
    status: int = Field(description="The HTTP status of the final response.")
    content_type: str = Field(description="The media type of the final response.")
    title: str | None = Field(None, description="The page's <title>.")
    description: str | None = Field(None, description="The page's meta description.")
    format: Format
    content: str = Field(description="This answer's slice of the content.")
    offset: int = Field(description="Where the slice starts in the content (characters).")
    total_chars: int = Field(description="The length of the whole content (characters).")
    next_offset: int | None = Field(None, description=(
        "Where the next slice starts: call again with offset=next_offset; absent at the end."))
    redirects: list[str] = Field(default_factory=list, description="The redirects followed, in order.")
    cut_off: str | None = Field(None, description=(
        "Why the content is incomplete (the size or time cap), when it is."))


def page_result(output: PageOutput) -> types.CallToolResult:
    """The contract's result of a page: the output, a summary line."""
    shown = f"characters {output.offset}-{output.offset + len(output.content)} of {output.total_chars}"
    more = f"; more from offset={output.next_offset}" if output.next_offset is not None else ""
    title = f" {output.title!r}" if output.title else ""
    cut = f" (cut off: {output.cut_off})" if output.cut_off else ""
    return contract.success(output.model_dump(mode="json", by_alias=False),
                            f"{output.status} {output.final_url}{title}: {output.format}, {shown}{more}{cut}")


def page_output(args: PageArgs, *, url: str, final_url: str, status: int, media_type: str, source: str,
                redirects: list[str], cut_off: str | None) -> PageOutput:
    """Convert a page's source and slice it as `args` ask (CPU-bound: call it in a thread)."""
    converted = convert_page(source, media_type, args.format, final_url)
    part = page_of(converted.content, args.offset, args.max_chars)
    return PageOutput(url=url, final_url=final_url, status=status, content_type=media_type or "text/html",
                      title=converted.title, description=converted.description, format=args.format,
                      content=part.text, offset=part.offset, total_chars=part.total_chars,
                      next_offset=part.next_offset, redirects=redirects, cut_off=cut_off)


async def fetch(state: WebState, args: PageArgs) -> types.CallToolResult:
    fetched = await state.fetcher.get(args.url, timeout=args.timeout,
                                      accept="text/html,application/xhtml+xml,text/*;q=0.9,*/*;q=0.5")
    if not is_textual(fetched.media_type):
        raise NotThisKind(_not_text(fetched), hint=(
            "use fetch_image for images; save other files with exec (curl -o) and read them with documents"))
    source = fetched.text()
    output = await anyio.to_thread.run_sync(lambda: page_output(
        args, url=args.url, final_url=fetched.final_url, status=fetched.status, media_type=fetched.media_type,
        source=source, redirects=fetched.redirects, cut_off=fetched.cut_off))
    return page_result(output)


def _not_text(fetched: Fetched) -> str:
    return (f"{fetched.final_url} is {fetched.media_type} ({len(fetched.body):,} bytes"
            f"{', cut off' if fetched.cut_off else ''}), not a page: fetch reads HTML and text")


class RenderedArgs(PageArgs):
    wait_until: Literal["load", "domcontentloaded", "networkidle"] = Field("load", alias="waitUntil", description=(
        "When the page counts as loaded: load (default), domcontentloaded, or networkidle (no requests "
        "for 0.5 s)."))
    wait_for: str | None = Field(None, alias="waitFor", min_length=1, description=(
        "A CSS selector to wait for after loading (content a script adds later)."))


async def fetch_rendered(state: WebState, args: RenderedArgs) -> types.CallToolResult:
    page = await state.renderer.render(args.url, timeout=args.timeout,
                                       wait_until=args.wait_until, wait_for=args.wait_for)
    output = await anyio.to_thread.run_sync(lambda: page_output(
        args, url=args.url, final_url=page.final_url, status=page.status, media_type="text/html",
        source=page.html, redirects=page.redirects, cut_off=page.cut_off))
    return page_result(output)


class ImageArgs(Args):
    url: str = Field(min_length=1, description="The image's URL (http:// or https://).")
    timeout: float = Field(DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S, description="Seconds for the whole fetch.")


class ImageOutput(OutputModel):
    url: str
    final_url: str
    status: int
    content_type: str
    bytes: int = Field(description="The size of the image as downloaded.")
    format: str = Field(description="The image format Pillow read (PNG, JPEG, GIF, WEBP, ...).")
    width: int = Field(description="The image's own width in pixels.")
    height: int = Field(description="The image's own height in pixels.")
    shown_width: int = Field(description="The width of the image block (scaled to the model's limits).")
    shown_height: int
    image_index: int = Field(description="The index of the image block among the result's images.")
    redirects: list[str] = Field(default_factory=list)


async def fetch_image(state: WebState, args: ImageArgs) -> types.CallToolResult:
    fetched = await state.fetcher.get(args.url, timeout=args.timeout,
                                      accept="image/avif,image/webp,image/png,image/*;q=0.8,*/*;q=0.5")
    if fetched.cut_off:
        raise NotThisKind(f"{fetched.final_url}: the image was not read whole ({fetched.cut_off})",
                          hint="an image this large is better saved with exec (curl -o) and read with documents")
    output, encoded = await anyio.to_thread.run_sync(_image, fetched)
    return contract.success(output.model_dump(mode="json"),
                            f"{output.status} {output.final_url}: {output.format} {output.width}x{output.height}, "
                            f"{output.bytes:,} bytes", [contract.Image(encoded.data, encoded.mime_type)])


def _image(fetched: Fetched):
    try:
        with Image.open(io.BytesIO(fetched.body)) as image:
            image.load()
            fmt, size = image.format or "unknown", image.size
            encoded = encode_for_model(image)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise NotThisKind(f"{fetched.final_url} is not an image that can be read ({fetched.media_type or 'no type'}, "
                          f"{len(fetched.body):,} bytes: {exc})",
                          hint="use fetch for pages; an SVG is text: fetch it with format html") from exc
    output = ImageOutput(url=fetched.url, final_url=fetched.final_url, status=fetched.status,
                         content_type=fetched.media_type, bytes=len(fetched.body), format=fmt,
                         width=size[0], height=size[1], shown_width=encoded.width, shown_height=encoded.height,
                         image_index=0, redirects=fetched.redirects)
    return output, encoded


TOOLS = [
    web_tool(
        name="fetch",
        description=(
            "A web page over plain HTTP as markdown, text or HTML, in slices (offset, next_offset); no scripts run."
            "\n\nReturns its status, final URL and title; long pages come in slices (offset, maxChars, "
            "next_offset). For pages that build themselves with JavaScript use fetch_rendered. Redirects are "
            "followed, each checked against the session's egress policy; a page past the size or time cap "
            "is cut off and says so in cut_off."
        ),
        args=PageArgs, output=PageOutput, run=fetch,
    ),
    web_tool(
        name="fetch_rendered",
        description=(
            "As fetch, for pages built by scripts: loaded by Chromium in a throwaway context (no cookies)."
            "\n\nLoads the page in a throwaway context of the session's Chromium (scripts run; no cookies or "
            "history of the person's profile, nothing kept after) and returns its DOM as markdown, text or "
            "HTML, like fetch. For pages that build their content with JavaScript; slower than fetch. "
            "Every request the page makes is checked against the session's egress policy."
        ),
        args=RenderedArgs, output=PageOutput, run=fetch_rendered,
    ),
    web_tool(
        name="fetch_image",
        description=(
            "An image over HTTP, as an image block (attach it with artifact() to see it) with its dimensions."
            "\n\nThe block is scaled to the model's limits; the result gives the image's format, size and "
            "own dimensions."
        ),
        args=ImageArgs, output=ImageOutput, run=fetch_image,
    ),
]
