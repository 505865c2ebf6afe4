"""The one function that decides the screen's size for a viewer's request."""

import pytest

from runtime.desktop.screen import MAX_SIZE, MIN_SIZE, clamp_size


@pytest.mark.parametrize("asked, expected", [
    ((1000, 700), (1000, 700)),
    ((200, 100), (320, 200)),
    ((4000, 3000), (2560, 1600)),
    ((100, 1000), (320, 1000)),
    ((3000, 150), (2560, 200)),
    ((320, 200), (320, 200)),
    ((2560, 1600), (2560, 1600)),
    ((-5, 0), (320, 200)),
])
def test_requested_sizes_are_clamped_per_side(asked, expected):
    """Each side is clamped on its own to 320x200..2560x1600, as the spec's range says."""
    assert clamp_size(*asked) == expected


def test_clamp_range_is_the_spec_range():
    """The framebuffer Xvfb allocates must hold the largest size the viewer may ask for."""
    assert MIN_SIZE == (320, 200) and MAX_SIZE == (2560, 1600)
