"""Reading tools: `read` (a text file's lines, numbered, in pages), `stat`, `list` (a folder's
tree with sizes, in pages) and `glob`."""

from __future__ import annotations

import glob as globbing
import grp
import os
import pwd
import stat as stats
from pathlib import Path

from pydantic import Field

from capabilities.contract import current_cancellation

from .errors import InvalidRequest, NotFound, Refused
from .kinds import SNIFF_BYTES, file_type, is_binary, iso_time, kind_of, link_target, readable_size
from .tooling import PATH_DOC, READ_ONLY, Answer, Args, FilesState, Output, files_tool

READ_LIMIT = 2000
"""Lines a page of `read` holds unless `limit` says otherwise."""
PAGE_CHARS = 256 * 1024
"""A page of `read` stops once its text passes this many characters (at least one line)."""
LINE_CHARS = 10_000
"""A longer line is shown cut (its number listed in `cut_lines`)."""
LIST_PAGE = 1000
"""Entries (list) or paths (glob) per page."""
GLOB_CAP = 100_000


class ReadArgs(Args):
    """Read a text file's lines, numbered, a page at a time.

    Each line is '<number>\t<line>'; next_offset, when present, is the offset of the next page.
    A binary file is refused with its type and size (documents reads PDFs, Office files, images)."""

    path: str = Field(description=PATH_DOC)
    offset: int = Field(1, ge=1, description="The first line to read (1-based): 1, or a page's next_offset.")
    limit: int = Field(READ_LIMIT, ge=1, le=100_000, description="At most this many lines.")


class ReadResult(Output):
    path: str
    text: str = Field(description="The lines, each as '<number>\\t<line>'.")
    start_line: int
    lines: int = Field(description="How many lines the text holds.")
    total_lines: int
    size: int = Field(description="The file's size in bytes.")
    next_offset: int | None = Field(None, description="Present when lines follow: pass it as offset.")
    replaced: bool | None = Field(None, description="True when bytes that are not UTF-8 were shown as U+FFFD.")
    cut_lines: list[int] | None = Field(None, description=f"Lines longer than {LINE_CHARS} characters, shown cut.")


def read(state: FilesState, args: ReadArgs) -> Answer:
    path = state.path(args.path)
    cancellation = current_cancellation()
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        if stats.S_ISDIR(info.st_mode):
            raise InvalidRequest(f"{str(path)!r} is a folder", hint="list it, or read a file in it", field="path")
        head = f.read(SNIFF_BYTES)
        if is_binary(head):
            mime, described = file_type(path)
            raise Refused(f"{str(path)!r} is a binary file ({mime}: {described}; {readable_size(info.st_size)}), "
                          "not text", hint="use documents for PDFs, Office files and images; stat says what a file is",
                          field="path")
        f.seek(0)
        out: list[str] = []
        cut: list[int] = []
        chars = number = 0
        replaced = False
        next_offset = None
        for number, raw in enumerate(f, 1):
            if number % 100_000 == 0:
                cancellation.check()
            if number < args.offset:
                continue
            if len(out) >= args.limit or (out and chars >= PAGE_CHARS):
                next_offset = number
                break
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line, replaced = raw.decode("utf-8", "replace"), True
            line = line.rstrip("\n").removesuffix("\r")
            if len(line) > LINE_CHARS:
                line = line[:LINE_CHARS] + " […]"
                cut.append(number)
            out.append(f"{number:>6}\t{line}")
            chars += len(line) + 8
        total = number if next_offset is None else _line_count(f)
    if args.offset > max(total, 1):
        raise InvalidRequest(f"offset {args.offset} is past the end: {str(path)!r} has {total} lines",
                             hint="read from offset 1", field="offset")
    result = ReadResult(path=str(path), text="\n".join(out), start_line=args.offset, lines=len(out),
                        total_lines=total, size=info.st_size, next_offset=next_offset,
                        replaced=replaced or None, cut_lines=cut or None)
    more = f"; more from offset {next_offset}" if next_offset else ""
    return Answer(result, f"{path}, lines {args.offset}-{args.offset + len(out) - 1} of {total}{more}")


def _line_count(f) -> int:
    """The lines of an open file, counted by newlines in big chunks (a 50 MB file in tens of ms);
    a last line without a newline counts too."""
    cancellation = current_cancellation()
    f.seek(0)
    total, last = 0, b""
    while chunk := f.read(1 << 20):
        total += chunk.count(b"\n")
        last = chunk
        cancellation.check()
    return total + (1 if last and not last.endswith(b"\n") else 0)


class StatArgs(Args):
    """What a path is: type, size, permissions, owner, time, a symlink's target, a file's MIME type."""

    path: str = Field(description=PATH_DOC)


class StatResult(Output):
    path: str
    type: str = Field(description="file, folder, symlink or other.")
    size: int
    mode: str = Field(description="Permission bits in octal, e.g. 0644.")
    owner: str
    group: str
    modified: str = Field(description="ISO 8601, UTC.")
    readable: bool = Field(description="Whether the desktop user may read it.")
    writable: bool = Field(description="Whether the desktop user may write it.")
    link_target: str | None = Field(None, description="A symlink's target, as written in the link.")
    target_type: str | None = Field(None, description="What a symlink points at (missing when dangling).")
    mime_type: str | None = Field(None, description="A file's type by its content.")


def _name(table, ident: int) -> str:
    try:
        return table(ident)[0]
    except KeyError:
        return str(ident)


def stat(state: FilesState, args: StatArgs) -> Answer:
    path = state.path(args.path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise NotFound(f"{str(path)!r} does not exist", hint="check the path with list or glob", field="path") from None
    kind = kind_of(info.st_mode)
    result = StatResult(
        path=str(path), type=kind, size=info.st_size, mode=f"{stats.S_IMODE(info.st_mode):04o}",
        owner=_name(pwd.getpwuid, info.st_uid), group=_name(grp.getgrgid, info.st_gid),
        modified=iso_time(info.st_mtime), readable=os.access(path, os.R_OK), writable=os.access(path, os.W_OK))
    if kind == "symlink":
        result.link_target = link_target(path)
        try:
            result.target_type = kind_of(os.stat(path).st_mode)
        except OSError:
            result.target_type = None
    if (kind == "file" or result.target_type == "file") and result.readable:
        result.mime_type = file_type(path)[0]
    return Answer(result, f"{path}: {kind}, {readable_size(info.st_size)}")


class ListArgs(Args):
    """A folder's tree to depth levels, with types and sizes, a page at a time."""

    path: str = Field("~", description=PATH_DOC + " Default: the home.")
    depth: int = Field(1, ge=1, le=10, description="Levels to descend: 1 lists the folder's own entries.")
    offset: int = Field(0, ge=0, description="Entries to skip: 0, or a page's next_offset.")


class Entry(Output):
    path: str = Field(description="Relative to the folder listed.")
    type: str = Field(description="file, folder, symlink or other.")
    size: int | None = Field(None, description="A file's size in bytes.")
    entries: int | None = Field(None, description="How many entries a folder holds.")
    link_target: str | None = None
    unreadable: bool | None = Field(None, description="The desktop user may not list this folder.")


class ListResult(Output):
    path: str
    entries: list[Entry]
    total: int = Field(description="Entries in the tree to this depth.")
    total_size: int = Field(description="Bytes of the files in the tree to this depth.")
    next_offset: int | None = Field(None, description="Present when entries follow: pass it as offset.")


def list_tree(state: FilesState, args: ListArgs) -> Answer:
    root = state.path(args.path)
    if not root.is_dir():
        if not root.exists():
            raise NotFound(f"{str(root)!r} does not exist", hint="check the path", field="path")
        raise InvalidRequest(f"{str(root)!r} is not a folder", hint="stat tells about a file", field="path")
    cancellation = current_cancellation()
    entries: list[Entry] = []
    total_size = 0

    def walk(folder: Path, prefix: str, level: int) -> None:
        nonlocal total_size
        cancellation.check()
        with os.scandir(folder) as listing:
            items = sorted(listing, key=lambda item: item.name)
        for item in items:
            relative = prefix + item.name
            info = item.stat(follow_symlinks=False)
            kind = kind_of(info.st_mode)
            entry = Entry(path=relative, type=kind)
            if kind == "file":
                entry.size = info.st_size
                total_size += info.st_size
            elif kind == "symlink":
                entry.link_target = link_target(Path(item.path))
            entries.append(entry)
            if kind == "folder":
                try:
                    with os.scandir(item.path) as inner:
                        entry.entries = sum(1 for _ in inner)
                except OSError:
                    entry.unreadable = True
                    continue
                if level < args.depth:
                    walk(Path(item.path), relative + "/", level + 1)

    walk(root, "", 1)
    page = entries[args.offset:args.offset + LIST_PAGE]
    following = args.offset + LIST_PAGE if args.offset + LIST_PAGE < len(entries) else None
    result = ListResult(path=str(root), entries=page, total=len(entries), total_size=total_size,
                        next_offset=following)
    more = f"; more from offset {following}" if following else ""
    return Answer(result, f"{root}: {len(entries)} entries, {readable_size(total_size)}{more}")


class GlobArgs(Args):
    """Paths matching a glob pattern, sorted, a page at a time.

    '*', '?' and '[abc]' match within a name, '**' any depth of folders."""

    pattern: str = Field(min_length=1, description="E.g. '**/*.py'; relative to root, or absolute.")
    root: str = Field("~", description="The folder the pattern starts in. " + PATH_DOC)
    offset: int = Field(0, ge=0, description="Paths to skip: 0, or a page's next_offset.")


class GlobResult(Output):
    root: str
    paths: list[str] = Field(description="Absolute paths.")
    total: int
    next_offset: int | None = Field(None, description="Present when paths follow: pass it as offset.")
    truncated: bool | None = Field(None, description=f"More than {GLOB_CAP} paths matched; only those are counted.")


def glob(state: FilesState, args: GlobArgs) -> Answer:
    root = state.path(args.root, "root")
    if not root.is_dir():
        raise NotFound(f"the root {str(root)!r} is not a folder", hint="give an existing folder as root", field="root")
    cancellation = current_cancellation()
    pattern = str(state.path(args.pattern, "pattern")) if args.pattern.startswith(("/", "~")) else args.pattern
    found: list[str] = []
    truncated = False
    for match in globbing.iglob(pattern, root_dir=root, recursive=True):
        found.append(os.path.normpath(os.path.join(root, match)))
        if len(found) % 10_000 == 0:
            cancellation.check()
        if len(found) >= GLOB_CAP:
            truncated = True
            break
    found.sort()
    page = found[args.offset:args.offset + LIST_PAGE]
    following = args.offset + LIST_PAGE if args.offset + LIST_PAGE < len(found) else None
    result = GlobResult(root=str(root), paths=page, total=len(found), next_offset=following,
                        truncated=truncated or None)
    more = f"; more from offset {following}" if following else ""
    return Answer(result, f"{args.pattern!r} in {root}: {len(found)} paths{more}")


TOOLS = [
    files_tool(name="read", description=ReadArgs.__doc__ or "", args=ReadArgs, output=ReadResult, run=read,
               annotations=READ_ONLY),
    files_tool(name="stat", description=StatArgs.__doc__ or "", args=StatArgs, output=StatResult, run=stat,
               annotations=READ_ONLY),
    files_tool(name="list", description=ListArgs.__doc__ or "", args=ListArgs, output=ListResult, run=list_tree,
               annotations=READ_ONLY),
    files_tool(name="glob", description=GlobArgs.__doc__ or "", args=GlobArgs, output=GlobResult, run=glob,
               annotations=READ_ONLY),
]
