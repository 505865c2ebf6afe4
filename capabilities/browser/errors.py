"""The errors of the browser server (browser_execute and desktop_execute): one root, one
subclass per kind of failure.

    BrowserError                 the root: a failure the caller can act on        kind
    ├── InvalidRequest           the call is malformed or aims off the screen;    invalid_arguments
    │                            nothing ran
    ├── Refused                  a policy said no: a navigation the egress       refused
    │                            policy denies, an upload from outside the
    │                            session's folders
    ├── NotFound                 no element matches the selector, a ref that     not_found
    │                            is gone, a file to upload that is not there
    ├── TimedOut                 a step did not finish in its time (a load, an   timeout
    │                            element there but never usable, a download)
    ├── Unavailable              Chromium, the display or the session cannot     unavailable
    │   │                        be reached
    │   ├── BrowserUnavailable   (tabs.py) Chromium cannot be reached or started
    │   └── DisplayUnavailable   (desktop_display.py) the X display cannot be opened
    └── DesktopError             (desktop_display.py) the display, a window or   failed
                                 the clipboard did not do what a step asked

Each carries a `message` (what failed, where), a `hint` (what to do next), the `field` at fault
(inside the step when `step` is set) and the 1-based `step` of the batch. Playwright, Xlib, mss
and xclip errors are translated into these at the boundary with `raise ... from exc`; a tool
turns one into the contract's `ToolError` in one place, `to_tool_error`.
"""

from __future__ import annotations

from capabilities.contract import CapabilityError


class BrowserError(CapabilityError):
    """A failure the caller can act on; `message` and `hint` are shown to the model as they are."""

    def at_step(self, step: int) -> BrowserError:
        """The same error, placed at a step of the batch (1-based)."""
        self.step = step
        return self


class InvalidRequest(BrowserError):
    """The call cannot run as given (a bad field, a point off the screen); nothing ran."""

    kind = "invalid_arguments"


class Refused(BrowserError):
    """The session's policy refuses what the call asks (a denied address, a file outside the
    folders a page may receive)."""

    kind = "refused"


class NotFound(BrowserError):
    """The element, ref or file the step names is not there."""

    kind = "not_found"


class TimedOut(BrowserError):
    """The step did not finish within its timeout."""

    kind = "timeout"


class Unavailable(BrowserError):
    """Chromium, the display or the desktop session cannot be reached."""

    kind = "unavailable"
