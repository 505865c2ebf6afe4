"""Page selections: 'all', '1-5', '1,3,7', '1-3,7' and open-ended '21-' (1-indexed), and
the short form of a list of pages for summaries."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from .errors import InvalidRequest

PAGES_DOC = "Pages, numbered from 1: 'all', '1-5', '1,3,7', mixed '1-3,7', or open-ended '21-' (21 to the end)."

_PART = re.compile(r"^\s*(\d+)\s*(?:(-)\s*(\d+)?)?\s*$")


def check_syntax(spec: str) -> str:
    """Refuse a malformed selection before anything is opened (used by argument models)."""
    if spec.strip().lower() == "all":
        return "all"
    for part in spec.split(","):
        match = _PART.match(part)
        if not match:
            raise ValueError(
                f"pages {spec!r} is not a page selection; use 'all', '1-5', '1,3,7', '1-3,7' or '21-'"
            )
        first, dash, last = match.groups()
        if int(first) < 1:
            raise ValueError("pages are numbered from 1")
        if last is not None and int(last) < int(first):
            raise ValueError(f"the range {part.strip()!r} ends before it starts")
    return spec


def select_pages(spec: str, page_count: int, field: str = "pages") -> list[int]:
    """The 1-indexed pages `spec` names, in order, without repeats.

    Raises:
        InvalidRequest: a page is out of range; the message gives the document's page count.
    """
    if spec.strip().lower() == "all":
        return list(range(1, page_count + 1))
    pages: list[int] = []
    for part in spec.split(","):
        match = _PART.match(part)
        if not match:
            check_syntax(spec)
        first, dash, last = match.groups()
        start = int(first)
        end = start if not dash else (int(last) if last is not None else page_count)
        if start > page_count or end > page_count:
            bad = start if start > page_count else end
            raise InvalidRequest(
                f"page {bad} is out of range: the "
                f"document has {page_count} page{'s' if page_count != 1 else ''} (1-{page_count})",
                hint="ask for pages within it", field=field,
            )
        for page in range(start, end + 1):
            if page not in pages:
                pages.append(page)
    return pages


PageSpec = Annotated[str, AfterValidator(check_syntax)]
"""A page selection string, its syntax checked when the arguments are validated."""


def describe(pages: list[int], page_count: int | None = None) -> str:
    """'page 2', 'pages 1-3, 7' (runs of consecutive pages joined), with ' of N' when given."""
    runs: list[str] = []
    start = prev = None
    for page in pages:
        if prev is not None and page == prev + 1:
            prev = page
            continue
        if start is not None:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = page
    if start is not None:
        runs.append(str(start) if start == prev else f"{start}-{prev}")
    text = ("page " if len(pages) == 1 else "pages ") + (", ".join(runs) or "none")
    return text + (f" of {page_count}" if page_count is not None else "")
