"""The one coordinate contract of `desktop_execute`: screen pixels, and the pixels of an image
the screen was grabbed into.

An image has a `scale` (image pixels per screen pixel: 0.5 for a half-size grab, 2 for a
zoomed one) and an origin (the screen point of its top-left pixel: 0,0 for the whole screen,
a region's left/top, a window's x/y). `scale_point` maps a point between the two spaces, both
directions, and is the only place that does; `image_scale` decides the scale of a grab from
what a step asked for (`scale`, `maxWidth`, `maxHeight`) and refuses absurd sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

MIN_SCALE = 0.01
MAX_SCALE = 4.0
#: The most pixels one image may have (a zoomed grab of a large screen is refused, not made).
MAX_IMAGE_PIXELS = 4096 * 2048


class ScaleError(ValueError):
    """The size asked for an image cannot be made; the message says what to ask instead."""


@dataclass(frozen=True)
class ImageSpace:
    """Where an image's pixels are on the screen: its scale and the screen point of its top left."""

    scale: float = 1.0
    x: int = 0
    y: int = 0


def scale_point(x: int, y: int, space: ImageSpace, to: Literal["screen", "image"]) -> tuple[int, int]:
    """Map a point between screen pixels and the pixels of an image in `space`.

    `to="screen"`: (x, y) are image pixels; the result is the screen pixel under the centre of
    that image pixel. `to="image"`: (x, y) are screen pixels; the result is the image pixel
    that shows that screen pixel. Mapping a screen point to the image and back lands within one
    image pixel's worth of screen pixels of where it started."""
    s = space.scale
    if to == "screen":
        return space.x + math.floor((x + 0.5) / s), space.y + math.floor((y + 0.5) / s)
    if to == "image":
        return math.floor((x - space.x) * s), math.floor((y - space.y) * s)
    raise ValueError(f"to must be 'screen' or 'image', not {to!r}")


def image_scale(width: int, height: int, scale: float | None = None, max_width: int | None = None,
                max_height: int | None = None) -> float:
    """The scale to grab a `width` x `height` region at: `scale` (default 1), lowered until the
    image fits `max_width` x `max_height`. Raises `ScaleError` when the image would be empty or
    larger than `MAX_IMAGE_PIXELS`."""
    s = 1.0 if scale is None else float(scale)
    if not (MIN_SCALE <= s <= MAX_SCALE) or not math.isfinite(s):
        raise ScaleError(f"scale {scale} is outside {MIN_SCALE} to {MAX_SCALE}")
    if max_width is not None:
        s = min(s, max_width / width)
    if max_height is not None:
        s = min(s, max_height / height)
    out_w, out_h = image_size(width, height, s)
    if out_w * out_h > MAX_IMAGE_PIXELS:
        raise ScaleError(
            f"a {width}x{height} region at scale {s:g} would be a {out_w}x{out_h} image, more than "
            f"{MAX_IMAGE_PIXELS:,} pixels; zoom into a smaller region (screen.grabRegion) instead")
    return s


def image_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """The pixel size of a `width` x `height` region grabbed at `scale` (at least 1x1)."""
    return max(1, round(width * scale)), max(1, round(height * scale))
