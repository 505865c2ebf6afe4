"""The one coordinate contract: `scale_point` both directions, and the scale of a grab decided
from scale, maxWidth and maxHeight (pure functions: no desktop needed)."""

from __future__ import annotations

import itertools

import pytest

from capabilities.browser.desktop_coordinates import (
    MAX_IMAGE_PIXELS,
    ImageSpace,
    ScaleError,
    image_scale,
    image_size,
    scale_point,
)
from capabilities.browser.page_screen import screen_box, viewport_space


def test_half_size_image_pixels_map_to_the_screen_pixels_they_show():
    """Image pixel (10, 20) of a half-size grab shows screen pixels 20..21 x 40..41."""
    half = ImageSpace(0.5)
    assert scale_point(10, 20, half, to="screen") == (21, 41)
    assert scale_point(20, 40, half, to="image") == (10, 20)
    assert scale_point(21, 41, half, to="image") == (10, 20)


def test_zoomed_image_pixels_map_inside_the_screen_pixel_they_enlarge():
    """At scale 2 each screen pixel is 2x2 image pixels; all four map back to it."""
    zoom = ImageSpace(2.0)
    for dx, dy in itertools.product((0, 1), repeat=2):
        assert scale_point(20 + dx, 40 + dy, zoom, to="screen") == (10, 20)
    assert scale_point(10, 20, zoom, to="image") == (20, 40)


@pytest.mark.parametrize("scale", [0.01, 0.25, 0.5, 0.3333, 0.75, 1.0, 1.5, 2.0, 4.0])
def test_screen_to_image_and_back_lands_within_one_image_pixel(scale):
    """Round trips never drift by more than one image pixel's worth of screen pixels."""
    space = ImageSpace(scale, 7, -3)
    for x, y in itertools.product(range(7, 400, 37), range(-3, 300, 29)):
        ix, iy = scale_point(x, y, space, to="image")
        sx, sy = scale_point(ix, iy, space, to="screen")
        assert abs(sx - x) <= max(1, 1 / scale) and abs(sy - y) <= max(1, 1 / scale)
        assert scale_point(sx, sy, space, to="image") == (ix, iy)


def test_origin_shifts_both_directions():
    """An image of a region maps through the region's top left."""
    region = ImageSpace(1.0, 100, 50)
    assert scale_point(0, 0, region, to="screen") == (100, 50)
    assert scale_point(100, 50, region, to="image") == (0, 0)


def test_a_direction_that_is_not_one_is_refused():
    """A typo cannot silently pick a direction."""
    with pytest.raises(ValueError):
        scale_point(1, 1, ImageSpace(), to="scren")  # type: ignore[arg-type]


def test_grab_scale_follows_scale_and_the_max_sizes():
    """scale zooms or shrinks; maxWidth/maxHeight only ever shrink further."""
    assert image_scale(1280, 800) == 1.0
    assert image_scale(1280, 800, max_width=640) == 0.5
    assert image_scale(1280, 800, max_height=200) == 0.25
    assert image_scale(1280, 800, scale=2, max_width=1280) == 1.0
    assert image_scale(100, 50, scale=3) == 3.0
    assert image_scale(1280, 800, scale=0.5, max_width=2000) == 0.5
    assert image_size(1280, 800, 0.5) == (640, 400)
    assert image_size(3, 3, 0.01) == (1, 1)


@pytest.mark.parametrize("kwargs", [{"scale": 0}, {"scale": -1}, {"scale": 4.5}, {"scale": float("nan")},
                                    {"scale": float("inf")}])
def test_absurd_scales_are_refused(kwargs):
    """A scale outside 0.01 to 4 (or not a number) never reaches the encoder."""
    with pytest.raises(ScaleError):
        image_scale(1280, 800, **kwargs)


def test_an_image_past_the_pixel_limit_is_refused_with_what_to_do():
    """A zoom of the whole screen would be huge: refused, pointing at a region instead."""
    with pytest.raises(ScaleError, match="smaller region"):
        image_scale(2560, 1600, scale=4)
    width = MAX_IMAGE_PIXELS // 1000
    assert image_scale(width, 1000) == 1.0


def test_a_maximised_page_viewport_sits_under_the_browser_bars():
    """screenX/Y plus the bars above the page (what outer height has beyond the viewport) is
    where CSS pixel 0,0 of the page is on the screen; zoom scales CSS pixels."""
    geometry = {"sx": 0, "sy": 24, "ow": 1280, "oh": 752, "iw": 1280, "ih": 665, "zoom": 1}
    assert viewport_space(geometry) == ImageSpace(1.0, 0, 111)
    box = screen_box({"x": 60, "y": 80, "width": 140, "height": 48}, geometry)
    assert (box.x, box.y, box.width, box.height) == (60, 191, 140, 48)
    zoomed = {**geometry, "iw": 640, "ih": 332.5, "zoom": 2}
    assert viewport_space(zoomed) == ImageSpace(0.5, 0, 111)
    box = screen_box({"x": 30, "y": 40, "width": 70, "height": 24}, zoomed)
    # At zoom 2 a CSS pixel is 2x2 screen pixels: the box may start at either (half a CSS pixel).
    assert (box.x - 60, box.y - 191) in ((0, 0), (1, 1)) and (box.width, box.height) == (140, 48)
