"""Writing tools: `write` (a whole file, atomically), `edit` (an exact-match replacement) and
`patch` (a unified diff, every hunk or none).

Every change lands atomically: the new content is written to a temporary file beside the
target and renamed over it, so a reader sees the old file or the new one, never half of one,
and a failure leaves the old one as it was. A symlink is written through (its target changes,
the link stays); an existing file keeps its permission bits.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shutil
import stat as stats
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import Field

from capabilities.contract import current_cancellation

from .errors import InvalidRequest, NotFound, PatchDoesNotApply, Refused, Unavailable
from .kinds import file_type, is_binary, readable_size
from .tooling import PATH_DOC, REPLACES, Answer, Args, FilesState, Output, files_tool

PATCH_SECONDS = 30

# Read once: os.umask can only be read by setting it, which is not safe once threads run.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


@contextmanager
def replacing(target: Path) -> Iterator[Path]:
    """A temporary path beside `target` (a symlink's target, for a symlink); once the block has
    written it, it replaces the target in one rename; on any failure it vanishes."""
    real = Path(os.path.realpath(target))
    try:
        mode = stats.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_UMASK
    fd, name = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    os.close(fd)
    temporary = Path(name)
    try:
        yield temporary
        os.chmod(temporary, mode)
        os.replace(temporary, real)
    finally:
        temporary.unlink(missing_ok=True)


def _text_of(path: Path, tool: str) -> str:
    """A file's content as UTF-8 text (its line endings kept), or a refusal saying what it is."""
    if path.is_dir():
        raise InvalidRequest(f"{str(path)!r} is a folder", hint=f"{tool} changes a file", field="path")
    data = path.read_bytes()
    if is_binary(data):
        mime, described = file_type(path)
        raise Refused(f"{str(path)!r} is a binary file ({mime}: {described}; {readable_size(len(data))})",
                      hint=f"{tool} changes text; replace a binary file whole with write (encoding: base64)",
                      field="path")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused(f"{str(path)!r} is not UTF-8 text (byte {exc.start})",
                      hint="replace it whole with write, or convert it first", field="path") from None


class WriteArgs(Args):
    """Write a whole file, atomically.

    The content goes to a temporary file renamed over the path, so nothing half-written is ever
    seen; missing folders are made; an existing file keeps its permissions."""

    path: str = Field(description=PATH_DOC)
    content: str = Field(description="The whole new content.")
    encoding: Literal["utf-8", "base64"] = Field("utf-8", description="How content is given: text, or base64 bytes.")


class WriteResult(Output):
    path: str
    bytes: int
    created: bool = Field(description="True when the file did not exist before.")


def write(state: FilesState, args: WriteArgs) -> Answer:
    path = state.path(args.path)
    if args.encoding == "base64":
        try:
            data = base64.b64decode(args.content, validate=True)
        except binascii.Error as exc:
            raise InvalidRequest(f"content is not valid base64 ({exc})", hint="encode the bytes with btoa, or "
                                 "pass encoding: 'utf-8' for text", field="content") from None
    else:
        data = args.content.encode("utf-8")
    if path.is_dir():
        raise InvalidRequest(f"{str(path)!r} is a folder", hint="give a file's path", field="path")
    created = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as temporary:
        temporary.write_bytes(data)
    return Answer(WriteResult(path=str(path), bytes=len(data), created=created),
                  f"{path}: {'created' if created else 'replaced'}, {readable_size(len(data))}")


class EditArgs(Args):
    """Replace exact text in a file: old must occur exactly count times (default 1).

    Otherwise nothing changes and the error names the lines where old (or text like it) is."""

    path: str = Field(description=PATH_DOC)
    old: str = Field(min_length=1, description="The exact text to replace, whitespace included.")
    new: str = Field(description="What replaces it.")
    count: int = Field(1, ge=1, description="How many occurrences to replace: all of them must be there.")


class EditResult(Output):
    path: str
    replacements: int
    lines: list[int] = Field(description="The line each replacement starts on, in the new file.")


def _line_at(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _lines_list(lines: list[int]) -> str:
    shown = ", ".join(str(n) for n in lines[:20])
    return shown + (f" and {len(lines) - 20} more" if len(lines) > 20 else "")


def _near_misses(text: str, old: str) -> list[int]:
    """Lines where `old` would match but for whitespace or case: where the caller meant to aim."""
    wanted = [line.strip() for line in old.splitlines() if line.strip()]
    if not wanted:
        return []
    first = " ".join(wanted[0].split()).lower()
    return [number for number, line in enumerate(text.splitlines(), 1)
            if first and first in " ".join(line.split()).lower()][:20]


def edit(state: FilesState, args: EditArgs) -> Answer:
    path = state.path(args.path)
    if args.old == args.new:
        raise InvalidRequest("old and new are the same: nothing would change", field="new")
    text = _text_of(path, "edit")
    starts = [match.start() for match in re.finditer(re.escape(args.old), text)]
    lines = [_line_at(text, start) for start in starts]
    if not starts:
        near = _near_misses(text, args.old)
        where = (f"; text like its first line is at line(s) {_lines_list(near)} (whitespace or case differ)"
                 if near else "")
        raise NotFound(f"old does not occur in {str(path)!r}{where}. Nothing was changed.",
                       hint="read those lines and copy old exactly, whitespace included", field="old")
    if len(starts) != args.count:
        raise InvalidRequest(
            f"old occurs {len(starts)} times in {str(path)!r} (at lines {_lines_list(lines)}), not {args.count}. "
            "Nothing was changed.",
            hint=(f"add the lines around the one you mean to old so it occurs once, or pass count: {len(starts)} "
                  "to replace every one"), field="old")
    updated = text.replace(args.old, args.new)
    with replacing(path) as temporary:
        temporary.write_bytes(updated.encode("utf-8"))
    shift = len(args.new) - len(args.old)
    new_lines = [_line_at(updated, start + i * shift) for i, start in enumerate(starts)]
    return Answer(EditResult(path=str(path), replacements=len(starts), lines=new_lines),
                  f"{path}: {len(starts)} replacement(s) at line(s) {_lines_list(new_lines)}")


class PatchArgs(Args):
    """Apply a unified diff to one file: every hunk applies exactly, or nothing is written.

    Hunks start '@@ -a,b +c,d @@'; the '---'/'+++' headers are optional."""

    path: str = Field(description=PATH_DOC)
    diff: str = Field(min_length=1, description="The unified diff of this one file.")


class PatchResult(Output):
    path: str
    hunks: int
    added: int = Field(description="Lines added.")
    removed: int = Field(description="Lines removed.")


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.MULTILINE)


def patch(state: FilesState, args: PatchArgs) -> Answer:
    path = state.path(args.path)
    program = shutil.which("patch")
    if program is None:
        raise Unavailable("GNU patch is not installed", hint="install the Debian package patch (make install)")
    hunks = len(_HUNK.findall(args.diff))
    if hunks == 0:
        raise InvalidRequest("the diff has no hunk (a line starting '@@ -a,b +c,d @@')",
                             hint="give a unified diff, as diff -u or git diff write it", field="diff")
    if len(re.findall(r"^\+\+\+ ", args.diff, re.MULTILINE)) > 1:
        raise InvalidRequest("the diff changes more than one file", hint="patch one file per call", field="diff")
    if not path.exists():
        raise NotFound(f"{str(path)!r} does not exist", hint="create it with write", field="path")
    _text_of(path, "patch")
    diff = args.diff if args.diff.endswith("\n") else args.diff + "\n"
    added = len(re.findall(r"^\+(?!\+\+ )", diff, re.MULTILINE))
    removed = len(re.findall(r"^-(?!-- )", diff, re.MULTILINE))
    cancellation = current_cancellation()
    with replacing(path) as temporary:
        process = subprocess.Popen(
            [program, "--batch", "--forward", "--fuzz=0", "--no-backup-if-mismatch", "--reject-file=-",
             "--output", str(temporary), "--", str(os.path.realpath(path))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with cancellation.on_cancel(process.kill):
            try:
                said, _ = process.communicate(diff, timeout=PATCH_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                raise PatchDoesNotApply("patch took too long; nothing was written") from None
        cancellation.check()
        if process.returncode != 0:
            why = "; ".join(line.strip() for line in said.splitlines()
                            if line.strip() and not line.startswith("patching file"))
            raise PatchDoesNotApply(
                f"the diff does not apply to {str(path)!r} ({why or 'patch failed'}). Nothing was written.",
                hint="read the file around those lines and make the hunks' context match it exactly", field="diff")
    return Answer(PatchResult(path=str(path), hunks=hunks, added=added, removed=removed),
                  f"{path}: {hunks} hunk(s) applied, +{added} -{removed}")


TOOLS = [
    files_tool(name="write", description=WriteArgs.__doc__ or "", args=WriteArgs, output=WriteResult, run=write,
               annotations=REPLACES),
    files_tool(name="edit", description=EditArgs.__doc__ or "", args=EditArgs, output=EditResult, run=edit,
               annotations=REPLACES),
    files_tool(name="patch", description=PatchArgs.__doc__ or "", args=PatchArgs, output=PatchResult, run=patch,
               annotations=REPLACES),
]
