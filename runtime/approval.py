"""What a person approves: the call's arguments, and the target they act on as it was when shown.

An approval is bound to both. The arguments cannot change (what runs is what was shown); the
target can, between the moment a person saw the request and the moment they said yes, so it is
read again after the yes and a change refuses the call (`approval_stale`):

- an `exec`: the program file and every argument naming an existing file (relative to the
  call's `cwd`, else the desktop user's home), by their SHA-256 (a script edited after it was
  shown is not what was approved);
- a `desktop_execute` batch: the screen around each point its mouse steps act on (a 32 px
  square, grabbed through the same server), so a window that moved under the pointer, or a
  dialog that appeared there, is not clicked on an old yes.

Other calls are bound to their arguments alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from capabilities.exec.confinement import DEFAULT_PATH, default_cwd, desktop_identity, resolve_program

CallTool = Callable[[str, str, Any], Awaitable[dict[str, Any]]]
REGION = 32
_HASH_LIMIT = 256 << 20  # a larger file is bound by its size, time and inode instead


@dataclass(frozen=True)
class ApprovalRequest:
    """One call the operator's policy asks a person about."""

    server: str
    tool: str
    arguments: Any
    rule: str
    target: dict[str, Any] = field(default_factory=dict)  # what the call acts on, as shown

    def question(self) -> str:
        """The request in words, for a client's user (MCP elicitation)."""
        shown = json.dumps(self.arguments, ensure_ascii=False, indent=1)
        if len(shown) > 4000:
            shown = shown[:4000] + "\n… (cut)"
        return (f"A script asks to run {self.server}.{self.tool} (policy rule {self.rule!r}: ask). Approve "
                f"this call, with exactly these arguments?\n{shown}")

    def shown(self) -> dict[str, Any]:
        """The request for a viewer's dialog (its arguments are redacted by the viewer's end)."""
        from .oversight import step_summary, targets

        return {"server": self.server, "tool": self.tool, "rule": self.rule, "arguments": self.arguments,
                "step": step_summary(self.tool, self.arguments), "points": targets(self.tool, self.arguments),
                "files": sorted(self.target.get("files", {}))}


async def read_target(call: CallTool, server: str, tool: str, args: Any) -> dict[str, Any]:
    """The state of what the call acts on (see above); {} when it is bound to its arguments alone."""
    if not isinstance(args, dict):
        return {}
    if tool == "exec" and isinstance(args.get("bin"), str):
        return {"files": await anyio.to_thread.run_sync(_exec_files, args)}  # hashing: off the loop
    if tool == "desktop_execute":
        from .oversight import targets

        points = targets(tool, args)
        if points:
            return {"regions": [await _region(call, server, p["x"], p["y"]) for p in points]}
    return {}


def changed(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """What changed between two readings, in words; None when nothing did."""
    for name in sorted(set(before.get("files", {})) | set(after.get("files", {}))):
        if before.get("files", {}).get(name) != after.get("files", {}).get(name):
            return f"the file {name} changed after it was shown"
    for old, new in zip(before.get("regions", ()), after.get("regions", ()), strict=False):
        if old != new:
            return f"the screen at ({old['x']}, {old['y']}) changed after it was shown"
    return None


def _exec_files(args: dict[str, Any]) -> dict[str, str]:
    """The program and the files its arguments name, found as the exec server finds them."""
    who = desktop_identity()
    cwd = args.get("cwd") if isinstance(args.get("cwd"), str) else default_cwd(who)
    env = {**who.env, **(args.get("env") if isinstance(args.get("env"), dict) else {})}
    path = env.get("PATH") if isinstance(env.get("PATH"), str) else DEFAULT_PATH
    program = resolve_program(args["bin"], cwd, path)
    files = {args["bin"]: _digest(program) if program else "absent"}
    for arg in args.get("args") or ():
        if isinstance(arg, str) and arg and not arg.startswith("-") and len(arg) < 4096:
            candidate = os.path.join(cwd, arg)
            if os.path.isfile(candidate):
                files[arg] = _digest(candidate)
    return files


def _digest(path: str) -> str:
    """A regular file's SHA-256 (its size, time and inode past _HASH_LIMIT); anything else is
    named, never read: a script may name /dev/zero or a FIFO, which would hold a thread forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"not a regular file (mode {st.st_mode:o}, inode {st.st_ino})"
        if st.st_size > _HASH_LIMIT:
            return f"size {st.st_size}, modified {st.st_mtime_ns}, inode {st.st_ino}"
        digest, left = hashlib.sha256(), st.st_size  # what is there now: a file that keeps growing ends too
        try:
            while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                digest.update(chunk)
                left -= len(chunk)
        except OSError as exc:
            return f"unreadable ({exc.strerror})"
        return f"{digest.hexdigest()} ({st.st_size} bytes)"


async def _region(call: CallTool, server: str, x: float, y: float) -> dict[str, Any]:
    left, top = max(0, int(x) - REGION // 2), max(0, int(y) - REGION // 2)
    result = await call(server, "desktop_execute", {"operations": [
        {"type": "screen.grabRegion", "params": {"left": left, "top": top, "width": REGION, "height": REGION}}]})
    data = "".join(block.get("data", "") for block in result.get("content", ()) if block.get("type") == "image")
    return {"x": x, "y": y, "pixels": hashlib.sha256(data.encode()).hexdigest() if data else "unreadable"}
