"""Pointer and keys beyond click/type/press: hover, double/triple/right/middle clicks, drag,
scroll, scrollTo, key chords and sequences, holdKey, and zoom (an enlarged region).

Places are an element (selector or ref: Playwright waits for it, then acts at its centre) or
x, y in screenshot pixels (CSS pixels of the viewport).
"""

from __future__ import annotations

import io
from typing import Any

import anyio
from PIL import Image as PILImage
from playwright.async_api import Page

from . import page_ops as ops
from .errors import BrowserError
from .page_reading import shown, target
from .page_screen import element_box
from .page_results import RESULTS, DragResult, HoldKeyResult, KeyResult, PagePoint, ScrolledToResult, ScrollResult

# Friendly key names a model tends to write, as Playwright spells them.
_KEY_NAMES = {
    "ctrl": "Control", "control": "Control", "alt": "Alt", "option": "Alt", "shift": "Shift",
    "cmd": "Meta", "command": "Meta", "meta": "Meta", "super": "Meta", "win": "Meta",
    "enter": "Enter", "return": "Enter", "esc": "Escape", "escape": "Escape", "tab": "Tab",
    "space": "Space", "backspace": "Backspace", "delete": "Delete", "del": "Delete", "insert": "Insert",
    "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
    "home": "Home", "end": "End", "pageup": "PageUp", "pagedown": "PageDown",
}
ZOOM_WIDTH = 1280  # a zoomed region is enlarged to about this width (at most 4x)


def chord(text: str) -> str:
    """"ctrl+a" -> "Control+a"; names Playwright already knows pass through."""
    return "+".join(_KEY_NAMES.get(part.lower(), part) if len(part) > 1 else part for part in text.split("+"))


async def _point(page: Page, place: ops.PointSpec) -> tuple[float, float]:
    """Viewport coordinates of a place (an element's centre, scrolled into view)."""
    if place.x is not None and place.y is not None:
        return float(place.x), float(place.y)
    locator = page.locator(target(place)).first
    await locator.scroll_into_view_if_needed(timeout=ops.CLICK_TIMEOUT_MS)
    box = await locator.bounding_box(timeout=ops.CLICK_TIMEOUT_MS)
    if box is None:
        raise BrowserError(f"{shown(place)} has no box on the page (hidden?); wait for it or use another element")
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


async def pointer(page: Page, kind: str, p: ops.PointerParams) -> Any:
    """hover / doubleClick / tripleClick / rightClick / middleClick."""
    button = {"rightClick": "right", "middleClick": "middle"}.get(kind, "left")
    count = {"doubleClick": 2, "tripleClick": 3}.get(kind, 1)
    where = shown(p) if p.x is None else PagePoint(x=p.x, y=p.y)
    done = RESULTS[kind]
    if p.x is None:
        selector = target(p)
        if kind == "hover":
            await page.hover(selector, modifiers=p.modifiers, timeout=ops.CLICK_TIMEOUT_MS)
        else:
            await page.click(selector, button=button, click_count=count, modifiers=p.modifiers,
                             timeout=ops.CLICK_TIMEOUT_MS)
        return done(**{kind: where})
    if p.modifiers:
        await focus_document(page)
    for key in p.modifiers:
        await page.keyboard.down(key)
    try:
        if kind == "hover":
            await page.mouse.move(p.x, p.y)
        else:
            await page.mouse.click(p.x, p.y, button=button, click_count=count)
    finally:
        for key in reversed(p.modifiers):
            await page.keyboard.up(key)
    return done(**{kind: where})


async def drag(page: Page, p: ops.DragParams) -> DragResult:
    x0, y0 = await _point(page, p.from_)
    x1, y1 = await _point(page, p.to)
    await page.mouse.move(x0, y0)
    await page.mouse.down()
    try:
        await page.mouse.move(x1, y1, steps=10)
    finally:
        await page.mouse.up()
    return DragResult(from_=PagePoint(x=round(x0), y=round(y0)), to=PagePoint(x=round(x1), y=round(y1)))


async def scroll(page: Page, p: ops.ScrollParams) -> ScrollResult:
    if p.selector is not None or p.ref is not None or p.x is not None:
        x, y = await _point(page, ops.PointSpec(selector=p.selector, ref=p.ref, x=p.x, y=p.y))
    else:
        size = page.viewport_size or await page.evaluate("({width: innerWidth, height: innerHeight})")
        x, y = size["width"] / 2, size["height"] / 2
    await page.mouse.move(x, y)
    step = 100 * p.amount
    dx, dy = {"up": (0, -step), "down": (0, step), "left": (-step, 0), "right": (step, 0)}[p.direction]
    await page.mouse.wheel(dx, dy)
    # The wheel scrolls asynchronously; report where the page is once it settled a frame.
    return ScrollResult(**await page.evaluate(
        "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r({scrollX, scrollY}))))"
    ))


async def scroll_to(page: Page, p: ops.ClickParams) -> ScrolledToResult:
    """Scroll the element into view and say where it is now on the screen (for desktop_execute)."""
    _, box = await element_box(page, target(p), ops.CLICK_TIMEOUT_MS)
    return ScrolledToResult(visible=shown(p), screenBox=box.to_json())


async def focus_document(page: Page) -> None:
    """Give the page's document the keyboard focus before keys that target no element.

    A tab just opened in its own window leaves the focus with the browser's own interface:
    the page then sees a key's keyup without its keydown.
    """
    await page.evaluate("window.focus()")


async def key(page: Page, p: ops.KeyParams) -> KeyResult:
    pressed = [chord(part) for part in p.text.split()]
    await focus_document(page)
    for _ in range(p.repeat):
        for keys in pressed:
            await page.keyboard.press(keys)
    return KeyResult(pressed=pressed, repeat=p.repeat)


async def hold_key(page: Page, p: ops.HoldKeyParams) -> HoldKeyResult:
    keys = chord(p.text).split("+")
    held: list[str] = []
    await focus_document(page)
    try:
        for name in keys:
            await page.keyboard.down(name)
            held.append(name)
        await anyio.sleep(p.duration / 1000)
    finally:
        for name in reversed(held):
            await page.keyboard.up(name)
    return HoldKeyResult(held="+".join(keys), ms=p.duration)


def enlarge(png: bytes, width: int) -> bytes:
    """Scale a region's PNG up to about ZOOM_WIDTH wide (at most 4x) so details are legible."""
    factor = min(4.0, max(1.0, ZOOM_WIDTH / width))
    if factor == 1.0:
        return png
    with PILImage.open(io.BytesIO(png)) as image:
        size = (round(image.width * factor), round(image.height * factor))
        out = io.BytesIO()
        image.resize(size, PILImage.Resampling.LANCZOS).save(out, format="PNG")
    return out.getvalue()
