"""Reading a page without screenshots: `readPage`, `find`, `getText`, plus element refs and
`formInput`.

`readPage` and `find` list elements one per line (`role "name" [ref_12] ...`); the ref is kept
in the element's `data-codedesk-ref` attribute, so a later step's `ref` is turned into a plain
selector (`target`) and Playwright's waiting applies. A ref belongs to its document: after a
navigation, or once its element left the DOM, a step using it fails at once with "read the page
again" (`check_ref`) instead of waiting out a timeout.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from playwright.async_api import Page

from . import page_ops as ops
from .errors import BrowserError, NotFound
from .page_results import FilledResult, FindResult, ReadPageResult, SelectedResult, TextResult

REF_ATTRIBUTE = "data-codedesk-ref"


class StaleRef(NotFound):
    """The ref no longer names an element of the page."""


@cache
def _script() -> str:
    return (Path(__file__).with_name("page_reading.js")).read_text()


def target(params: Any) -> str | None:
    """The Playwright selector for a step's element (its selector, or its ref's attribute)."""
    ref = getattr(params, "ref", None)
    if ref is not None:
        return f'[{REF_ATTRIBUTE}="{ref}"]'
    return getattr(params, "selector", None)


def shown(params: Any) -> str | None:
    """How the step named its element, for messages."""
    return getattr(params, "ref", None) or getattr(params, "selector", None)


async def check_ref(page: Page, params: Any) -> None:
    """Fail at once when the step's ref is stale (one round trip, only for steps with a ref)."""
    ref = getattr(params, "ref", None)
    if ref is not None and not await page.evaluate(_script(), {"op": "refExists", "ref": ref}):
        raise StaleRef(
            f"{ref} is no longer on the page (it navigated or the element was removed); "
            "read the page again with readPage or find and use the new ref", field="params.ref"
        )


async def read_page(page: Page, p: ops.ReadPageParams) -> ReadPageResult:
    out = await page.evaluate(
        _script(), {"op": "readPage", "filter": p.filter, "depth": p.depth, "ref": p.ref, "cap": ops.READ_PAGE_CAP}
    )
    if "stale" in out:
        raise StaleRef(f"{p.ref} is no longer on the page; read the page again without ref, then narrow",
                       field="params.ref")
    note = None
    if out["truncated"]:
        note = (f"capped at {ops.READ_PAGE_CAP} elements; narrow with depth (e.g. 2) or with the ref of a "
                "section (readPage {ref: 'ref_N'}), or use find {query}")
    return ReadPageResult(title=out["title"], url=out["url"], elements=out["count"], truncated=out["truncated"],
                          tree="\n".join(out["lines"]), note=note)


async def find(page: Page, p: ops.FindParams) -> FindResult:
    out = await page.evaluate(_script(), {"op": "find", "query": p.query, "limit": ops.FIND_LIMIT})
    return FindResult(matches=out["count"], shown=len(out["lines"]), elements="\n".join(out["lines"]))


async def get_text(page: Page, p: ops.GetTextParams) -> TextResult:
    out = await page.evaluate(_script(), {"op": "getText", "format": p.format})
    text: str = out["text"] or ""
    if len(text) <= ops.TEXT_CAP:
        return TextResult(title=out["title"], url=out["url"], text=text)
    return TextResult(title=out["title"], url=out["url"], text=text[: ops.TEXT_CAP], truncated=True,
                      note=(f"text capped at {ops.TEXT_CAP} of {len(text)} characters; read a part with "
                            "readPage {ref} or evaluate"))


async def form_input(page: Page, p: ops.FormInputParams) -> FilledResult | SelectedResult:
    """Set a field by its kind: fill text, select options, or check/uncheck."""
    locator = page.locator(target(p)).first
    kind = await locator.evaluate(
        "el => el.tagName === 'SELECT' ? 'select' : (el.type === 'checkbox' || el.type === 'radio') ? 'check'"
        " : (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.isContentEditable) ? 'fill' : 'other'",
        timeout=ops.CLICK_TIMEOUT_MS,
    )
    value = p.value
    if kind == "check":
        if not isinstance(value, bool):
            raise BrowserError(f"{shown(p)} is a checkbox or radio: give value true or false", field="params.value")
        await locator.set_checked(value, timeout=ops.CLICK_TIMEOUT_MS)
    elif kind == "select":
        if isinstance(value, bool):
            raise BrowserError(f"{shown(p)} is a <select>: give an option's value or label (or a list of them)",
                               field="params.value")
        selected = await locator.select_option(value if isinstance(value, list) else [value], timeout=ops.CLICK_TIMEOUT_MS)
        return SelectedResult(element=shown(p), selected=selected)
    elif kind == "fill":
        if not isinstance(value, str):
            raise BrowserError(f"{shown(p)} is a text field: give value as a string", field="params.value")
        await locator.fill(value, timeout=ops.CLICK_TIMEOUT_MS)
    else:
        raise BrowserError(f"{shown(p)} is not a form field; use click or type for other elements")
    return FilledResult(element=shown(p), value=value)
