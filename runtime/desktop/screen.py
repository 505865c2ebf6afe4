"""The X screen's size: clamping a viewer's request and applying it through RandR on Xvfb.

Xvfb starts with a framebuffer of the largest size (2560x1600); a new size is a RandR mode
added to its one output and selected. The supervisor keeps one connection (`ScreenSizer`)
open for the whole session, so a resize costs a few X requests, not an `xrandr` process.
(Xvfb runs with -noreset: without it, the server resets when its last client leaves and
the screen falls back to the full framebuffer.)
"""

from __future__ import annotations

from Xlib import X, display as xdisplay, error as xerror
from Xlib.ext import randr

MIN_SIZE = (320, 200)
MAX_SIZE = (2560, 1600)
START_SIZE = (1280, 800)
# Millimetres per pixel at 96 dpi, so applications see a sane DPI after a resize.
_MM_PER_PX = 25.4 / 96


def clamp_size(width: int, height: int) -> tuple[int, int]:
    """The size the screen takes for a requested one: each side clamped to 320x200..2560x1600."""
    w = min(max(int(width), MIN_SIZE[0]), MAX_SIZE[0])
    h = min(max(int(height), MIN_SIZE[1]), MAX_SIZE[1])
    return w, h


class ScreenSizer:
    """Holds an X connection to the session's display and sets its screen size."""

    def __init__(self, display_name: str) -> None:
        self._display = xdisplay.Display(display_name)
        self._root = self._display.screen().root
        res = self._root.xrandr_get_screen_resources()
        if not res.outputs or not res.crtcs:
            self._display.close()
            raise RuntimeError(f"display {display_name} has no RandR output to resize")
        self._output = res.outputs[0]
        self._crtc = res.crtcs[0]
        self._modes: dict[tuple[int, int], int] = {}

    @property
    def display(self) -> xdisplay.Display:
        return self._display

    def size(self) -> tuple[int, int]:
        geom = self._root.get_geometry()
        return geom.width, geom.height

    def set_size(self, width: int, height: int) -> tuple[int, int]:
        """Clamp, then make the screen exactly that size; returns the size set."""
        w, h = clamp_size(width, height)
        if (w, h) == self.size():
            return w, h
        res = self._root.xrandr_get_screen_resources()
        mode = self._mode_for(res, w, h)
        cur_w, cur_h = self.size()
        # The screen must hold the CRTC at every step: grow it first, shrink it last.
        big_w, big_h = max(w, cur_w), max(h, cur_h)
        if (big_w, big_h) != (cur_w, cur_h):
            self._set_screen(big_w, big_h)
        self._display.xrandr_set_crtc_config(
            self._crtc, res.config_timestamp, 0, 0, mode, randr.Rotate_0, [self._output]
        )
        if (w, h) != (big_w, big_h):
            self._set_screen(w, h)
        self._display.sync()
        return self.size()

    def _set_screen(self, w: int, h: int) -> None:
        self._root.xrandr_set_screen_size(w, h, round(w * _MM_PER_PX), round(h * _MM_PER_PX))

    def _mode_for(self, res, w: int, h: int) -> int:
        if (w, h) in self._modes:
            return self._modes[(w, h)]
        for m in res.modes:
            if (m.width, m.height) == (w, h):
                self._modes[(w, h)] = m.id
                return m.id
        name = f"{w}x{h}"
        info = {
            "id": 0, "width": w, "height": h, "dot_clock": 60 * w * h,
            "h_sync_start": w, "h_sync_end": w, "h_total": w, "h_skew": 0,
            "v_sync_start": h, "v_sync_end": h, "v_total": h,
            "name_length": len(name), "flags": 0,
        }
        mode = self._root.xrandr_create_mode(info, name).mode
        self._display.xrandr_add_output_mode(self._output, mode)
        self._modes[(w, h)] = mode
        return mode

    def has_window_manager(self) -> bool:
        """Whether a window manager has announced itself (EWMH `_NET_SUPPORTING_WM_CHECK`)."""
        atom = self._display.intern_atom("_NET_SUPPORTING_WM_CHECK")
        prop = self._root.get_full_property(atom, X.AnyPropertyType)
        return bool(prop and prop.value)

    def selection_owned(self, name: str) -> bool:
        atom = self._display.intern_atom(name)
        return self._display.get_selection_owner(atom) != X.NONE

    def window_classes(self) -> set[str]:
        """WM_CLASS class names of the top-level windows (and of those inside WM frames)."""
        found: set[str] = set()
        try:
            for win in self._root.query_tree().children:
                for w in [win, *win.query_tree().children]:
                    try:
                        cls = w.get_wm_class()
                    except xerror.XError:
                        continue
                    if cls:
                        found.update(cls)
        except xerror.XError:
            pass
        return found

    def close(self) -> None:
        try:
            self._display.close()
        except Exception:  # the display may already be gone
            pass
