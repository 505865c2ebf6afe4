"""How the runtime starts a stdio capability server: as whom, and with what environment.

The runtime holds the HTTP token; everything a script can drive must be out of reach of it.
So, whichever server it is (built-in or from the config):

- **Its user.** A runtime running as root never starts a server as root: each runs as the
  desktop session's user (uid, gid and home from `session.json`, else the `desktop` account),
  through `setpriv` with `no_new_privs`, no capabilities and an empty bounding set. The desktop
  user cannot read a root process's memory, environment or files, so the token stays with the
  runtime. A runtime that is not root starts servers as itself (there is no one to drop to).
- **Its environment** is built here, never inherited: the locale, PATH, the display, the
  session's data directory and the `CODEDESK_*` settings, minus every secret; then the
  config's `env` for that server. The runtime's own variables (its token among them) stay
  with the runtime, and so out of every program a server starts.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
from dataclasses import dataclass
from pathlib import Path

from capabilities.session import SessionNotFound, data_dir, read_session

from .config import StdioServer

logger = logging.getLogger(__name__)

PASSED_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "DISPLAY", "XAUTHORITY",
              "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
"""Variables of the runtime's environment a server gets as they are (besides `CODEDESK_*`)."""

SECRET_ENV = frozenset({"CODEDESK_TOKEN"})
"""`CODEDESK_*` variables that are secrets: never passed to a server."""

SETPRIV = "/usr/bin/setpriv"


class LaunchError(RuntimeError):
    """A server cannot be started as it must be (no unprivileged user to run it as)."""


@dataclass(frozen=True)
class ServerAccount:
    """Who a server runs as: `switch` is true when the runtime is root and drops to it."""

    name: str
    uid: int
    gid: int
    home: Path
    switch: bool


def server_account() -> ServerAccount:
    """The account stdio servers run as (see the module docstring)."""
    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid())
        return ServerAccount(me.pw_name, me.pw_uid, me.pw_gid, Path(os.environ.get("HOME") or me.pw_dir), False)
    try:
        info = read_session()
    except SessionNotFound:
        info = None
    if info is not None and info.uid != 0:
        return ServerAccount(info.user, info.uid, info.gid, info.home, True)
    name = os.environ.get("CODEDESK_DESKTOP_USER", "desktop")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise LaunchError(
            f"the runtime runs as root and starts capability servers as the desktop user {name!r}, "
            f"which does not exist; create it with `make install`"
        ) from None
    if entry.pw_uid == 0:
        raise LaunchError(f"the desktop user {name!r} is root; capability servers never run as root")
    return ServerAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir), True)


def server_environment(account: ServerAccount, extra: dict[str, str]) -> dict[str, str]:
    """The whole environment of a server process: built, never inherited (module docstring)."""
    env = {key: os.environ[key] for key in PASSED_ENV if key in os.environ}
    env.update({key: value for key, value in os.environ.items()
                if key.startswith("CODEDESK_") and key not in SECRET_ENV})
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["CODEDESK_DATA"] = str(data_dir())  # the same session, whatever the server's HOME says
    env.update(HOME=str(account.home), USER=account.name, LOGNAME=account.name)
    env.update(extra)
    return env


def server_command(config: StdioServer, account: ServerAccount) -> tuple[str, list[str], str | None]:
    """`(command, args, cwd)` that start the server as `account`."""
    if not account.switch:
        return config.command, list(config.args), config.cwd
    setpriv = shutil.which("setpriv") or SETPRIV
    cwd = config.cwd or (str(account.home) if account.home.is_dir() else "/")
    return setpriv, [
        f"--reuid={account.uid}", f"--regid={account.gid}", "--init-groups",
        "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all",
        "--", config.command, *config.args,
    ], cwd
