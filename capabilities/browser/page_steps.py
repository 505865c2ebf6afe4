"""Running `browser_execute` operations on a page, one Playwright call per step.

`run_step` returns the step's result (a `page_results` model, or the JSON value of an
`evaluate`) or raises a `BrowserError` of the kind that fits, Playwright's error put into words
a model can act on (`explain`) and kept as `__cause__`. Screenshots are collected into the
call's `Images` and the step's result points at them.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page
from playwright.async_api import TimeoutError as PlaywrightTimeout

from . import page_files as files
from . import page_ops as ops
from . import page_pointer as pointer
from . import page_reading as reading
from . import page_results as results
from .errors import BrowserError, NotFound, TimedOut, Unavailable
from .page_events import DialogAnswer, TabEvents
from .page_reading import shown, target

FAILURE_SHOT_TIMEOUT_MS = 5_000


@dataclass(frozen=True, kw_only=True)
class Image:
    png: bytes
    width: int
    height: int


@dataclass
class Images:
    """The PNGs of one call, in the order they are attached after the text."""

    items: list[Image] = field(default_factory=list)

    def add(self, png: bytes) -> results.ImageRef:
        """Keep a PNG; returns the step result that points at it."""
        width, height = png_size(png)
        self.items.append(Image(png=png, width=width, height=height))
        return results.ImageRef(image_index=len(self.items) - 1, width=width, height=height)


class Shooter(Protocol):
    """Takes a PNG of the tab (the registry brings it to front first)."""

    def __call__(
        self, *, full_page: bool = False, timeout_ms: float | None = None, clip: dict | None = None
    ) -> Awaitable[bytes]: ...


def png_size(png: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    return struct.unpack(">II", png[16:24])


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """What steps of one call work with: the tab's page, the call's images, a screenshot taker
    and the list of named tabs."""

    page: Page
    images: Images
    shoot: Shooter
    list_tabs: Callable[[], Awaitable[list[dict[str, str]]]]
    events: TabEvents
    downloads: Callable[[], Awaitable[files.Downloads]]


async def run_step(ctx: StepContext, op: Any) -> Any:
    """Run one validated operation; returns its result or raises a `BrowserError`."""
    page = ctx.page
    try:
        await reading.check_ref(page, op.params)
        return await _dispatch(ctx, op)
    except PlaywrightTimeout as exc:
        selector = target(op.params)
        present = await _matches(page, selector) if selector else None
        raise explain(op, exc, present=present) from exc
    except PlaywrightError as exc:
        raise explain(op, exc) from exc


_READY = {"domcontentloaded": "document.readyState !== 'loading'", "load": "document.readyState === 'complete'"}


async def _step_history(page: Page, *, forward: bool, wait_until: str) -> str:
    """Go one page back (or forward) in the tab's history and wait for it; returns its URL.

    Driven through the tab's own history (DevTools `Page.navigateToHistoryEntry`), not
    Playwright's `go_back`: a page restored from the back-forward cache fires no load event, and
    that wait never ends; the page's own `document.readyState` tells when it is there. A step
    with no page that way is refused (Playwright's answer to it, no response, is also what a
    same-document step gives)."""
    cdp = await page.context.new_cdp_session(page)
    try:
        history = await cdp.send("Page.getNavigationHistory")
        index, entries = history["currentIndex"], history["entries"]
        goal = index + (1 if forward else -1)
        if not 0 <= goal < len(entries):
            way = "after" if forward else "before"
            raise BrowserError(f"there is no page {way} this one in the tab's history ({index + 1} of "
                               f"{len(entries)})", hint="navigate to the page instead")
        await cdp.send("Page.navigateToHistoryEntry", {"entryId": entries[goal]["id"]})
    finally:
        await cdp.detach()
    url = entries[goal]["url"]
    with anyio.fail_after(ops.NAVIGATE_TIMEOUT_MS / 1000):
        while True:
            try:
                here = await page.evaluate(f"location.href === {json.dumps(url)} && ({_READY.get(wait_until, 'true')})")
            except PlaywrightError:  # the old document went away under the check: look again
                here = False
            if here:
                break
            await anyio.sleep(0.02)
    if wait_until == "networkidle":
        await page.wait_for_load_state("networkidle", timeout=ops.NAVIGATE_TIMEOUT_MS)
    return url


async def _matches(page: Page, selector: str) -> bool | None:
    """Whether anything matches the selector now (None if that cannot be told): on a timeout it
    tells 'no such element' from 'there, but hidden or disabled'."""
    try:
        return await page.locator(selector).count() > 0
    except PlaywrightError:
        return None


async def _dispatch(ctx: StepContext, op: Any) -> Any:
    page, p = ctx.page, op.params
    match op:
        case ops.Navigate():
            response = await page.goto(p.url, wait_until=p.waitUntil, timeout=ops.NAVIGATE_TIMEOUT_MS)
            return results.NavigateResult(url=page.url, title=await page.title(),
                                          status=response.status if response is not None else None)
        case ops.Wait():
            if p.selector is None and p.ref is None:
                await anyio.sleep(p.ms / 1000)
                return results.SleptResult(waited_ms=p.ms)
            timeout = p.ms if p.ms is not None else ops.WAIT_DEFAULT_MS
            await page.wait_for_selector(target(p), state="visible", timeout=timeout)
            return results.VisibleResult(selector=shown(p), visible=True)
        case ops.Click():
            await page.click(target(p), timeout=ops.CLICK_TIMEOUT_MS)
            return results.ClickResult(clicked=shown(p))
        case ops.Type():
            await page.click(target(p), timeout=ops.CLICK_TIMEOUT_MS)
            await page.keyboard.type(p.text, delay=p.delay)
            return results.TypeResult(typed=len(p.text), selector=shown(p))
        case ops.Press():
            await pointer.focus_document(page)
            await page.keyboard.press(p.key)
            return results.PressResult(pressed=p.key)
        case ops.Select():
            selected = await page.select_option(target(p), p.values, timeout=ops.CLICK_TIMEOUT_MS)
            return results.SelectResult(selected=selected)
        case ops.Evaluate():
            return _jsonable(await page.evaluate(p.script))
        case ops.Screenshot():
            return ctx.images.add(await ctx.shoot(full_page=p.fullPage))
        case ops.Url():
            return results.UrlResult(url=page.url, title=await page.title())
        case ops.Back() | ops.Forward():
            url = await _step_history(page, forward=isinstance(op, ops.Forward), wait_until=p.waitUntil)
            return results.NavigateResult(url=url, title=await page.title(), status=None)
        case ops.Reload():
            response = await page.reload(wait_until=p.waitUntil, timeout=ops.NAVIGATE_TIMEOUT_MS)
            return results.NavigateResult(url=page.url, title=await page.title(),
                                          status=response.status if response is not None else None)
        case ops.SetViewport():
            await page.set_viewport_size({"width": p.width, "height": p.height})
            return results.ViewportResult(width=p.width, height=p.height)
        case ops.SetContent():
            await page.set_content(p.html, timeout=ops.NAVIGATE_TIMEOUT_MS)
            return results.ContentResult(url=page.url)
        case ops.ReadPage():
            return await reading.read_page(page, p)
        case ops.Find():
            return await reading.find(page, p)
        case ops.GetText():
            return await reading.get_text(page, p)
        case ops.FormInput():
            return await reading.form_input(page, p)
        case ops.Tabs():
            return results.TabsResult(tabs=[results.TabInfo(**tab) for tab in await ctx.list_tabs()])
        case ops.Console():
            return results.ConsoleResult(**ctx.events.take("console"))
        case ops.Network():
            await ctx.events.settle()
            return results.NetworkResult(**ctx.events.take("network"))
        case ops.Hover() | ops.DoubleClick() | ops.TripleClick() | ops.RightClick() | ops.MiddleClick():
            return await pointer.pointer(page, op.type, p)
        case ops.Drag():
            return await pointer.drag(page, p)
        case ops.Scroll():
            return await pointer.scroll(page, p)
        case ops.ScrollTo():
            return await pointer.scroll_to(page, p)
        case ops.Key():
            return await pointer.key(page, p)
        case ops.HoldKey():
            return await pointer.hold_key(page, p)
        case ops.Zoom():
            region = {"x": p.x0, "y": p.y0, "width": p.x1 - p.x0, "height": p.y1 - p.y0}
            png = await ctx.shoot(clip=region)
            shot = ctx.images.add(pointer.enlarge(png, region["width"]))
            return results.ZoomResult(**dict(shot), region=results.Region(**region))
        case ops.Upload():
            return await files.upload(page, p)
        case ops.Download():
            return await (await ctx.downloads()).fetch(page, p)
        case ops.DialogOp():
            ctx.events.next_dialog = DialogAnswer(accept=p.action == "accept", prompt_text=p.promptText)
            return results.DialogResult(next_dialog=p.action)
    raise AssertionError(f"no handler for {op.type}")  # page_ops and this match go together


async def failure_screenshot(ctx: StepContext) -> results.ImageRef | None:
    """A screenshot of the moment a step failed, or None when the page cannot give one."""
    if ctx.page.is_closed():
        return None
    try:
        return ctx.images.add(await ctx.shoot(timeout_ms=FAILURE_SHOT_TIMEOUT_MS))
    except PlaywrightError:
        return None


def _jsonable(value: Any) -> Any:
    """Playwright's evaluate result as JSON: dates as ISO strings, NaN/Infinity as strings."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


# ---- Playwright errors in words a model can act on

_CLOSED = ("Target page, context or browser has been closed", "Target closed", "Browser has been closed",
           "has been closed", "Session closed")


def explain(op: Any, exc: PlaywrightError, *, present: bool | None = None) -> BrowserError:
    """Playwright's error for `op` as the error that says what went wrong and what to try, of the
    kind that fits (raise it `from exc`).

    `present`: after a timeout, whether an element matched the step's selector (None: unknown,
    judged from Playwright's call log)."""
    message = exc.message or str(exc)
    head = message.split("\nCall log:", 1)[0].strip()
    head = re.sub(r"^\w+\.\w+: ", "", head)  # "Page.click: ..." -> "..."
    log = message.split("\nCall log:", 1)[1] if "\nCall log:" in message else ""
    p = op.params
    if any(marker in message for marker in _CLOSED):
        return Unavailable("the tab was closed or Chromium exited during this step",
                           hint="call browser_execute again: the tab reopens at its last URL")
    selector = shown(p)
    target_field = "params.ref" if getattr(p, "ref", None) else "params.selector"
    if selector and ("while parsing" in head or "Unknown engine" in head or "is not a valid selector" in head):
        return BrowserError(f"{selector!r} is not a valid selector ({head}); use CSS, text=..., role=... or xpath=...",
                            field=target_field)
    if isinstance(exc, PlaywrightTimeout):
        return _explain_timeout(op, log, "resolved to" in log if present is None else present)
    match op:
        case ops.Navigate():
            if "invalid URL" in head:
                return BrowserError(f"cannot navigate to {p.url!r}: it is not a valid URL; give an absolute URL "
                                    "such as https://example.com/", field="params.url")
            net = re.search(r"net::(ERR_[A-Z_]+)", head)
            if net:
                return BrowserError(f"could not load {p.url}: {net.group(1)}; check the URL and that the site is up "
                                    "(the page may still show the previous content)", field="params.url")
            return BrowserError(f"could not load {p.url}: {head}", field="params.url")
        case ops.Evaluate():
            thrown = head.splitlines()[0] if head else "an error"
            return BrowserError(f"the script threw {thrown}; fix the script (it runs in the page as an expression "
                                "or a function)", field="params.script")
        case ops.Press() if "Unknown key" in head:
            return BrowserError(f"unknown key {p.key!r}; use Playwright key names such as Enter, Tab, Escape, "
                                "ArrowDown, Backspace, a, Control+A, Shift+Tab", field="params.key")
        case ops.Select() if "not a <select>" in head or "Element is not a <select>" in head:
            return BrowserError(f"the element matching {selector!r} is not a <select>; point the selector at the "
                                "<select> itself", field=target_field)
    return BrowserError(head or "Playwright failed without a message")


def _explain_timeout(op: Any, log: str, present: bool) -> BrowserError:
    p = op.params
    selector = shown(p)
    target_field = "params.ref" if getattr(p, "ref", None) else "params.selector"
    if isinstance(op, ops.Navigate):
        return TimedOut(f"{p.url} did not reach {p.waitUntil!r} within {ops.NAVIGATE_TIMEOUT_MS // 1000} s",
                        field="params.waitUntil",
                        hint="try waitUntil 'commit' or 'domcontentloaded', then wait for an element")
    if isinstance(op, ops.SetContent):
        return TimedOut(f"the content did not finish loading within {ops.NAVIGATE_TIMEOUT_MS // 1000} s "
                        "(a resource it loads may hang)", field="params.html")
    if isinstance(op, ops.Wait):
        seconds = _seconds(p.ms if p.ms is not None else ops.WAIT_DEFAULT_MS)
        if present:
            return TimedOut(f"an element matches {selector!r} but it did not become visible within {seconds}; "
                            "check whether it is hidden, or wait for what reveals it", field=target_field)
        return NotFound(f"no element matches {selector!r} within {seconds}; check the selector or wait for the page",
                        field=target_field)
    if selector is None:
        return TimedOut(f"the step did not finish in time ({_last_line(log) or 'timeout'})")
    seconds = _seconds(ops.CLICK_TIMEOUT_MS)
    if not present:
        return NotFound(f"no element matches {selector!r} within {seconds}; check the selector or wait for the page",
                        field=target_field)
    if "did not find some options" in log:
        values = getattr(p, "values", None)
        if values is None:
            value = getattr(p, "value", None)
            values = value if isinstance(value, list) else [value]
        return NotFound(f"the <select> matching {selector!r} has no option with value or label "
                        f"{', '.join(map(repr, values))}; read its options with readPage or evaluate first",
                        field="params.values" if hasattr(p, "values") else "params.value")
    why = _last_reason(log)
    return TimedOut(f"an element matches {selector!r} but it could not be used within {seconds}"
                    + (f" ({why})" if why else "")
                    + "; scroll to it, wait for it to be enabled, or close what covers it", field=target_field)


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


def _last_line(log: str) -> str:
    lines = [ln.strip(" -") for ln in log.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _last_reason(log: str) -> str:
    """The last 'element is not visible' / '... intercepts pointer events' line of a call log."""
    reasons = [
        ln.strip(" -")
        for ln in log.splitlines()
        if ln.strip().startswith("- ") and ("element" in ln or "intercepts" in ln) and "waiting for" not in ln
    ]
    return reasons[-1] if reasons else ""
