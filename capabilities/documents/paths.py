"""Where files may be: every path a tool reads or writes is confined to the document roots.

The roots are, in order:
- `$CODEDESK_DOCUMENT_ROOTS` when set (directories separated by `os.pathsep`), alone;
- otherwise the desktop user's home (from the session's `session.json`, or the home of the
  `desktop` user when there is no session) and the session's data directory.

A relative path is taken relative to the first root, and `~` is the desktop user's home. A path with a `..` component is refused,
and so is one whose real location (symlinks followed) is outside every root.
"""

from __future__ import annotations

import os
import pwd
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from capabilities import session

from .errors import InvalidRequest, NotFound, PathRefused

ROOTS_ENV = "CODEDESK_DOCUMENT_ROOTS"
DESKTOP_USER = "desktop"

# Read once: os.umask can only be read by setting it, which is not safe once threads run.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


@dataclass(frozen=True)
class Roots:
    """The directories the tools may read and write in (real paths, symlinks resolved)."""

    dirs: tuple[Path, ...]

    @classmethod
    def from_environment(cls) -> Roots:
        """The roots from `$CODEDESK_DOCUMENT_ROOTS`, else the desktop home and the data dir."""
        configured = os.environ.get(ROOTS_ENV, "")
        if configured.strip():
            candidates = [Path(p).expanduser() for p in configured.split(os.pathsep) if p.strip()]
        else:
            candidates = [_desktop_home(), session.data_dir()]
        dirs: list[Path] = []
        for candidate in candidates:
            if candidate is None:
                continue
            real = Path(os.path.realpath(candidate))
            if real not in dirs:
                dirs.append(real)
        return cls(tuple(dirs))

    def describe(self) -> str:
        return ", ".join(str(d) for d in self.dirs) or "(none configured)"

    def _lexical(self, path: str, field: str) -> Path:
        if not path or not path.strip():
            raise InvalidRequest("the path is empty", hint="give a file path inside " + self.describe(),
                                 field=field)
        raw = _expand_home(path)
        if ".." in raw.parts:
            raise PathRefused(
                f"{path!r} contains '..', which is not allowed",
                hint=f"give the path without '..' inside one of the roots: {self.describe()}", field=field,
            )
        if not raw.is_absolute():
            if not self.dirs:
                raise PathRefused(f"{path!r} is relative and no document roots are configured",
                                  hint=f"give an absolute path, or set {ROOTS_ENV}", field=field)
            raw = self.dirs[0] / raw
        return Path(os.path.normpath(raw))

    def _root_of(self, real: Path) -> Path | None:
        for root in self.dirs:
            if real == root or real.is_relative_to(root):
                return root
        return None

    def _confine(self, path: str, lexical: Path, real: Path, field: str) -> None:
        if self._root_of(real) is not None:
            return
        if self._root_of(lexical) is not None:
            # Inside a root by name, outside in reality: a symlink leads out.
            raise PathRefused(
                f"{path!r} resolves through a symlink to {str(real)!r}, outside the document "
                f"roots ({self.describe()})", hint="copy the file inside a root instead", field=field,
            )
        raise PathRefused(
            f"{path!r} is outside the document roots ({self.describe()})",
            hint=f"use a file inside one of them (set {ROOTS_ENV} to allow other directories)", field=field,
        )

    def input_file(self, path: str, field: str = "path") -> Path:
        """The real path of an existing file inside the roots (`field`: the argument it came from)."""
        lexical = self._lexical(path, field)
        real = Path(os.path.realpath(lexical))
        self._confine(path, lexical, real, field)
        if not real.exists():
            raise NotFound(f"no such file: {str(lexical)!r}",
                           hint="check the path (list the folder with exec, e.g. ls)", field=field)
        if not real.is_file():
            raise InvalidRequest(f"{str(lexical)!r} is not a file", hint="give the path of a file in it",
                                 field=field)
        return real

    def output_file(self, path: str, field: str = "output_path") -> Path:
        """The real path a tool may write to: inside the roots, in an existing directory."""
        lexical = self._lexical(path, field)
        parent = Path(os.path.realpath(lexical.parent))
        real = parent / lexical.name
        if real.is_symlink():
            real = Path(os.path.realpath(real))
        self._confine(path, lexical, real, field)
        if not parent.is_dir():
            raise NotFound(f"the folder {str(lexical.parent)!r} does not exist",
                           hint="create it first, or pick another output path", field=field)
        if real.is_dir():
            raise InvalidRequest(f"{str(lexical)!r} is a folder", hint="give a file name for the output",
                                 field=field)
        return real

    def output_dir(self, path: str, field: str = "outdir") -> Path:
        """The real path of an existing directory inside the roots."""
        lexical = self._lexical(path, field)
        real = Path(os.path.realpath(lexical))
        self._confine(path, lexical, real, field)
        if not real.is_dir():
            raise NotFound(f"the folder {str(lexical)!r} does not exist",
                           hint=f"give an existing folder as {field}", field=field)
        return real


def _expand_home(path: str) -> Path:
    """`~` is the desktop user's home (not the server's, which may be root's)."""
    if path == "~" or path.startswith("~/"):
        home = _desktop_home() or Path.home()
        return home / path[2:] if len(path) > 1 else home
    return Path(path).expanduser()


def _desktop_home() -> Path | None:
    try:
        return session.read_session().home
    except session.SessionNotFound:
        pass
    try:
        return Path(pwd.getpwnam(DESKTOP_USER).pw_dir)
    except KeyError:
        return None


def sibling(source: Path, suffix: str, extension: str) -> Path:
    """A new file next to `source`, `<stem><suffix><extension>`, never an existing one."""
    candidate = source.with_name(f"{source.stem}{suffix}{extension}")
    n = 2
    while candidate.exists():
        candidate = source.with_name(f"{source.stem}{suffix}-{n}{extension}")
        n += 1
    return candidate


@contextmanager
def atomic_output(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside `target`; on success it replaces `target`, else vanishes.

    Nothing half-written is ever left at `target`, and the file is given to the owner of its
    folder, so files written by a root server into the desktop user's home stay theirs.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        give_to_folder_owner(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def give_to_folder_owner(path: Path) -> None:
    """Give `path` ordinary permissions and, when running as root, to its folder's owner.

    A root server writing into the desktop user's home must leave files that user owns.
    """
    os.chmod(path, 0o666 & ~_UMASK)
    if os.geteuid() == 0:
        folder = path.parent.stat()
        if folder.st_uid != 0:
            os.chown(path, folder.st_uid, folder.st_gid)
