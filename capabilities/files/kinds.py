"""What a file is: a folder, a symlink, text or binary, and a binary file's type as `file(1)`
names it (its MIME type and description)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from datetime import UTC, datetime
from pathlib import Path

SNIFF_BYTES = 8192
"""A file whose first this many bytes hold a NUL is binary (as grep and ripgrep decide)."""


def kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def is_binary(head: bytes) -> bool:
    return b"\0" in head[:SNIFF_BYTES]


def file_type(path: Path) -> tuple[str, str]:
    """(MIME type, description) of a file by its content, as `file(1)` says; `application/
    octet-stream` when it cannot tell."""
    program = shutil.which("file")
    if program is None:
        return "application/octet-stream", "data"
    try:
        out = subprocess.run([program, "--brief", "--mime-type", "--", str(path)], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        described = subprocess.run([program, "--brief", "--", str(path)], capture_output=True,
                                   text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "application/octet-stream", "data"
    return out or "application/octet-stream", described or "data"


def iso_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def readable_size(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} bytes"


def link_target(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None
