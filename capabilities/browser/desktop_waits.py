"""Waiting for the screen, not for time: whether the screen changed since a moment, and waiting
until it has been still for a while.

The X server reports every change to the screen's pixels through the DAMAGE extension (as a
VNC server learns what to send), so nothing is grabbed or compared: `ScreenWatch` listens on a
connection of its own for damage to the root window and its children. Without DAMAGE it falls
back to comparing grabs.

Errors: `WaitTimeout` (a `DesktopError`) when the screen never settles in time; a wait ends
with `CallCancelled` the moment its call is cancelled.
"""

from __future__ import annotations

import time

from Xlib import error as xerror
from Xlib.ext import damage

from capabilities.contract import current_cancellation

from ..session import SessionInfo
from .desktop_accessibility import Box
from .desktop_display import DesktopError, open_display

#: A change this thin and this short (a text caret blinking) does not count.
CARET_PX = 3
CARET_LENGTH_PX = 48


class WaitTimeout(DesktopError):
    """The screen (or a window, or an element) did not get where a wait asked in time."""

    kind = "timeout"


class ScreenWatch:
    """Damage to the screen since the last `mark()`, and waits for quiet."""

    def __init__(self, session: SessionInfo) -> None:
        self._x = open_display(session, DesktopError)
        self.display_name = session.display
        self.changed_while_waiting = False
        """Whether the screen changed during the last `wait_stable` that returned."""
        if not self._x.has_extension("DAMAGE"):
            self._x.close()
            raise DesktopError(f"display {session.display} has no DAMAGE extension")
        try:
            self._x.damage_query_version()  # the protocol asks for it before any other request
            self._damage = self._x.screen().root.damage_create(damage.DamageReportRawRectangles)
            self._event = self._x.extension_event.DamageNotify
            self._x.sync()
        except (xerror.XError, xerror.ConnectionClosedError) as exc:
            self._x.close()
            raise DesktopError(f"cannot watch the screen of {session.display}: {exc}") from exc
        self._pending: list[tuple[int, int, int, int]] = []

    def close(self) -> None:
        try:
            self._x.close()
        except Exception:
            pass

    def _drain(self) -> None:
        """Take in every damage event the server has sent (a round trip first, so everything
        drawn before this call is counted)."""
        try:
            self._x.sync()
            while self._x.pending_events():
                event = self._x.next_event()
                if event.type == self._event:
                    a = event.area
                    self._pending.append((a.x, a.y, a.width, a.height))
        except (xerror.XError, xerror.ConnectionClosedError) as exc:
            raise DesktopError(f"lost the display {self.display_name}: {exc}") from exc
        if self._pending:
            try:
                self._x.damage_subtract(self._damage)
            except (xerror.XError, xerror.ConnectionClosedError) as exc:
                raise DesktopError(f"lost the display {self.display_name}: {exc}") from exc

    def _take(self, region: Box | None) -> bool:
        """Whether any pending damage counts (in the region, larger than a caret); clears it."""
        rects, self._pending = self._pending, []
        for x, y, w, h in rects:
            if min(w, h) <= CARET_PX and max(w, h) <= CARET_LENGTH_PX:
                continue
            if region is None or region.touches(Box(x, y, w, h)):
                return True
        return False

    def mark(self) -> None:
        """Forget the changes so far: `changed()` then says what happened after this."""
        self._drain()
        self._pending.clear()

    def changed(self, region: Box | None = None) -> bool:
        """Whether the screen (or the region) changed since `mark()`."""
        self._drain()
        return self._take(region)

    def wait_stable(self, quiet_ms: int, timeout_ms: int, region: Box | None = None) -> dict:
        """Return once nothing changed for `quiet_ms`; raise `WaitTimeout` after `timeout_ms`.
        Result: {waitedMs, quietMs}."""
        start = time.monotonic()
        deadline = start + timeout_ms / 1000
        self._drain()
        self._take(None)  # what happened before the wait began is not what it waits for
        last_change = start
        fd = self._x.fileno()
        cancellation = current_cancellation()
        while True:
            now = time.monotonic()
            quiet_until = last_change + quiet_ms / 1000
            if now >= quiet_until:
                self.changed_while_waiting = last_change > start
                return {"waitedMs": round((now - start) * 1000), "quietMs": quiet_ms}
            if now >= deadline:
                raise WaitTimeout(
                    f"the screen{' region' if region else ''} kept changing for {timeout_ms} ms "
                    f"(last change {round((now - last_change) * 1000)} ms ago, wanted {quiet_ms} ms "
                    f"of quiet); something animates there: give a region that leaves it out, a "
                    f"shorter ms, or a longer timeout")
            cancellation.wait_readable(fd, max(0.0, min(quiet_until, deadline) - now))
            self._drain()
            if self._take(region):
                last_change = time.monotonic()
