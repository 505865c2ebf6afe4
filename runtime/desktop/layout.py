"""Where a desktop session keeps things, who runs it, and what it needs installed.

A session lives in its data directory (`capabilities.session.data_dir()` unless `--data`):

    <data>/session.json        the session's facts, for capabilities and the runtime (no secret)
    <data>/viewer.json         the viewer's URL and secret, readable by the session's owner only
    <data>/desktop-state.json  the supervisor's view: parts, pids, ports, screen size
    <data>/desktop.lock        held (flock) by the running supervisor: one session per data dir
    <data>/logs                one log per part, readable by the session's owner only
    <data>/home                the desktop user's home          \
    <data>/chrome              Chromium's profile; downloads     |  owned by the desktop user
                               in <data>/chrome/Downloads        |
    <data>/exec, <data>/browser  the exec logs, the named tabs  /

Started as root, the data directory and everything not marked above belong to root: the
desktop user can write only its own folders, never the session's files.
"""

from __future__ import annotations

import os
import pwd
import random
import shutil
import socket
import traceback
from collections.abc import Callable
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
    """An unprivileged account a part of the session runs as; `switch` is true when we are root
    and must drop to it. Two are used: the desktop user (every desktop process, the capability
    servers and the programs they start) and the viewer user (x11vnc and websockify, which hold
    the viewer's secret and must be out of the desktop user's reach)."""

    name: str
    uid: int
    gid: int
    switch: bool

    @classmethod
    def resolve(cls) -> "DesktopUser":
        """The unprivileged `desktop` user (or `$CODEDESK_DESKTOP_USER`) when root, else ourselves."""
        return cls._lookup(os.environ.get("CODEDESK_DESKTOP_USER", "desktop"), "desktop user")

    @classmethod
    def viewer(cls) -> "DesktopUser":
        """The viewer's user, `codedesk-view` (or `$CODEDESK_VIEWER_USER`) when root, else ourselves."""
        return cls._lookup(os.environ.get("CODEDESK_VIEWER_USER", "codedesk-view"), "viewer user")

    @classmethod
    def _lookup(cls, name: str, role: str) -> "DesktopUser":
        if os.geteuid() != 0:
            me = pwd.getpwuid(os.geteuid())
            return cls(me.pw_name, me.pw_uid, me.pw_gid, switch=False)
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise DesktopError(
                f"the {role} {name!r} does not exist; create it with `make install` "
                f"(or `sudo bash {image_dir() / 'install-system.sh'}`)"
            ) from None
        if entry.pw_uid == 0:
            raise DesktopError(f"the {role} {name!r} is root; session processes never run as root")
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, switch=True)

    def popen_kwargs(self) -> dict:
        """Keyword arguments for `subprocess.Popen` that run the child as this user."""
        if not self.switch:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def run_as(self, fn: Callable[..., None], *args: object) -> None:
        """Call `fn(*args)` as this user, in a forked child, so that files written through a
        folder this user controls (a planted symlink) can never be written with root's rights."""
        if not self.switch:
            fn(*args)
            return
        pid = os.fork()
        if pid == 0:  # the child: drop for good, do the work, leave without running any cleanup
            code = 1
            try:
                os.setgroups([])
                os.setresgid(self.gid, self.gid, self.gid)
                os.setresuid(self.uid, self.uid, self.uid)
                fn(*args)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise DesktopError(f"{getattr(fn, '__name__', fn)} failed as {self.name!r} "
                               f"(exit status {status}); see the supervisor's log")


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
    def user_dirs(self) -> tuple[Path, ...]:
        """The folders the desktop user owns (and the capability servers write)."""
        return (self.home, self.chrome, self.data / "exec", self.data / "browser", self.data / "memory",
                self.data / "skills")

    @property
    def state_file(self) -> Path:
        return self.data / STATE_FILE

    @property
    def lock_file(self) -> Path:
        return self.data / LOCK_FILE

    @property
    def browser_wrapper(self) -> Path:
        return self.home / ".local" / "bin" / "codedesk-browser"


def make_private_dir(path: Path) -> None:
    """Create `path` (if missing) as a folder only its owner may enter: root's when we are root."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, 0, 0, follow_symlinks=False)
    os.chmod(path, 0o700, follow_symlinks=False)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now, below the kernel's ephemeral range when it can be.

    The port is bound later by another program (Chromium's DevTools, websockify). A port from
    the ephemeral range can meanwhile become the local end of any outgoing connection, and
    Chromium, refused 127.0.0.1, would quietly listen on [::1] and never answer.
    """
    low = _ephemeral_low()
    start = max(1024, low - 12768)  # 20000-32767 with Linux's default range
    for _ in range(64 if low > start else 0):
        port = random.randrange(start, low)
        if port_is_free(port, host):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True
