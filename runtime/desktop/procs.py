"""Process and socket helpers of the session: readiness probes, stopping, X lock cleanup.

Every process the session starts carries `CODEDESK_SESSION=<id>` in its environment, and so do
the programs opened from the desktop, so `down` can find and stop all of them, and only them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

MARKER = "CODEDESK_SESSION"
log = logging.getLogger("codedesk.desktop")


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:  # the peer already went away
        pass


async def http_ok(host: str, port: int, path: str, timeout: float = 1.0) -> bool:
    """Whether `GET path` on host:port answers 200."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), timeout)
        return status.split()[1:2] == [b"200"]
    finally:
        await _close(writer)


async def rfb_ok(socket_path: Path, timeout: float = 1.0) -> bool:
    """Whether a VNC server on the unix socket `socket_path` greets with its RFB version."""
    reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(socket_path)), timeout)
    try:
        return (await asyncio.wait_for(reader.read(12), timeout)).startswith(b"RFB ")
    finally:
        await _close(writer)


def open_log(path: Path):
    """Open a part's log for appending, private to its owner, never through a link."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        path.unlink()  # a link planted where a log belongs: drop it, write a file of our own
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # websockify logs request lines, secret included
    return os.fdopen(fd, "ab")


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


def kill_marked(session_id: str, profile: Path | None = None, grace: float = 3.0) -> None:
    """Stop every process of the session (and any Chromium on its profile): SIGTERM, then
    SIGKILL after `grace` s."""
    pids = sorted(set(marked_pids(session_id)) | set(chromium_pids(profile) if profile else ()))
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


class CdpConnection:
    """A minimal blocking DevTools client over the browser's WebSocket (stdlib only).

    Enough for the session's own needs (closing Chromium cleanly) and its benchmark; the
    capabilities use Playwright.
    """

    def __init__(self, devtools_url: str, timeout: float = 5.0) -> None:
        import base64
        import json
        import socket
        import urllib.request
        from urllib.parse import urlparse

        with urllib.request.urlopen(devtools_url + "/json/version", timeout=timeout) as resp:
            ws_url = urlparse(json.load(resp)["webSocketDebuggerUrl"])
        self._sock = socket.create_connection((ws_url.hostname, ws_url.port), timeout=timeout)
        self._next_id = 0
        self._buf = b""
        key = base64.b64encode(os.urandom(16)).decode()
        self._sock.sendall((
            f"GET {ws_url.path} HTTP/1.1\r\nHost: {ws_url.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode())
        while b"\r\n\r\n" not in self._buf:
            self._buf += self._recv()
        head, self._buf = self._buf.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            self.close()
            raise ConnectionError(f"DevTools refused the WebSocket: {head[:80]!r}")

    def _recv(self) -> bytes:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise ConnectionError("DevTools closed the connection")
        return chunk

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._buf += self._recv()
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def send(self, method: str, params: dict | None = None, wait: bool = True) -> dict:
        """Send one command; return its `result` (raises RuntimeError on a DevTools error)."""
        import json

        self._next_id += 1
        msg_id = self._next_id
        payload = json.dumps({"id": msg_id, "method": method, "params": params or {}}).encode()
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        n = len(payload)
        if n < 126:
            header = bytes([0x81, 0x80 | n])
        elif n < 65536:
            header = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
        else:
            header = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
        self._sock.sendall(header + mask + masked)
        if not wait:
            return {}
        while True:
            b0, b1 = self._read(2)
            length = b1 & 0x7F
            if length == 126:
                length = int.from_bytes(self._read(2), "big")
            elif length == 127:
                length = int.from_bytes(self._read(8), "big")
            data = self._read(length)
            if b0 & 0x0F != 0x1:
                continue  # only text frames carry replies
            reply = json.loads(data)
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})

    def close(self) -> None:
        self._sock.close()


def cdp_browser_close(devtools_url: str, timeout: float = 3.0) -> bool:
    """Ask Chromium to close cleanly over DevTools (`Browser.close`), which flushes its profile
    (cookies, history) to disk; SIGTERM does not. Returns whether the request was delivered."""
    try:
        conn = CdpConnection(devtools_url, timeout)
    except (OSError, ValueError, KeyError):
        return False
    try:
        conn.send("Browser.close", wait=False)
        try:
            conn._sock.recv(4096)  # the reply, or the connection closing as the browser exits
        except OSError:
            pass
        return True
    except OSError:
        return False
    finally:
        conn.close()


def chromium_pids(profile: Path, main_only: bool = False) -> list[int]:
    """Pids of Chromium processes running on `profile` (just the browser ones if `main_only`).

    Found by the command line, not the session marker: Chromium rewrites its process title over
    the memory /proc/<pid>/environ points at, so its marker cannot be read back.
    """
    flag = f"--user-data-dir={profile}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if not cmdline.startswith(b"/usr/lib/chromium/") or (flag + b" ") not in cmdline + b" ":
            continue
        if main_only and b"--type=" in cmdline:
            continue
        found.append(int(entry))
    return found


def stop_chromium(profile: Path, devtools_url: str, grace: float = 10.0) -> None:
    """Close the session's Chromium cleanly (profile flushed), then make sure it is gone."""
    pids = chromium_pids(profile, main_only=True)
    if not pids:
        return
    delivered = cdp_browser_close(devtools_url)
    log.info("chromium %s: Browser.close %s", pids, "sent" if delivered else "not delivered")
    if delivered:
        deadline = time.monotonic() + grace
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
    for pid in pids:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
