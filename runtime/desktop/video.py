"""Screen video: the session's screen recorded by ffmpeg (x11grab) in segments, kept within a
retention limit by age and by size.

    <data>/video/<YYYYmmdd-HHMMSS>.mp4   one segment each (60 s by default), named for its start

Started by the operator (`codedesk desktop up --video`, or `$CODEDESK_VIDEO=on`), or by a
script (the `session` server's `screen_video` tool, through the oversight relay). A script may
stop only a recording a script started: what the operator turned on stays on. ffmpeg runs as
the viewer account (which already reads the screen for x11vnc), never as root, and writes only
its own folder (0700); the supervisor prunes it: segments older than `$CODEDESK_VIDEO_KEEP_HOURS`
(24) go first, then the oldest while the folder is over `$CODEDESK_VIDEO_KEEP_MB` (2048). The
segment being written is never pruned. A screen resized by the viewer starts a new segment at the
new size.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import procs
from .layout import DesktopUser

log = logging.getLogger("codedesk.desktop.video")

VIDEO_ENV = "CODEDESK_VIDEO"
KEEP_MB_ENV = "CODEDESK_VIDEO_KEEP_MB"
KEEP_HOURS_ENV = "CODEDESK_VIDEO_KEEP_HOURS"
SEGMENT_ENV = "CODEDESK_VIDEO_SEGMENT_SECONDS"
SEGMENT_RANGE = (2, 600)
FRAME_RATE = 10
FFMPEG = shutil.which("ffmpeg") or "/usr/bin/ffmpeg"
SUFFIX = ".mp4"


class VideoError(RuntimeError):
    """A request the recorder cannot do; the message says why and what to do, `kind` is the
    capability contract's error kind for it."""

    def __init__(self, message: str, kind: str = "unavailable") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Retention:
    keep_bytes: int
    keep_seconds: float

    @classmethod
    def from_env(cls) -> Retention:
        return cls(int(_number(KEEP_MB_ENV, 2048) * 1024 * 1024), _number(KEEP_HOURS_ENV, 24) * 3600)


def segments(folder: Path) -> list[tuple[str, int, float]]:
    """(name, bytes, modified) of the folder's segments, oldest first; links and others skipped."""
    found = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.endswith(SUFFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.append((entry.name, st.st_size, st.st_mtime))
    return sorted(found)


def segment_times(folder: Path) -> list[tuple[str, float, float]]:
    """(path, start, end) of each segment: its start from its name, its end when last written."""
    times = []
    for name, _, modified in segments(folder):
        try:
            start = time.mktime(time.strptime(name.removesuffix(SUFFIX), "%Y%m%d-%H%M%S"))
        except ValueError:
            continue
        times.append((str(folder / name), start, modified))
    return times


def prune(folder: Path, keep: Retention, now: float | None = None, writing: str | None = None) -> list[str]:
    """Delete segments past the retention limit (too old first, then the oldest while over the size
    limit), never `writing`; the names deleted."""
    now = time.time() if now is None else now
    found = segments(folder)
    total = sum(size for _, size, _ in found)
    removed = []
    for name, size, modified in found:
        if name != writing and (now - modified > keep.keep_seconds or total > keep.keep_bytes):
            try:
                (folder / name).unlink()
            except OSError:
                continue
            total -= size
            removed.append(name)
    if removed:
        log.info("video retention removed %d segment(s): %s", len(removed), ", ".join(removed))
    return removed


class VideoRecorder:
    """The session's one screen recorder, driven by the supervisor."""

    def __init__(self, folder: Path, display: str, user: DesktopUser, env: dict[str, str], log_path: Path,
                 screen_size: Callable[[], tuple[int, int]], keep: Retention | None = None) -> None:
        self.folder = folder
        self.display = display
        self.user = user
        self.env = env
        self.log_path = log_path
        self.screen_size = screen_size
        self.keep = keep or Retention.from_env()
        self.started_by: str | None = None  # "operator" or "script" while recording
        self.segment_seconds = int(_number(SEGMENT_ENV, 60))
        self._proc: subprocess.Popen | None = None
        self._size: tuple[int, int] | None = None
        self._lock = threading.RLock()  # requests come from the relay's threads and the watch loop's
        self._started_at = 0.0
        self._quick_exits = 0
        self.error: str | None = None  # why recording stopped by itself

    @property
    def recording(self) -> bool:
        return self.started_by is not None

    def start(self, by: str, segment_seconds: int | None = None) -> dict[str, Any]:
        with self._lock:
            if segment_seconds is not None and not SEGMENT_RANGE[0] <= segment_seconds <= SEGMENT_RANGE[1]:
                raise VideoError(f"segmentSeconds must be {SEGMENT_RANGE[0]} to {SEGMENT_RANGE[1]}", "invalid_arguments")
            if not os.path.exists(FFMPEG):
                raise VideoError("ffmpeg is not installed here; `make install` (desktop-image/install-system.sh) installs it")
            if self.recording:
                return self.status()
            if segment_seconds is not None:
                self.segment_seconds = segment_seconds
            self.started_by, self.error, self._quick_exits = by, None, 0
            self._spawn()
            return self.status()

    def stop(self, by: str) -> dict[str, Any]:
        with self._lock:
            if self.started_by == "operator" and by != "operator":
                raise VideoError("the operator turned this recording on; a script cannot stop it", "refused")
            self.started_by = None
            self._end()
            return self.status()

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"recording": self.recording, "startedBy": self.started_by, "error": self.error,
                    "folder": str(self.folder),
                    "segmentSeconds": self.segment_seconds,
                    "keep": {"megabytes": round(self.keep.keep_bytes / 1048576), "hours": self.keep.keep_seconds / 3600},
                    "segments": [{"name": n, "bytes": b, "end": round(m, 3)} for n, b, m in segments(self.folder)]}

    def check(self) -> None:
        """From the supervisor's watch loop: restart a dead or mis-sized recorder, prune the folder."""
        with self._lock:
            if not self.recording:
                return
            if self._proc is None or self._proc.poll() is not None or self.screen_size() != self._size:
                if self._proc is not None and self._proc.poll() is not None:
                    quick = time.monotonic() - self._started_at < 10
                    self._quick_exits = self._quick_exits + 1 if quick else 0
                    if self._quick_exits >= 3:
                        self.error = f"ffmpeg exited at start 3 times (code {self._proc.returncode}; see {self.log_path})"
                        log.error("screen video stopped: %s", self.error)
                        self.started_by, self._proc = None, None
                        return
                    log.warning("ffmpeg exited (%s); recording again (see %s)", self._proc.returncode, self.log_path)
                self._end()
                self._spawn()
            current = segments(self.folder)
            prune(self.folder, self.keep, writing=current[-1][0] if current else None)

    def close(self) -> None:
        with self._lock:
            self._end()

    def _spawn(self) -> None:
        self._size = self.screen_size()
        w, h = self._size
        argv = [FFMPEG, "-nostdin", "-hide_banner", "-loglevel", "warning",
                "-f", "x11grab", "-framerate", str(FRAME_RATE), "-video_size", f"{w}x{h}", "-i", f"{self.display}+0,0",
                "-c:v", "libx264", "-preset", "ultrafast", "-crf", "32", "-pix_fmt", "yuv420p",
                "-g", str(FRAME_RATE * 2), "-force_key_frames", f"expr:gte(t,n_forced*{self.segment_seconds})",
                "-f", "segment", "-segment_time", str(self.segment_seconds), "-reset_timestamps", "1",
                "-segment_format_options", "movflags=+faststart", "-strftime", "1",
                str(self.folder / f"%Y%m%d-%H%M%S{SUFFIX}")]
        logf = procs.open_log(self.log_path)
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                          env=self.env, cwd=self.folder, start_new_session=True,
                                          **self.user.popen_kwargs())
        finally:
            logf.close()
        self._started_at = time.monotonic()
        log.info("screen video: ffmpeg pid %s, %dx%d, %d s segments, in %s",
                 self._proc.pid, w, h, self.segment_seconds, self.folder)

    def _end(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)  # ffmpeg finishes the segment it writes (its index)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _number(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default
