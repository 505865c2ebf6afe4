"""Where a page's elements are on the screen, so `desktop_execute` can act on what the page
cannot reach (the browser's own dialogs, the file chooser, extensions) and number the page's
elements in `screen.marks`.

How the viewport is found: the page reports its window's place and size (`screenX`,
`screenY`, `outerWidth`, `outerHeight`, which Chromium on X11 gives in screen pixels for the
whole window, tab strip and toolbar included), its viewport's size in CSS pixels
(`innerWidth`, `innerHeight`) and its zoom (`devicePixelRatio`; the screen's own scale is 1
here). What the window has beyond the viewport is split into equal side borders
((outerWidth − innerWidth·zoom) / 2, 0 on a maximised window) and, with the bottom border as
thick as the sides, the browser's bars above the page. A CSS point then maps to the screen
through `scale_point` with scale 1/zoom and the viewport's corner as origin. Limits: a bar
below the page (the downloads bar, docked developer tools) or a viewport emulated with
setViewport moves the page away from where this puts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from .desktop_accessibility import Box
from .desktop_coordinates import ImageSpace, scale_point
from .page_reading import _script

GEOMETRY_TIMEOUT_S = 3.0
MATCH_SLACK = 64  # pixels a page's window may differ from the X window's geometry

_ELEMENT_BOX = """(el) => {
  const r = el.getBoundingClientRect();
  return { box: { x: r.x, y: r.y, width: r.width, height: r.height },
           geometry: { sx: screenX, sy: screenY, ow: outerWidth, oh: outerHeight, iw: innerWidth,
                       ih: innerHeight, zoom: devicePixelRatio } };
}"""


class PageGone(LookupError):
    """The element (or its page) is no longer there."""


@dataclass(frozen=True)
class PageBox:
    """An element of a page: its ref, role and name, and its box in screen pixels."""

    ref: str
    role: str
    name: str
    box: Box


def viewport_space(geometry: dict[str, Any]) -> ImageSpace:
    """The viewport as an image of the screen: CSS pixels per screen pixel, and its corner."""
    zoom = float(geometry.get("zoom") or 1.0)
    side = max(0.0, (geometry["ow"] - geometry["iw"] * zoom) / 2)
    bars = max(0.0, geometry["oh"] - geometry["ih"] * zoom - side)
    return ImageSpace(scale=1 / zoom, x=round(geometry["sx"] + side), y=round(geometry["sy"] + bars))


def screen_box(rect: dict[str, float], geometry: dict[str, Any]) -> Box:
    """A box of the viewport (CSS pixels) in screen pixels."""
    space = viewport_space(geometry)
    x0, y0 = scale_point(rect["x"], rect["y"], space, to="screen")
    x1, y1 = scale_point(rect["x"] + rect["width"], rect["y"] + rect["height"], space, to="screen")
    return Box(x0, y0, max(1, x1 - x0), max(1, y1 - y0))


async def element_box(page: Page, selector: str, timeout_ms: float) -> tuple[dict[str, float], Box]:
    """An element's box in the viewport (CSS pixels) and on the screen, scrolled into view first."""
    locator = page.locator(selector).first
    await locator.scroll_into_view_if_needed(timeout=timeout_ms)
    found = await locator.evaluate(_ELEMENT_BOX, timeout=timeout_ms)
    return found["box"], screen_box(found["box"], found["geometry"])


async def _geometry(page: Page) -> dict[str, Any] | None:
    with anyio.move_on_after(GEOMETRY_TIMEOUT_S):
        try:
            return await page.evaluate(_script(), {"op": "geometry"})
        except PlaywrightError:
            return None
    return None


async def shown_page(pages: Sequence[Page], window: tuple[int, int, int, int] | None) -> Page | None:
    """The page Chromium shows in the window at (x, y, width, height) (or, without one, the
    focused shown page); None when no page is shown there."""
    geometries = [None] * len(pages)

    async def read(i: int, page: Page) -> None:
        geometries[i] = await _geometry(page)

    async with anyio.create_task_group() as group:
        for i, page in enumerate(pages):
            group.start_soon(read, i, page)
    shown = [(page, g) for page, g in zip(pages, geometries) if g is not None and g.get("shown")]
    if window is not None:
        x, y, width, height = window
        shown = [(page, g) for page, g in shown
                 if abs(g["sx"] - x) + abs(g["sy"] - y) + abs(g["ow"] - width) + abs(g["oh"] - height)
                 <= MATCH_SLACK]
    shown.sort(key=lambda pair: not pair[1].get("focused"))
    return shown[0][0] if shown else None


async def page_boxes(page: Page, limit: int) -> tuple[list[PageBox], Box]:
    """The interactive elements a person sees on the page now, top to bottom, with screen
    boxes; and the viewport's box on the screen."""
    try:
        out = await page.evaluate(_script(), {"op": "boxes", "limit": limit})
    except PlaywrightError as exc:
        raise PageGone(f"the page could not be read: {exc.message}") from exc
    geometry = out["geometry"]
    viewport = screen_box({"x": 0, "y": 0, "width": geometry["iw"], "height": geometry["ih"]}, geometry)
    return [PageBox(b["ref"], b["role"], b["name"], screen_box(b["box"], geometry)) for b in out["boxes"]], viewport


async def ref_box(page: Page, ref: str) -> Box:
    """The screen box of the page element `ref` now; `PageGone` when it is not there or not in view."""
    try:
        if page.is_closed():
            raise PageGone(f"the page of {ref} was closed")
        out = await page.evaluate(_script(), {"op": "refBox", "ref": ref})
    except PlaywrightError as exc:
        raise PageGone(f"the page of {ref} could not be read: {exc.message}") from exc
    if out.get("stale"):
        raise PageGone(f"{ref} is no longer on the page (it navigated or the element was removed)")
    if out["box"] is None:
        raise PageGone(f"{ref} is scrolled out of view")
    return screen_box(out["box"], out["geometry"])
