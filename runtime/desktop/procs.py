"""Process and socket helpers of the session: readiness probes, stopping, X lock cleanup.

Every process the session starts carries `CODEDESK_SESSION=<id>` in its environment, and so do
the programs opened from the desktop, so `down` can find and stop all of them, and only them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

MARKER = "CODEDESK_SESSION"


async def http_ok(host: str, port: int, path: str, timeout: float = 1.0) -> bool:
    """Whether `GET path` on host:port answers 200."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), timeout)
        return status.split()[1:2] == [b"200"]
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


async def rfb_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a VNC server on host:port greets with its RFB version."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        return (await asyncio.wait_for(reader.read(12), timeout)).startswith(b"RFB ")
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except OSError:
            pass


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def terminate(proc: subprocess.Popen, grace: float = 3.0) -> None:
    """SIGTERM the process (then its process group), SIGKILL what is left after `grace` s."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def marked_pids(session_id: str) -> list[int]:
    """Pids of the processes whose environment carries this session's marker."""
    needle = f"{MARKER}={session_id}".encode()
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry))
    return found


def kill_marked(session_id: str, grace: float = 3.0) -> None:
    """Stop every process of the session: SIGTERM, then SIGKILL after `grace` s."""
    pids = marked_pids(session_id)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if pid_alive(p)]
        time.sleep(0.05)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def remove_stale_x_lock(display_num: int) -> None:
    """Remove the X lock file and socket of a display whose server is gone."""
    lock = Path(f"/tmp/.X{display_num}-lock")
    try:
        pid = int(lock.read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None and pid_alive(pid):
        return
    lock.unlink(missing_ok=True)
    Path(f"/tmp/.X11-unix/X{display_num}").unlink(missing_ok=True)
