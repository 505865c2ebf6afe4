"""One connection to the session's X display: real input through XTEST, windows through EWMH,
the screen through mss, the clipboard through xclip.

Errors of the layers below (Xlib, mss, xclip) are raised as `DesktopError` (`DisplayUnavailable`
when the display cannot be reached at all), the original kept as `__cause__`. Not thread-safe: callers use one connection from one thread at a time.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from functools import cached_property

import mss
from PIL import Image
from Xlib import X, Xatom, display as xdisplay, error as xerror
from Xlib.ext import xtest

from ..session import SessionInfo
from .desktop_env import desktop_env
from .errors import BrowserError, Unavailable
from .desktop_keys import KEYS
from ..png import encode_png, png_from_bgrx
from .desktop_coordinates import image_size

CLIPBOARD_TIMEOUT_S = 5


class DesktopError(BrowserError):
    """The display, a window or the clipboard did not do what a step asked."""


class DisplayUnavailable(DesktopError, Unavailable):
    """The session's display cannot be opened, or its connection closed."""

    kind = "unavailable"


def open_display(session: SessionInfo, error: type[DesktopError]) -> xdisplay.Display:
    """A new connection to the session's X display; `error` when it cannot be opened."""
    # libX11 (mss) and python-xlib read the cookie file from the environment.
    xauthority = session.env.get("XAUTHORITY")
    if xauthority:
        os.environ["XAUTHORITY"] = xauthority
    try:
        return xdisplay.Display(session.display)
    except (xerror.DisplayError, OSError) as exc:
        raise error(f"cannot open the desktop's display {session.display}: {exc}; is the session up? "
                    f"(`codedesk desktop status`)") from exc


class XClient:
    """A connection of its own to the session's display, and the property reading its users
    share: atoms, text properties, the root window's lists of windows. A subclass's `_call`
    says how a failed request is reported."""

    def __init__(self, session: SessionInfo, error: type[DesktopError]) -> None:
        self.session = session
        self._x = open_display(session, error)
        self._root = self._x.screen().root
        self._atoms: dict[str, int] = {}

    def _call(self, fn, *args, **kwargs):
        raise NotImplementedError

    def _atom(self, name: str) -> int:
        if name not in self._atoms:
            self._atoms[name] = self._call(self._x.intern_atom, name)
        return self._atoms[name]

    def _text(self, window, name: str) -> str | None:
        prop = window.get_full_property(self._atom(name), X.AnyPropertyType)
        if prop is None:
            return None
        value = prop.value
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def _title(self, window) -> str:
        title = self._text(window, "_NET_WM_NAME")
        return title if title is not None else self._text(window, "WM_NAME") or ""

    def _root_ids(self, name: str) -> list[int] | None:
        """A list of windows on the root (_NET_CLIENT_LIST, _NET_ACTIVE_WINDOW); None when unset."""
        prop = self._call(self._root.get_full_property, self._atom(name), Xatom.WINDOW)
        return None if prop is None else [int(v) for v in prop.value]


@dataclass(frozen=True, kw_only=True)
class Window:
    """A top-level window: its X id, title, owner's pid (None when unknown) and its client
    area in screen pixels."""

    id: int
    title: str
    pid: int | None
    x: int
    y: int
    width: int
    height: int

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "pid": self.pid, "x": self.x, "y": self.y,
                "width": self.width, "height": self.height}


@dataclass(frozen=True, kw_only=True)
class Grab:
    """Pixels of part of the screen (or of one window), as grabbed: BGRX rows, the region's
    size and its top-left on the screen, when it was taken and the screen's size then."""

    raw: bytes | bytearray
    width: int
    height: int
    left: int = 0
    top: int = 0
    at: float = field(default_factory=time.time)
    screen: tuple[int, int] = (0, 0)

    @cached_property
    def png(self) -> bytes:
        """The grab as a PNG at its own size."""
        return png_from_bgrx(self.raw, self.width, self.height)

    def image(self, scale: float = 1.0) -> Image.Image:
        """The grab as an RGB image, resized to `scale` (image pixels per screen pixel)."""
        size = image_size(self.width, self.height, scale)
        # Read BGRX as if it were RGBX, resize, and swap the channels back when packing.
        pixels = Image.frombuffer("RGBX", (self.width, self.height), self.raw, "raw", "RGBX", 0, 1)
        if size != (self.width, self.height):
            pixels = pixels.resize(size, Image.Resampling.BILINEAR if scale < 1 else Image.Resampling.LANCZOS)
        return Image.frombytes("RGB", size, pixels.tobytes("raw", "BGR"))

    def encode(self, scale: float = 1.0) -> tuple[bytes, int, int]:
        """A PNG of the grab at `scale`, and its width and height."""
        if scale == 1.0:
            return self.png, self.width, self.height
        image = self.image(scale)
        return encode_png(image), image.width, image.height


class DisplayConnection(XClient):
    """The session's display, as a person at its mouse and keyboard uses it.

    Keeps track of the keys and buttons it holds down so `release_held()` can let them all
    go, whatever happened in between.
    """

    def __init__(self, session: SessionInfo) -> None:
        super().__init__(session, DisplayUnavailable)
        self.name = session.display
        if not self._x.has_extension("XTEST"):
            self._x.close()
            raise DisplayUnavailable(f"display {self.name} has no XTEST extension: no way to send input")
        try:
            self._screen = mss.MSS(display=self.name)
        except mss.ScreenShotError as exc:
            self._x.close()
            raise DisplayUnavailable(f"cannot read the screen of {self.name}: {exc}") from exc
        self._last_size: tuple[int, int] = (0, 0)
        self._keymap: dict[int, tuple[int, bool]] = {}
        self._spare_keycodes: list[int] = []
        self.held_keys: dict[int, None] = {}  # keycodes, in the order pressed
        self.held_buttons: dict[int, None] = {}
        self.read_keymap()

    def close(self) -> None:
        """Let go of everything held and close the connection."""
        try:
            self.release_held()
        except DesktopError:
            pass
        for close in (self._screen.close, self._x.close):
            try:
                close()
            except Exception:  # a broken connection closes as far as it can
                pass

    # -- screen ---------------------------------------------------------------------------

    def screen_size(self) -> tuple[int, int]:
        """The screen's size now (it follows the viewer's window, so ask the server)."""
        geometry = self._call(self._root.get_geometry)
        return geometry.width, geometry.height

    def grab(self, left: int, top: int, width: int, height: int) -> Grab:
        """The region's pixels, as they are now."""
        at = time.time()
        raw = self._grab_raw(left, top, width, height)
        return Grab(raw=raw, width=width, height=height, left=left, top=top, at=at,
                    screen=self._last_size)

    def color_at(self, x: int, y: int) -> tuple[int, int, int]:
        """The (r, g, b) of one pixel."""
        raw = self._grab_raw(x, y, 1, 1)
        return raw[2], raw[1], raw[0]

    def _grab_raw(self, left: int, top: int, width: int, height: int) -> bytearray:
        screen_w, screen_h = self._last_size = self.screen_size()
        if left + width > screen_w or top + height > screen_h:
            raise DesktopError(
                f"region {left},{top} {width}x{height} is past the screen's edge; the screen "
                f"is {screen_w}x{screen_h} now (a viewer resized it)")
        try:
            shot = self._screen.grab({"left": left, "top": top, "width": width, "height": height})
        except mss.ScreenShotError as exc:
            raise DesktopError(f"cannot read the screen: {exc}") from exc
        return shot.raw

    # -- pointer --------------------------------------------------------------------------

    def pointer(self) -> tuple[int, int]:
        reply = self._call(self._root.query_pointer)
        return reply.root_x, reply.root_y

    def move_pointer(self, x: int, y: int) -> None:
        self._fake(X.MotionNotify, x=x, y=y)

    def press_button(self, button: int) -> None:
        self.held_buttons[button] = None
        self._fake(X.ButtonPress, button)

    def release_button(self, button: int) -> None:
        self.held_buttons.pop(button, None)
        self._fake(X.ButtonRelease, button)

    # -- keyboard -------------------------------------------------------------------------

    def read_keymap(self) -> None:
        """Learn which keycode types each keysym (and whether it needs Shift)."""
        first = self._x.display.info.min_keycode
        count = self._x.display.info.max_keycode - first + 1
        rows = self._call(self._x.get_keyboard_mapping, first, count)
        keymap: dict[int, tuple[int, bool]] = {}
        spare: list[int] = []
        for offset, syms in enumerate(rows):
            keycode = first + offset
            if not any(syms):
                spare.append(keycode)
            for level, keysym in enumerate(syms[:2]):
                if keysym and (keysym not in keymap or (not level and keymap[keysym][1])):
                    keymap[keysym] = (keycode, level == 1)
        self._keymap, self._spare_keycodes = keymap, spare

    def key_for(self, keysym: int) -> tuple[int, bool]:
        """The (keycode, needs Shift) typing `keysym`; binds a spare keycode when none does."""
        found = self._keymap.get(keysym)
        if found is not None:
            return found
        if not self._spare_keycodes:
            raise DesktopError(f"no free keycode to bind keysym {keysym:#x} to")
        keycode = self._spare_keycodes.pop()
        width = len(self._call(self._x.get_keyboard_mapping, keycode, 1)[0])
        self._call(self._x.change_keyboard_mapping, keycode, [(keysym,) * width])
        self._x.sync()
        time.sleep(0.05)  # let clients take in the MappingNotify before the key arrives
        self._keymap[keysym] = (keycode, False)
        return keycode, False

    def press_key(self, keycode: int) -> None:
        self.held_keys[keycode] = None
        self._fake(X.KeyPress, keycode)

    def release_key(self, keycode: int) -> None:
        self.held_keys.pop(keycode, None)
        self._fake(X.KeyRelease, keycode)

    def shift_keycode(self) -> int:
        return self.key_for(KEYS["LeftShift"])[0]

    def release_held(self) -> list[str]:
        """Release every key and button this connection holds down; says which."""
        released = []
        for keycode in reversed(list(self.held_keys)):
            self.release_key(keycode)
            released.append(f"keycode {keycode}")
        for button in reversed(list(self.held_buttons)):
            self.release_button(button)
            released.append(f"button {button}")
        return released

    def pressed_keycodes(self) -> set[int]:
        """Keycodes the server sees down right now (from anyone), via XQueryKeymap."""
        bitmap = self._call(self._x.query_keymap)
        return {byte * 8 + bit for byte, bits in enumerate(bitmap) for bit in range(8)
                if bits & (1 << bit)}

    # -- windows (EWMH) -------------------------------------------------------------------

    def windows(self) -> list[Window]:
        """The window manager's client list (EWMH), oldest first; with no EWMH window manager,
        the mapped top-level windows that have a title."""
        ids = self._root_ids("_NET_CLIENT_LIST")
        if ids is None and not self._root_ids("_NET_SUPPORTING_WM_CHECK"):
            ids = [child.id for child in self._call(self._root.query_tree).children]
            found = [w for w in (self._window(i) for i in ids) if w is not None]
            return [w for w in found if w.title]
        return [w for w in (self._window(i) for i in ids or []) if w is not None]

    def active_window(self) -> Window | None:
        ids = self._root_ids("_NET_ACTIVE_WINDOW")
        if ids:
            return self._window(ids[0]) if ids[0] else None
        focus = self._call(self._x.get_input_focus).focus
        if isinstance(focus, int) or focus.id == self._root.id:
            return None
        return self._window(focus.id)

    def _window(self, window_id: int) -> Window | None:
        window = self._x.create_resource_object("window", window_id)
        try:
            attributes = window.get_attributes()
            if attributes.map_state != X.IsViewable:
                return None
            geometry = window.get_geometry()
            origin = self._root.translate_coords(window, 0, 0)
            title = self._title(window)
            pid = window.get_full_property(self._atom("_NET_WM_PID"), Xatom.CARDINAL)
        except xerror.XError:
            return None  # it closed while we looked
        return Window(id=window_id, title=title, pid=int(pid.value[0]) if pid else None,
                      x=origin.x, y=origin.y, width=geometry.width, height=geometry.height)

    # -- clipboard (xclip) ----------------------------------------------------------------

    def _xclip(self, args: list[str], **kwargs) -> subprocess.CompletedProcess:
        """Run xclip on the session's display, as the desktop user when we are root: the owner
        xclip leaves behind is a desktop process, and no desktop process runs as root. Its
        environment is the session's, not this server's (which may hold the runtime's token)."""
        as_desktop_user = {}
        if os.geteuid() == 0 and self.session.uid != 0:
            as_desktop_user = {"user": self.session.uid, "group": self.session.gid,
                               "extra_groups": [], "cwd": self.session.home}
        return subprocess.run(["xclip", "-selection", "clipboard", *args],
                              env={**desktop_env(self.session), "DISPLAY": self.name},
                              timeout=CLIPBOARD_TIMEOUT_S, **as_desktop_user, **kwargs)

    def set_clipboard(self, text: str) -> None:
        """Own the clipboard with `text`. xclip forks and stays as the owner after we return,
        in its own session, so the text outlives this call and this server. Its child takes the
        selection after the parent has exited: wait until it has, so a read right after sees it."""
        clipboard = self._atom("CLIPBOARD")
        before = self._call(self._x.get_selection_owner, clipboard)
        try:
            done = self._xclip(
                ["-in"], input=text.encode(),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # the owner keeps them
                start_new_session=True)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DesktopError(f"cannot set the clipboard: {exc}") from exc
        if done.returncode != 0:
            raise DesktopError(f"cannot set the clipboard: xclip exited with {done.returncode}")
        deadline = time.monotonic() + CLIPBOARD_TIMEOUT_S
        while self._call(self._x.get_selection_owner, clipboard) in (before, X.NONE):
            if time.monotonic() > deadline:
                raise DesktopError("cannot set the clipboard: xclip did not take the selection")
            time.sleep(0.005)

    def get_clipboard(self) -> str:
        """The clipboard's text; "" when it is empty or holds no text."""
        try:
            done = self._xclip(["-out", "-target", "UTF8_STRING"], capture_output=True)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DesktopError(f"cannot read the clipboard: {exc}") from exc
        if done.returncode != 0:
            return ""  # no owner, or nothing offered as text
        return done.stdout.decode("utf-8", "replace")

    # -- plumbing -------------------------------------------------------------------------

    def settle(self) -> None:
        """Wait until the server has handled every request sent so far (one round trip)."""
        self._call(self._x.sync)

    def _fake(self, event: int, detail: int = 0, **kwargs) -> None:
        # Sent at once, in order; `settle()` after each step waits for them to be handled.
        self._call(xtest.fake_input, self._x, event, detail, **kwargs)
        self._call(self._x.flush)

    def _call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except xerror.ConnectionClosedError as exc:
            raise DisplayUnavailable(f"the connection to the display {self.name} closed: {exc}") from exc
        except (xerror.XError, OSError) as exc:
            raise DesktopError(f"the display {self.name} refused a request: {exc}") from exc
