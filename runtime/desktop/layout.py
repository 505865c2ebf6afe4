"""Where a desktop session keeps things, who runs it, and what it needs installed.

A session lives in its data directory (`capabilities.session.data_dir()` unless `--data`):

    <data>/session.json        the session's facts, for capabilities and the runtime
    <data>/desktop-state.json  the supervisor's view: parts, pids, ports, screen size
    <data>/desktop.lock        held (flock) by the running supervisor: one session per data dir
    <data>/home                the desktop user's home
    <data>/chrome              Chromium's profile; downloads in <data>/chrome/Downloads
    <data>/logs                one log per part
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

STATE_FILE = "desktop-state.json"
LOCK_FILE = "desktop.lock"

# Programs the session runs, and the Debian package that provides each.
REQUIRED_PROGRAMS = {
    "Xvfb": "xvfb",
    "xfwm4": "xfwm4",
    "xfce4-panel": "xfce4-panel",
    "xfdesktop": "xfdesktop4",
    "xfsettingsd": "xfce4-settings",
    "xfce4-terminal": "xfce4-terminal",
    "thunar": "thunar",
    "mousepad": "mousepad",
    "ristretto": "ristretto",
    "dbus-daemon": "dbus",
    "chromium": "chromium",
    "x11vnc": "x11vnc",
    "websockify": "websockify",
    "xdg-open": "xdg-utils",
    "exo-open": "exo-utils",
}
NOVNC_DIR = Path("/usr/share/novnc")


class DesktopError(RuntimeError):
    """A desktop session could not be started, found or stopped; the message says what to do."""


def image_dir() -> Path:
    """The `desktop-image/` folder: configuration files and the viewer page."""
    env = os.environ.get("CODEDESK_IMAGE_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "desktop-image"


def missing_packages() -> list[str]:
    """Debian packages whose programs are missing on this machine (empty when all present)."""
    missing = [pkg for prog, pkg in REQUIRED_PROGRAMS.items() if shutil.which(prog) is None]
    if not (NOVNC_DIR / "core" / "rfb.js").exists():
        missing.append("novnc")
    return sorted(set(missing))


def install_hint(packages: list[str]) -> str:
    script = image_dir() / "install-system.sh"
    return (
        f"the desktop session needs these Debian packages, missing here: {' '.join(packages)}. "
        f"Install them with `make install` (or `sudo bash {script}`)"
    )


@dataclass(frozen=True)
class DesktopUser:
    """The account desktop processes run as; `switch` is true when we are root and must drop to it."""

    name: str
    uid: int
    gid: int
    switch: bool

    @classmethod
    def resolve(cls) -> "DesktopUser":
        """The unprivileged `desktop` user (or `$CODEDESK_DESKTOP_USER`) when root, else ourselves."""
        if os.geteuid() != 0:
            me = pwd.getpwuid(os.geteuid())
            return cls(me.pw_name, me.pw_uid, me.pw_gid, switch=False)
        name = os.environ.get("CODEDESK_DESKTOP_USER", "desktop")
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise DesktopError(
                f"the desktop user {name!r} does not exist; create it with `make install` "
                f"(or `sudo bash {image_dir() / 'install-system.sh'}`)"
            ) from None
        if entry.pw_uid == 0:
            raise DesktopError(f"the desktop user {name!r} is root; desktop processes never run as root")
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, switch=True)

    def popen_kwargs(self) -> dict:
        """Keyword arguments for `subprocess.Popen` that run the child as this user."""
        if not self.switch:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


@dataclass(frozen=True)
class SessionLayout:
    """The paths of one session's data directory."""

    data: Path

    @property
    def home(self) -> Path:
        return self.data / "home"

    @property
    def chrome(self) -> Path:
        return self.data / "chrome"

    @property
    def downloads(self) -> Path:
        return self.data / "chrome" / "Downloads"

    @property
    def logs(self) -> Path:
        return self.data / "logs"

    @property
    def state_file(self) -> Path:
        return self.data / STATE_FILE

    @property
    def lock_file(self) -> Path:
        return self.data / LOCK_FILE

    @property
    def browser_wrapper(self) -> Path:
        return self.home / ".local" / "bin" / "codedesk-browser"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True
