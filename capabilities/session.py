"""Finding the desktop session: its data directory and the facts in its `session.json`.

`codedesk desktop up` writes `<data>/session.json`; every capability server and the
runtime read it through this module, so its shape is defined in exactly one place.

The data directory is, in order: `$CODEDESK_DATA` when set; `/data` inside a container
(where `/.dockerenv` exists) or for root; otherwise `$XDG_DATA_HOME/codedesk` (default
`~/.local/share/codedesk`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

SESSION_FILE = "session.json"
VIEWER_FILE = "viewer.json"
"""The viewer's URL and secret, kept apart from `session.json`: only the session's owner (root,
or the user who started it) may read it, while the capability servers, which run as the desktop
user, read `session.json`."""


class SessionNotFound(RuntimeError):
    """There is no desktop session at the data directory; the message says how to start one."""


def data_dir() -> Path:
    """The session's data directory (see the module docstring for the order)."""
    env = os.environ.get("CODEDESK_DATA")
    if env:
        return Path(env).expanduser().resolve()
    if Path("/.dockerenv").exists() or os.geteuid() == 0:
        # Root's own data directory would be out of the desktop user's reach; and /data is where
        # the spec's examples look (/data/chrome/Downloads).
        return Path("/data")
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "codedesk"


@dataclass(frozen=True, kw_only=True)
class SessionInfo:
    """What `session.json` says about a running desktop session.

    Attributes:
        data_dir: the session's disk; Chromium's profile is `<data_dir>/chrome`.
        display: the X display, e.g. ":1".
        env: the environment desktop programs run with (DISPLAY, XAUTHORITY, HOME,
            DBUS_SESSION_BUS_ADDRESS, ...); capability servers use it to reach the display.
        devtools_url: Chromium's DevTools HTTP endpoint on loopback, e.g. "http://127.0.0.1:9222".
        chromium_command: the argv that (re)starts Chromium in the session's profile with its
            DevTools endpoint; run as `user` when the caller is root.
        user: the unprivileged desktop user; `uid`/`gid` are its ids and `home` its home.
        viewer_url: the noVNC viewer's URL, secret included ("" for a reader that may not
            read `viewer.json`, such as a capability server).
        viewer_secret: the viewer's secret (same).
        extra: any other fields the file holds, kept for forward compatibility.
    """

    data_dir: Path
    display: str
    env: dict[str, str]
    devtools_url: str
    chromium_command: list[str]
    user: str
    uid: int
    gid: int
    home: Path
    viewer_url: str = ""
    viewer_secret: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def chrome_profile(self) -> Path:
        return self.data_dir / "chrome"

    @property
    def downloads_dir(self) -> Path:
        return self.data_dir / "chrome" / "Downloads"

    def to_json(self) -> dict:
        return {
            "data_dir": str(self.data_dir),
            "display": self.display,
            "env": self.env,
            "devtools_url": self.devtools_url,
            "chromium_command": self.chromium_command,
            "user": self.user,
            "uid": self.uid,
            "gid": self.gid,
            "home": str(self.home),
            "viewer_url": self.viewer_url,
            "viewer_secret": self.viewer_secret,
            **self.extra,
        }


_KNOWN = {
    "data_dir", "display", "env", "devtools_url", "chromium_command",
    "user", "uid", "gid", "home", "viewer_url", "viewer_secret",
}


def read_session(data: Path | None = None) -> SessionInfo:
    """Read `<data>/session.json` (default: `data_dir()`), and `viewer.json` when readable.

    Raises:
        SessionNotFound: no session file, or it is unreadable.
    """
    root = data if data is not None else data_dir()
    path = root / SESSION_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise SessionNotFound(
            f"no desktop session at {root} (no {SESSION_FILE}); start one with "
            f"`codedesk desktop up` (or `make up`), or set CODEDESK_DATA to its data directory"
        ) from None
    except (OSError, ValueError) as exc:
        raise SessionNotFound(f"cannot read {path}: {exc}") from exc
    try:
        viewer = json.loads((root / VIEWER_FILE).read_text())
    except (OSError, ValueError):  # not ours to read, or no viewer
        viewer = {}
    return SessionInfo(
        data_dir=Path(raw["data_dir"]),
        display=raw["display"],
        env=dict(raw.get("env", {})),
        devtools_url=raw["devtools_url"],
        chromium_command=list(raw.get("chromium_command", [])),
        user=raw["user"],
        uid=int(raw["uid"]),
        gid=int(raw["gid"]),
        home=Path(raw["home"]),
        viewer_url=viewer.get("viewer_url", ""),
        viewer_secret=viewer.get("viewer_secret", ""),
        extra={k: v for k, v in raw.items() if k not in _KNOWN},
    )


def write_session(info: SessionInfo) -> Path:
    """Write `<data_dir>/session.json` and `<data_dir>/viewer.json` (used by `codedesk desktop up`).

    `session.json` is readable by all (the capability servers run as the desktop user) and holds
    no secret; `viewer.json`, with the viewer's URL and secret, only by its owner (mode 0600).
    Both are written without following links, and replaced atomically.
    """
    facts = info.to_json()
    viewer = {key: facts.pop(key) for key in ("viewer_url", "viewer_secret")}
    _write_private(info.data_dir / VIEWER_FILE, viewer, 0o600)
    return _write_private(info.data_dir / SESSION_FILE, facts, 0o644)


def remove_session(data: Path) -> None:
    """Remove the session's files (at `down`, or after a supervisor that died)."""
    for name in (SESSION_FILE, VIEWER_FILE):
        (data / name).unlink(missing_ok=True)


def _write_private(path: Path, document: dict, mode: int) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), mode)  # the umask may have narrowed it
        f.write(json.dumps(document, indent=2))
    os.replace(tmp, path)
    return path
