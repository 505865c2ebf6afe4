"""The shared PNG encoder: exact pixels, any size, from X's BGRX screens and from Pillow images."""

from __future__ import annotations

import io
import random

import pytest
from PIL import Image

from capabilities.png import encode_png, png_from_bgrx


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


def test_encode_png_round_trips_every_mode_it_writes():
    """The hand-written PNG encoder decodes to the same pixels in L, LA, RGB and RGBA."""
    for mode in ("L", "LA", "RGB", "RGBA"):
        original = Image.effect_noise((37, 23), 80).convert(mode)
        with Image.open(io.BytesIO(encode_png(original))) as decoded:
            assert decoded.mode == mode
            assert decoded.tobytes() == original.tobytes()
