"""The screenshot PNG encoder: exact pixels, any size, channel order of X's BGRX."""

from __future__ import annotations

import io
import random

import pytest
from PIL import Image

from capabilities.browser.desktop_screen import png_from_bgrx


@pytest.mark.parametrize("size", [(1, 1), (3, 2), (257, 131), (1280, 800)])
def test_png_decodes_to_the_same_pixels(size):
    """What the encoder writes decodes, with Pillow, to exactly the grabbed pixels as RGB."""
    width, height = size
    rng = random.Random(width * height)
    picture = Image.new("RGB", size, "white")
    for _ in range(min(2000, width * height)):
        picture.putpixel((rng.randrange(width), rng.randrange(height)),
                         (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    bgrx = picture.tobytes("raw", "BGRX")
    decoded = Image.open(io.BytesIO(png_from_bgrx(bgrx, width, height)))
    assert decoded.format == "PNG" and decoded.mode == "RGB" and decoded.size == size
    assert decoded.tobytes() == picture.tobytes()
