"""The exec log store: what each command printed and what became of it, on the session's disk.

Layout under `<data>/exec/`, per command:
- `<id>.log`: stdout and stderr, one log. The program writes it itself through an inherited
  file descriptor opened for appending, so output reaches the disk as it comes and never
  passes through (or accumulates in) the server.
- `<id>.json`: a `CommandRecord`: what was run, as whom, by which server process, its status.

Every file here is opened without following symbolic links (`_open`): the directory may
belong to the desktop user while a root server writes in it, and a link planted there must not
point a root write or read at another file.

Records are replaced atomically; a status moves from `running` to a final one exactly once,
under a lock shared by every exec server using this directory (`settle`). Logs are kept
`RETENTION_SECONDS` after their command ended, then removed by `prune`.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import regex

from .errors import OffsetPastEnd, PatternTooSlow, UnknownCommand
from .requests import ID_HELP, ID_RE

RETENTION_SECONDS = 7 * 24 * 3600
# One stream_logs answer carries at most this many bytes of log.
CHUNK_BYTES = 1 << 20
# search_logs answers at most this many matches, each line cut to this many characters.
MAX_MATCHES = 1000
MAX_LINE_CHARS = 2000
# A "line" longer than this is searched in pieces, so one huge line cannot fill memory.
MAX_LINE_BYTES = 1 << 16
SEARCH_BLOCK_BYTES = 1 << 20
# Patterns whose match in a line might not be a match in the block around it (anchors at the
# string's ends, lookarounds that could see a neighbouring line): searched line by line only.
_UNSAFE_FOR_BLOCKS = regex.compile(r"\\[AZ]|\(\?<?[!=]")
# One search_logs may spend this long matching, however its pattern backtracks.
SEARCH_SECONDS = 5.0

RUNNING = "running"


@dataclass(kw_only=True)
class CommandRecord:
    """The metadata file of one command.

    `owner_pid`/`owner_started`/`boot_id` identify the server process that runs it, so another
    server (or the same one after a restart) can tell a live owner from a dead one;
    `pid`/`pid_started` identify the program itself (a pid alone may have been reused).
    """

    id: str
    bin: str
    args: list[str]
    cwd: str
    timeout: int
    user: str
    started_at: float
    owner_pid: int
    owner_started: float
    boot_id: str
    status: str = RUNNING
    ended_at: float | None = None
    pid: int | None = None
    pid_started: float | None = None
    log_cut_at: int | None = None  # the log reached the per-command cap and was cut at this many bytes

    @classmethod
    def from_json(cls, raw: dict) -> "CommandRecord":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in raw.items() if k in known})


@dataclass(frozen=True, kw_only=True)
class LogChunk:
    """A bounded piece of a log: `text` from `offset` up to `next_offset`; `more` when cut short."""

    text: str
    next_offset: int
    more: bool


@dataclass(frozen=True, kw_only=True)
class LogMatch:
    line: str
    offset: int


class LogStore:
    """The `<data>/exec/` directory: command records and their logs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_path = root / ".lock"

    # -- records ---------------------------------------------------------------------------

    def log_path(self, command_id: str) -> Path:
        return self.root / f"{command_id}.log"

    def _record_path(self, command_id: str) -> Path:
        return self.root / f"{command_id}.json"

    def create(self, make_record) -> tuple[CommandRecord, int]:
        """Reserve a fresh id and open its log for appending.

        `make_record(id)` builds the record; the caller saves it once it knows the program's
        pid. Returns it with the log's file descriptor (close-on-exec; the caller hands it to
        the program and then closes it).
        """
        while True:
            command_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)
            try:
                # O_EXCL on the log makes the id ours even against another server on this dir.
                fd = os.open(
                    self.log_path(command_id),
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW,
                    0o600,
                )
            except FileExistsError:
                continue
            return make_record(command_id), fd

    def save(self, record: CommandRecord) -> None:
        path = self._record_path(record.id)
        tmp = path.with_name(f".{record.id}.{secrets.token_hex(4)}.json.tmp")
        fd = _open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(asdict(record)))
        os.replace(tmp, path)

    def cut(self, command_id: str, size: int) -> bool:
        """Cut the log back to `size` bytes if it is longer; whether it was."""
        try:
            fd = _open(self.log_path(command_id), os.O_WRONLY)
        except OSError:
            return False
        try:
            if os.fstat(fd).st_size <= size:
                return False
            os.ftruncate(fd, size)
            return True
        finally:
            os.close(fd)

    def load(self, command_id: str) -> CommandRecord:
        if not ID_RE.match(command_id):
            raise UnknownCommand(f"{command_id!r} is not an exec id ({ID_HELP})")
        try:
            raw = json.loads(_read_text(self._record_path(command_id)))
        except FileNotFoundError:
            raise UnknownCommand(
                f"no command with id {command_id} (ids are returned by exec; logs are kept for 7 days)"
            ) from None
        return CommandRecord.from_json(raw)

    def records(self) -> Iterator[CommandRecord]:
        for path in sorted(self.root.glob("*.json")):
            try:
                yield CommandRecord.from_json(json.loads(_read_text(path)))
            except (OSError, ValueError, TypeError):
                continue

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with os.fdopen(_open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def settle(self, command_id: str, status: str) -> CommandRecord:
        """Give a running command its final status; a status already final is kept.

        Returns the record as it now stands (so the caller reports the status that won).
        """
        with self._locked():
            record = self.load(command_id)
            if record.status == RUNNING:
                record.status = status
                record.ended_at = time.time()
                self.save(record)
            return record

    def note(self, command_id: str, message: str) -> None:
        """Append a line of our own to a command's log (why it could not start, for instance)."""
        with os.fdopen(_open(self.log_path(command_id), os.O_WRONLY | os.O_APPEND), "ab") as log:
            log.write(f"exec: {message}\n".encode())

    # -- reading ---------------------------------------------------------------------------

    def read(self, command_id: str, offset: int, final: bool, cap: int) -> LogChunk:
        """Read up to CHUNK_BYTES of the log from `offset`, never past byte `cap` (the log cap).

        A chunk never ends inside a UTF-8 character (the rest comes with the next read), and a
        full chunk ends after its last line break when it has one. `final` says the command has
        ended, so a trailing partial character will never complete and is returned as is.
        """
        path = self.log_path(command_id)
        try:
            with os.fdopen(_open(path, os.O_RDONLY), "rb") as log:
                size = min(os.fstat(log.fileno()).st_size, cap)
                if offset > size:
                    raise OffsetPastEnd(
                        f"stream_logs refused: field 'offset': {offset} is past the end of the log "
                        f"({size} bytes); read from 0 or from the next_offset of the previous stream_logs"
                    )
                data = os.pread(log.fileno(), min(CHUNK_BYTES, size - offset), offset)
        except FileNotFoundError:
            raise UnknownCommand(f"the log of {command_id} is gone (logs are kept for 7 days)") from None
        full = len(data) == CHUNK_BYTES
        if full:
            cut = data.rfind(b"\n") + 1 or _utf8_boundary(data)
        elif final or offset + len(data) == cap:
            cut = len(data)
        else:
            cut = _utf8_boundary(data)
        next_offset = offset + cut
        more = full or next_offset < size
        return LogChunk(text=data[:cut].decode("utf-8", "replace"), next_offset=next_offset, more=more)

    def search(self, command_id: str, pattern: str, cap: int) -> tuple[list[LogMatch], bool]:
        """Lines of the log matching `pattern`, with the byte offset each starts at.

        Reads the log in blocks (never whole) up to its size when the search began (never past
        byte `cap`, the log cap); a line longer than MAX_LINE_BYTES is searched in pieces.
        Returns the first MAX_MATCHES matches and whether there were more.

        Raises:
            PatternTooSlow: matching took more than SEARCH_SECONDS (a pattern that backtracks
                exponentially, such as `(a+)+$` on a long line).
        """
        # The `regex` engine takes Python's syntax and, unlike `re`, can be stopped by a timeout.
        line_re = regex.compile(pattern)
        # Most blocks hold no match at all: one C-speed search over the block rules it out.
        # Only safe when a match in a line is also a match in the block around it.
        prefilter = None if _UNSAFE_FOR_BLOCKS.search(pattern) else regex.compile(pattern, regex.MULTILINE)
        deadline = time.monotonic() + SEARCH_SECONDS

        def found(compiled: regex.Pattern, text: str) -> bool:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                return compiled.search(text, timeout=left, concurrent=True) is not None
            except TimeoutError:
                raise pattern_too_slow(pattern) from None

        matches: list[LogMatch] = []
        try:
            log = os.fdopen(_open(self.log_path(command_id), os.O_RDONLY), "rb")
        except FileNotFoundError:
            raise UnknownCommand(f"the log of {command_id} is gone (logs are kept for 7 days)") from None
        with log:
            remaining = min(os.fstat(log.fileno()).st_size, cap)
            start, pending = 0, b""  # `pending` starts at log offset `start`
            while True:
                data = log.read(min(SEARCH_BLOCK_BYTES, remaining)) if remaining else b""
                remaining -= len(data)
                pending += data
                last = remaining <= 0 or not data
                cut = len(pending) if last else pending.rfind(b"\n") + 1
                if cut == 0 and not last:
                    if len(pending) < MAX_LINE_BYTES:
                        continue
                    cut = len(pending)
                block, pending = pending[:cut], pending[cut:]
                if block and (prefilter is None or found(prefilter, block.decode("utf-8", "replace"))):
                    offset = start
                    lines = block.split(b"\n")
                    if block.endswith(b"\n"):
                        lines.pop()  # the empty "line" after the final line break is no line
                    for raw in lines:
                        text = raw.decode("utf-8", "replace")
                        if found(line_re, text):
                            if len(matches) == MAX_MATCHES:
                                return matches, True
                            matches.append(LogMatch(line=text[:MAX_LINE_CHARS], offset=offset))
                        offset += len(raw) + 1
                start += len(block)
                if last:
                    return matches, False

    # -- retention -------------------------------------------------------------------------

    def prune(self, now: float | None = None) -> list[str]:
        """Remove the records and logs of commands that ended more than 7 days ago.

        A running command is kept whatever its age; a log without a record (a crash between
        the two writes) goes by the log's modification time. Returns the removed ids.
        """
        now = time.time() if now is None else now
        horizon = now - RETENTION_SECONDS
        removed: list[str] = []
        with self._locked():
            for record in self.records():
                if record.status != RUNNING and (record.ended_at or record.started_at) < horizon:
                    self.log_path(record.id).unlink(missing_ok=True)
                    self._record_path(record.id).unlink(missing_ok=True)
                    removed.append(record.id)
            for log in self.root.glob("*.log"):
                if not self._record_path(log.stem).exists():
                    try:
                        if log.stat().st_mtime < horizon:
                            log.unlink()
                            removed.append(log.stem)
                    except FileNotFoundError:
                        pass
        return removed


def pattern_too_slow(pattern: str) -> PatternTooSlow:
    return PatternTooSlow(
        f"search_logs stopped: field 'pattern': matching {pattern!r} took more than "
        f"{SEARCH_SECONDS:g} s (nested repetition such as (a+)+ can take exponential time "
        f"on a long line); use a simpler pattern, e.g. without a repeated group"
    )


def _open(path: Path, flags: int, mode: int = 0o600) -> int:
    """os.open that refuses a symbolic link (and never hands the descriptor to a program)."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def _read_text(path: Path) -> str:
    with os.fdopen(_open(path, os.O_RDONLY)) as f:
        return f.read()


def _utf8_boundary(data: bytes) -> int:
    """The length of `data` without a trailing incomplete UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead
            continue
        if byte < 0x80:
            return len(data)
        need = 2 if byte >= 0xC0 and byte < 0xE0 else 3 if byte < 0xF0 else 4
        return len(data) if back >= need else len(data) - back
    return len(data)
