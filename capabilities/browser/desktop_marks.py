"""`screen.marks`: the screen with a numbered box over each interactive element of a window,
and the list of them (`{mark, ref, role, name, box}`), so a script can say "click 7".

Elements come from the window's accessibility tree (native apps: `a_N` refs) and, when the
window is Chromium's, from the page it shows (`ref_N` refs, read through the browser server's
own Playwright connection and put on the screen by `page_screen`). The last list is kept by
`NativeDesktop` for later steps and calls: `mouse.click {mark}` aims at the mark's element where
it is at that moment (read again by its ref), and fails with `MarkError` when the mark was
never given or its element is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from . import desktop_accessibility as access
from .desktop_accessibility import AccessibilityError, Box
from .desktop_coordinates import ImageSpace, scale_point

MIN_SIDE = 4  # pixels: smaller boxes are not marked (nothing a person could aim at)
LABEL_PX = 12
COLORS = ((230, 25, 75), (0, 130, 200), (60, 160, 40), (145, 30, 180), (245, 130, 48), (0, 128, 128))


class MarkError(AccessibilityError):
    """A mark that was never given, or whose element is gone."""

    kind = "not_found"


@dataclass(frozen=True)
class Mark:
    """One numbered box: its element's ref, role and name, its box in screen pixels, and for an
    element of a page, the page (to find the element again by its ref)."""

    number: int
    ref: str
    role: str
    name: str
    box: Box
    page: Any = None

    def to_json(self) -> dict:
        return {"mark": self.number, "ref": self.ref, "role": self.role, "name": self.name,
                "box": self.box.to_json()}


@dataclass(frozen=True)
class Candidate:
    ref: str
    role: str
    name: str
    box: Box
    page: Any = None


def clip(box: Box, bounds: Box) -> Box | None:
    """The part of `box` inside `bounds`; None when too little of it is."""
    x0, y0 = max(box.x, bounds.x), max(box.y, bounds.y)
    x1 = min(box.x + box.width, bounds.x + bounds.width)
    y1 = min(box.y + box.height, bounds.y + bounds.height)
    if x1 - x0 < MIN_SIDE or y1 - y0 < MIN_SIDE:
        return None
    return Box(x0, y0, x1 - x0, y1 - y0)


def native_candidates(roots: list[access.Element], bounds: Box) -> list[Candidate]:
    """The interactive elements of accessibility trees that show inside `bounds`."""
    found = []
    for element in access.walk(roots):
        if element.depth == 0 or not element.interactive or element.box is None:
            continue
        if element.role in access.STRUCTURAL_ROLES and not element.name:
            continue
        box = clip(element.box, bounds)
        if box is not None:
            found.append(Candidate(element.ref, element.role, element.name, box))
    return found


def number(candidates: list[Candidate], limit: int) -> tuple[list[Mark], bool]:
    """Marks numbered from 1 in reading order (rows, then left to right), one per box; and
    whether `limit` cut the list."""
    seen: set[tuple[int, int, int, int]] = set()
    unique = []
    for c in candidates:
        key = (c.box.x, c.box.y, c.box.width, c.box.height)
        if key not in seen:
            seen.add(key)
            unique.append(c)
    unique.sort(key=lambda c: (c.box.y // 10, c.box.x))
    marks = [Mark(i, c.ref, c.role, c.name, c.box, c.page) for i, c in enumerate(unique[:limit], start=1)]
    return marks, len(unique) > limit


def draw(image: Image.Image, marks: list[Mark], space: ImageSpace) -> None:
    """Draw each mark's box and number on `image`, an image of the screen in `space`."""
    canvas = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=LABEL_PX)
    corners = {}
    for mark in marks:  # every box first, then the labels: no box is drawn over a number
        color = COLORS[mark.number % len(COLORS)]
        x0, y0 = scale_point(mark.box.x, mark.box.y, space, to="image")
        x1, y1 = scale_point(mark.box.x + mark.box.width, mark.box.y + mark.box.height, space, to="image")
        canvas.rectangle((x0, y0, max(x0, x1 - 1), max(y0, y1 - 1)), outline=color, width=2)
        corners[mark.number] = x0, y0
    for mark in marks:
        color = COLORS[mark.number % len(COLORS)]
        x0, y0 = corners[mark.number]
        label = str(mark.number)
        left, top, right, bottom = canvas.textbbox((0, 0), label, font=font)
        w, h = right - left + 4, bottom - top + 2
        lx = min(max(0, x0), image.width - w)
        ly = min(max(0, y0 - h if y0 - h >= 0 else y0), image.height - h)
        canvas.rectangle((lx, ly, lx + w - 1, ly + h - 1), fill=color)
        canvas.text((lx + 2 - left, ly + 1 - top), label, fill=(255, 255, 255), font=font)


def centre(marks: dict[int, Mark], number_: int, native_center: Callable[[str], tuple[int, int]],
           page_box: Callable[[Any, str], Box]) -> tuple[int, int]:
    """Where mark `number_`'s element is now (its centre, in screen pixels)."""
    mark = marks.get(number_)
    if mark is None:
        if not marks:
            raise MarkError(f"no mark {number_}: no screen.marks was taken yet (or the session "
                            f"changed since); take screen.marks first")
        raise MarkError(f"no mark {number_}: the last screen.marks numbered 1 to {max(marks)}; "
                        f"take screen.marks again to see what is there now")
    try:
        if mark.page is None:
            return native_center(mark.ref)
        return page_box(mark.page, mark.ref).center
    except (AccessibilityError, LookupError) as exc:
        raise MarkError(f"mark {number_} ({mark.role} {mark.name!r}, {mark.ref}) is no longer on the "
                        f"screen: {exc}; take screen.marks again") from exc
