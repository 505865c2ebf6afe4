"""A page's content as the model reads it: HTML converted to markdown or plain text, then paged.

The conversion is `html-to-markdown` (a maintained converter with a Rust core): headings, links
(made absolute against the page's URL), lists and tables are kept; scripts and styles dropped.
Its metadata gives the title and description, so the markdown carries no front matter.

Paging is by characters of the converted content: `offset` and `maxChars` pick the slice, and
`next_offset` says where the next one starts (absent at the end).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from html_to_markdown import ConversionOptions, convert

Format = Literal["markdown", "text", "html"]

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/javascript", "application/ld+json",
                        "application/rss+xml", "application/atom+xml", "image/svg+xml"})


@dataclass(frozen=True, kw_only=True)
class Converted:
    """A page's content in the asked format, with what its head says."""

    content: str
    title: str | None = None
    description: str | None = None


def is_textual(media_type: str) -> bool:
    """Whether a body of this media type is read as text (an empty type is taken as HTML)."""
    return (not media_type or media_type in HTML_TYPES or media_type.startswith("text/")
            or media_type in TEXT_TYPES or media_type.endswith("+json") or media_type.endswith("+xml"))


def convert_page(source: str, media_type: str, fmt: Format, base_url: str) -> Converted:
    """`source` (the body as text) in format `fmt`. HTML (or a body with no type) is converted;
    other text (JSON, plain text, XML) is returned as it is in every format."""
    if media_type and media_type not in HTML_TYPES:
        return Converted(content=source)
    options = ConversionOptions(extract_metadata=True, base_url=base_url,
                                output_format="plain" if fmt == "text" else "markdown")
    converted = convert(source, options)
    document = converted.metadata.document if converted.metadata is not None else None
    title = (document.title or None) if document is not None else None
    description = (document.description or None) if document is not None else None
    if fmt == "html":
        return Converted(content=source, title=title, description=description)
    return Converted(content=_without_front_matter(converted.content or ""), title=title, description=description)


def _without_front_matter(markdown: str) -> str:
    """The converter writes the metadata it extracted as a YAML block first; the tools return
    it as fields instead."""
    if not markdown.startswith("---\n"):
        return markdown
    end = markdown.find("\n---\n", 4)
    return markdown if end == -1 else markdown[end + 5:].lstrip("\n")


@dataclass(frozen=True, kw_only=True)
class Slice:
    """One page of a content: its text, where it starts, the whole length, and where the next starts."""

    text: str
    offset: int
    total_chars: int
    next_offset: int | None


def page_of(content: str, offset: int, max_chars: int) -> Slice:
    """The `max_chars` characters of `content` from `offset` (an offset past the end gives "")."""
    text = content[offset: offset + max_chars]
    end = offset + len(text)
    return Slice(text=text, offset=offset, total_chars=len(content),
                 next_offset=end if end < len(content) else None)
