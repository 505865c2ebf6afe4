"""Who the files server acts as, and where paths start: the desktop user and its home.

The desktop user's permissions are the only boundary of this server, so it must run as that
user. The runtime starts it so (`runtime/launch.py`); a server started as root by other means
(by hand, by a test, by a config that forgot) drops to the desktop user itself before it serves
a call (`drop_to_desktop_user`): it never reads or writes as root.

A path is as the desktop user sees it: absolute, `~` or `~/...` (its home), or relative to its
home. `..` and symlinks mean what they mean to that user's programs; nothing is refused by name.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from capabilities import session

from .errors import InvalidRequest, Unavailable

DESKTOP_USER_ENV = "CODEDESK_DESKTOP_USER"


@dataclass(frozen=True)
class Account:
    """The user this server acts as: its name, ids and home."""

    name: str
    uid: int
    gid: int
    home: Path

    @classmethod
    def desktop(cls) -> Account:
        """The desktop session's user (`session.json`), else the `desktop` account."""
        try:
            info = session.read_session()
            return cls(info.user, info.uid, info.gid, info.home)
        except session.SessionNotFound:
            pass
        name = os.environ.get(DESKTOP_USER_ENV, "desktop")
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise Unavailable(f"the desktop user {name!r} does not exist, and the files server never acts as root",
                              hint="create it with `make install`, or start the desktop session") from None
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))

    @classmethod
    def current(cls) -> Account:
        """The user this process runs as (its home from `$HOME` when set)."""
        entry = pwd.getpwuid(os.geteuid())
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(os.environ.get("HOME") or entry.pw_dir))


def drop_to_desktop_user() -> Account:
    """Become the desktop user when running as root (for good: real, effective and saved ids,
    its groups, no capabilities left); otherwise stay as we are. Returns who we act as."""
    if os.geteuid() != 0:
        return Account.current()
    account = Account.desktop()
    if account.uid == 0:
        raise Unavailable("the desktop user is root; the files server never acts as root",
                          hint="configure an unprivileged desktop user")
    os.setgroups(os.getgrouplist(account.name, account.gid) if _has_user(account.name) else [account.gid])
    os.setresgid(account.gid, account.gid, account.gid)
    os.setresuid(account.uid, account.uid, account.uid)  # drops every capability with root
    os.environ.update(HOME=str(account.home), USER=account.name, LOGNAME=account.name)
    return account


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def resolve(path: str, home: Path, field: str = "path") -> Path:
    """`path` as the desktop user means it: `~` is its home, a relative path is under its home;
    `.` and `..` are folded lexically (a symlink is left for the file system to follow)."""
    if not path or "\0" in path:
        raise InvalidRequest("the path is empty" if not path else "the path contains a NUL character",
                             hint="give an absolute path, '~/...', or a path relative to the home", field=field)
    if path == "~" or path.startswith("~/"):
        raw = home / path[2:]
    elif path.startswith("~"):
        raise InvalidRequest(f"{path!r}: only '~' (the desktop user's home) is understood, not '~user'",
                             hint="give an absolute path", field=field)
    else:
        raw = Path(path) if os.path.isabs(path) else home / path
    return Path(os.path.normpath(raw))

