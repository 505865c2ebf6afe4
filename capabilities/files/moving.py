"""Tools that move things: `move`, `copy`, `delete` (to the trash) and `restore` (from it).

The trash is the desktop's own (the freedesktop.org trash under `~/.local/share/Trash`, or
`$XDG_DATA_HOME/Trash`): `files/<id>` holds what was deleted and `info/<id>.trashinfo` where it
came from and when, so Thunar shows and restores it too, and `restore` restores what Thunar
trashed. Nothing here deletes for good.
"""

from __future__ import annotations

import errno
import os
import shutil
from datetime import datetime
from pathlib import Path
from urllib.parse import quote, unquote

from pydantic import Field, model_validator

from .errors import InvalidRequest, NotFound, Refused
from .kinds import kind_of
from .tooling import PATH_DOC, REPLACES, WRITES, Answer, Args, FilesState, Output, files_tool


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _must_exist(path: Path, field: str) -> None:
    if not _exists(path):
        raise NotFound(f"{str(path)!r} does not exist", hint="check the path with list or glob", field=field)


def _relocate(source: Path, destination: Path) -> None:
    """Rename, or copy then remove across file systems (the trash may be on another one)."""
    try:
        os.rename(source, destination)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.move(str(source), str(destination))


def _clear_way(source: Path, destination: Path, overwrite: bool) -> None:
    if source == destination:
        raise InvalidRequest("source and destination are the same path", field="destination")
    if destination.is_relative_to(source) and source.is_dir() and not source.is_symlink():
        raise InvalidRequest(f"{str(destination)!r} is inside {str(source)!r}", field="destination")
    if _exists(destination):
        if not overwrite:
            raise Refused(f"{str(destination)!r} already exists",
                          hint="pick another destination, or pass overwrite: true (a file only)",
                          field="destination")
        if destination.is_dir() and not destination.is_symlink():
            raise Refused(f"{str(destination)!r} is a folder; overwrite replaces files only",
                          hint="delete the folder first (it goes to the trash)", field="destination")
    destination.parent.mkdir(parents=True, exist_ok=True)


class TransferArgs(Args):
    source: str = Field(description=PATH_DOC)
    destination: str = Field(description="The new path (not the folder to put it in). " + PATH_DOC)
    overwrite: bool = Field(False, description="Replace a file already at destination.")


class MoveArgs(TransferArgs):
    """Move or rename a file or folder (missing folders are made)."""


class CopyArgs(TransferArgs):
    """Copy a file or a whole folder (missing folders are made; symlinks stay symlinks)."""


class TransferResult(Output):
    source: str
    destination: str
    type: str = Field(description="file, folder, symlink or other.")


def move(state: FilesState, args: MoveArgs) -> Answer:
    source, destination = state.path(args.source, "source"), state.path(args.destination, "destination")
    _must_exist(source, "source")
    _clear_way(source, destination, args.overwrite)
    kind = kind_of(os.lstat(source).st_mode)
    _relocate(source, destination)
    return Answer(TransferResult(source=str(source), destination=str(destination), type=kind),
                  f"{source} -> {destination}")


def copy(state: FilesState, args: CopyArgs) -> Answer:
    source, destination = state.path(args.source, "source"), state.path(args.destination, "destination")
    _must_exist(source, "source")
    _clear_way(source, destination, args.overwrite)
    kind = kind_of(os.lstat(source).st_mode)
    if kind == "folder":
        shutil.copytree(source, destination, symlinks=True)
    else:
        shutil.copy2(source, destination, follow_symlinks=False)
    return Answer(TransferResult(source=str(source), destination=str(destination), type=kind),
                  f"{source} copied to {destination}")


def trash_dir(state: FilesState) -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(state.home / ".local" / "share")
    return Path(base) / "Trash"


class DeleteArgs(Args):
    """Move a file or folder to the trash, restorable (restore, or Thunar's trash)."""

    path: str = Field(description=PATH_DOC)


class DeleteResult(Output):
    path: str
    trash_id: str = Field(description="Its name in the trash: give it to restore.")
    type: str
    size: int | None = Field(None, description="A file's size in bytes.")


def delete(state: FilesState, args: DeleteArgs) -> Answer:
    path = state.path(args.path)
    _must_exist(path, "path")
    trash = trash_dir(state)
    if path in (Path("/"), state.home) or trash.is_relative_to(path):
        raise Refused(f"{str(path)!r} holds the home or the trash itself", hint="delete what is inside it instead",
                      field="path")
    info = os.lstat(path)
    (trash / "files").mkdir(parents=True, exist_ok=True)
    (trash / "info").mkdir(parents=True, exist_ok=True)
    record, name = _claim_name(trash, path)
    try:
        _relocate(path, trash / "files" / name)
    except BaseException:
        record.unlink(missing_ok=True)
        raise
    kind = kind_of(info.st_mode)
    result = DeleteResult(path=str(path), trash_id=name, type=kind, size=info.st_size if kind == "file" else None)
    return Answer(result, f"{path} moved to the trash as {name!r}")


def _claim_name(trash: Path, path: Path) -> tuple[Path, str]:
    """A free name in the trash, claimed by creating its `.trashinfo` record (exclusively)."""
    stem, n = path.name, 1
    while True:
        name = stem if n == 1 else f"{stem}.{n}"
        record = trash / "info" / f"{name}.trashinfo"
        if not _exists(trash / "files" / name):
            try:
                with open(record, "x", encoding="utf-8") as f:
                    f.write(f"[Trash Info]\nPath={quote(str(path))}\n"
                            f"DeletionDate={datetime.now().strftime('%Y-%m-%dT%H:%M:%S')}\n")
                return record, name
            except FileExistsError:
                pass
        n += 1


def _record(trash: Path, name: str) -> tuple[Path, str] | None:
    """(original path, deletion date) of a trashed item, from its `.trashinfo`."""
    try:
        lines = (trash / "info" / f"{name}.trashinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    fields = dict(line.split("=", 1) for line in lines if "=" in line)
    if "Path" not in fields:
        return None
    original = unquote(fields["Path"])
    return Path(original if original.startswith("/") else str(trash.parent / original)), fields.get("DeletionDate", "")


class RestoreArgs(Args):
    """Put back what delete trashed, by trash_id or by original path (the latest there)."""

    trash_id: str | None = Field(None, min_length=1, description="What delete answered.")
    path: str | None = Field(None, description="The original path. " + PATH_DOC)

    @model_validator(mode="after")
    def _one_of(self) -> RestoreArgs:
        if (self.trash_id is None) == (self.path is None):
            raise ValueError("give exactly one of trash_id and path")
        return self


class RestoreResult(Output):
    path: str = Field(description="Where it is again.")
    trash_id: str


def restore(state: FilesState, args: RestoreArgs) -> Answer:
    trash = trash_dir(state)
    if args.trash_id is not None:
        if "/" in args.trash_id or args.trash_id in (".", ".."):
            raise InvalidRequest(f"{args.trash_id!r} is not a trash id", field="trash_id")
        found = _record(trash, args.trash_id)
        if found is None or not _exists(trash / "files" / args.trash_id):
            raise NotFound(f"nothing in the trash is called {args.trash_id!r}",
                           hint="give the trash_id delete answered, or the original path", field="trash_id")
        name, original = args.trash_id, found[0]
    else:
        wanted = state.path(args.path or "")
        candidates = []
        for record in (trash / "info").glob("*.trashinfo") if (trash / "info").is_dir() else ():
            name = record.name.removesuffix(".trashinfo")
            found = _record(trash, name)
            if found is not None and found[0] == wanted and _exists(trash / "files" / name):
                candidates.append((found[1], record.stat().st_mtime, name))
        if not candidates:
            raise NotFound(f"nothing in the trash came from {str(wanted)!r}",
                           hint="give the trash_id delete answered", field="path")
        name, original = max(candidates)[2], wanted
    if _exists(original):
        raise Refused(f"{str(original)!r} exists again; restoring would replace it",
                      hint="move or delete what is there first", field="trash_id" if args.trash_id else "path")
    original.parent.mkdir(parents=True, exist_ok=True)
    _relocate(trash / "files" / name, original)
    (trash / "info" / f"{name}.trashinfo").unlink(missing_ok=True)
    return Answer(RestoreResult(path=str(original), trash_id=name), f"{name!r} restored to {original}")


TOOLS = [
    files_tool(name="move", description=MoveArgs.__doc__ or "", args=MoveArgs, output=TransferResult, run=move,
               annotations=REPLACES),
    files_tool(name="copy", description=CopyArgs.__doc__ or "", args=CopyArgs, output=TransferResult, run=copy,
               annotations=REPLACES),
    files_tool(name="delete", description=DeleteArgs.__doc__ or "", args=DeleteArgs, output=DeleteResult,
               run=delete, annotations=WRITES),
    files_tool(name="restore", description=RestoreArgs.__doc__ or "", args=RestoreArgs, output=RestoreResult,
               run=restore, annotations=WRITES),
]
