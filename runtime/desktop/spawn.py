"""The spawn service: the root supervisor starts stdio servers as the desktop user for a runtime
that is not root (the container's runtime runs as its own user and cannot switch users).

The protocol, on a unix socket only the runtime's user can reach (the socket is that user's,
mode 0600, and every connection's peer uid is checked with SO_PEERCRED):

1. The runtime makes the server's pipes itself and sends one JSON line
   `{"argv": [...], "env": {...}, "cwd": "..." | null}` with three descriptors attached
   (SCM_RIGHTS): the server's stdin (a pipe's read end), its stdout (a pipe's write end) and
   its stderr.
2. The service checks the request (sizes, NULs, names, an absolute existing `cwd`, stdin and
   stdout are pipes), starts the program as the desktop user through `setpriv` with
   `no_new_privs`, no capabilities and an empty bounding set (as `runtime/launch.py` does for a
   root runtime), and answers `{"ok": true, "pid": N}` or `{"ok": false, "error": "..."}`.
   Loader variables of the request (`LD_*`, `GCONV_PATH`, ...) are applied after the drop, by
   `env` running as the desktop user, never to the root side of the start.
3. The connection stays open while the server lives: when the server exits the service sends
   `{"exit": CODE}` and closes; when the runtime closes the connection the service stops the
   server (SIGTERM, then SIGKILL after a grace period) and reaps it.

The service only starts, watches and reaps; it reads no file and writes none for a request.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import threading
from pathlib import Path

from .layout import DesktopUser

log = logging.getLogger("codedesk.desktop.spawn")

SOCKET_ENV = "CODEDESK_SPAWN_SOCKET"
"""Where the service listens (set for both the supervisor and the runtime)."""
FOR_ENV = "CODEDESK_SPAWN_FOR"
"""The only user allowed to connect (the runtime's account)."""

MAX_REQUEST = 256 * 1024
MAX_ARGS = 256
MAX_ENV = 512
STOP_GRACE = 3.0
SECRET_ENV = frozenset({"CODEDESK_TOKEN"})
# Variables the dynamic loader or libc act on at start: never in the environment of the
# root-started setpriv, only applied by `env` after the drop.
LOADER_ENV = re.compile(r"^(LD_.*|GCONV_PATH|GETCONF_DIR|GLIBC_TUNABLES|HOSTALIASES|LOCALDOMAIN|"
                        r"LOCPATH|MALLOC_.*|NIS_PATH|NLSPATH|RESOLV_HOST_CONF|RES_OPTIONS|TMPDIR|TZDIR)$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
ENV_BIN = shutil.which("env") or "/usr/bin/env"


class SpawnRefused(ValueError):
    """A request the service will not carry out; the message says why."""


def _strings(value: object, what: str, limit: int) -> list[str]:
    if not isinstance(value, list) or not value or len(value) > limit:
        raise SpawnRefused(f"{what} must be a list of 1 to {limit} strings")
    for item in value:
        if not isinstance(item, str) or "\0" in item:
            raise SpawnRefused(f"{what} holds a non-string or a NUL byte")
    return value


def check_request(req: object, home: Path) -> tuple[list[str], dict[str, str], str]:
    """`(argv, env, cwd)` of a valid request (raises SpawnRefused)."""
    if not isinstance(req, dict) or set(req) - {"argv", "env", "cwd"}:
        raise SpawnRefused("the request is an object with argv, env and cwd only")
    argv = _strings(req.get("argv"), "argv", MAX_ARGS)
    if not Path(argv[0]).is_absolute() and shutil.which(argv[0]) is None:
        raise SpawnRefused(f"program {argv[0]!r} is not on the PATH; give its absolute path")
    env = req.get("env") or {}
    if not isinstance(env, dict) or len(env) > MAX_ENV:
        raise SpawnRefused(f"env must be an object of at most {MAX_ENV} variables")
    for key, value in env.items():
        if not ENV_NAME.match(key) or not isinstance(value, str) or "\0" in value:
            raise SpawnRefused(f"env variable {key!r} has a bad name or value")
        if key in SECRET_ENV:
            raise SpawnRefused(f"env variable {key} is a secret of the runtime; servers never get it")
    cwd = req.get("cwd") or str(home)
    if not isinstance(cwd, str) or not Path(cwd).is_absolute() or not Path(cwd).is_dir():
        raise SpawnRefused(f"cwd {cwd!r} must be an absolute path to an existing folder")
    return argv, env, cwd


def drop_command(user: DesktopUser, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start `argv` as `user` with no privileges."""
    safe = {k: v for k, v in env.items() if not LOADER_ENV.match(k)}
    loader = [f"{k}={v}" for k, v in env.items() if LOADER_ENV.match(k)]
    cmd = [SETPRIV, f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups",
           "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    if loader:
        cmd += [ENV_BIN, *loader]
    return cmd + argv, safe


def client_uid() -> int | None:
    """The runtime's account when it is not the supervisor's (`$CODEDESK_SPAWN_FOR`, the
    container's runtime user), else None; RuntimeError when it names no user."""
    client = os.environ.get(FOR_ENV)
    if not client:
        return None
    try:
        return pwd.getpwnam(client).pw_uid
    except KeyError:
        raise RuntimeError(f"{FOR_ENV} names {client!r}, which is not a user") from None


def peer(conn: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end of a unix socket (SO_PEERCRED)."""
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
    return pid, uid


def socket_folder(path: Path) -> None:
    """Make sure the folder of the socket `path` is ours and nobody else can write it (made if
    missing; a shared volume mounted there, such as Kubernetes' 0777 emptyDir, made 0755)."""
    folder = path.parent
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = os.lstat(folder)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o022:
        os.chmod(folder, 0o755)
        st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise RuntimeError(f"{folder} must be a folder of ours that nobody else can write")


class SpawnService:
    """Listens on `path` for the runtime's user `client_uid` and starts servers as `user`."""

    def __init__(self, path: Path, client_uid: int, user: DesktopUser, home: Path) -> None:
        self.path = path
        self.client_uid = client_uid
        self.user = user
        self.home = home
        self._sock: socket.socket | None = None
        self._closing = False
        self._children: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, user: DesktopUser, home: Path) -> "SpawnService | None":
        """The service the environment asks for (`$CODEDESK_SPAWN_SOCKET`, `$CODEDESK_SPAWN_FOR`),
        or None when it asks for none."""
        path = os.environ.get(SOCKET_ENV)
        client = client_uid() if path else None
        if client is None:
            return None
        return cls(Path(path), client, user, home)

    def start(self) -> None:
        socket_folder(self.path)
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        if os.geteuid() == 0:
            os.chown(self.path, self.client_uid, -1)
        os.chmod(self.path, 0o600)
        sock.listen(16)
        self._sock = sock
        threading.Thread(target=self._accept, name="spawn-accept", daemon=True).start()
        log.info("spawn service on %s for uid %d", self.path, self.client_uid)

    def close(self) -> None:
        """Stop accepting and stop every server still running."""
        self._closing = True
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        self.path.unlink(missing_ok=True)
        with self._lock:
            children = list(self._children)
        for child in children:
            _stop(child)

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._closing:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="spawn-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        fds: list[int] = []
        child: subprocess.Popen | None = None
        try:
            pid, uid = peer(conn)
            if uid != self.client_uid:
                log.warning("spawn: refused a connection from uid %d (pid %d)", uid, pid)
                _answer(conn, {"ok": False, "error": "this socket serves only the runtime's user"})
                return
            try:
                data, fds = _receive(conn)
                argv, env, cwd = check_request(json.loads(data), self.home)
                if len(fds) != 3:
                    raise SpawnRefused("attach exactly three descriptors: stdin, stdout, stderr")
                for fd, name in ((fds[0], "stdin"), (fds[1], "stdout")):
                    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                        raise SpawnRefused(f"the server's {name} must be a pipe")
                if stat.S_ISDIR(os.fstat(fds[2]).st_mode):
                    raise SpawnRefused("the server's stderr must not be a folder")
            except (SpawnRefused, ValueError) as exc:
                _answer(conn, {"ok": False, "error": str(exc)})
                return
            cmd, clean_env = drop_command(self.user, argv, env)
            try:
                child = subprocess.Popen(cmd, stdin=fds[0], stdout=fds[1], stderr=fds[2], env=clean_env,
                                         cwd=cwd, start_new_session=True, close_fds=True)
            except OSError as exc:
                _answer(conn, {"ok": False, "error": f"cannot start {argv[0]}: {exc}"})
                return
            with self._lock:
                self._children.add(child)
            for fd in fds:
                os.close(fd)
            fds = []
            log.info("spawn: started %s as %s, pid %d", argv[0], self.user.name, child.pid)
            _answer(conn, {"ok": True, "pid": child.pid})
            self._watch(conn, child)
        except OSError as exc:
            log.warning("spawn: connection failed: %s", exc)
        finally:
            for fd in fds:
                os.close(fd)
            if child is not None:
                _stop(child)
                with self._lock:
                    self._children.discard(child)
            conn.close()

    def _watch(self, conn: socket.socket, child: subprocess.Popen) -> None:
        """Until the server exits (tell the runtime) or the runtime hangs up (stop the server)."""
        pidfd = os.pidfd_open(child.pid)
        try:
            while True:
                ready, _, _ = select.select([conn, pidfd], [], [])
                if pidfd in ready:
                    code = child.wait()
                    _answer(conn, {"exit": code})
                    return
                if not conn.recv(4096):
                    return  # hung up: the finally of _serve stops the server
        finally:
            os.close(pidfd)


def _receive(conn: socket.socket) -> tuple[bytes, list[int]]:
    """One request line and the descriptors sent with it."""
    data = b""
    fds: list[int] = []
    conn.settimeout(10.0)
    try:
        while not data.endswith(b"\n"):
            chunk, got, _flags, _addr = socket.recv_fds(conn, 65536, 4)
            fds += got
            if not chunk:
                raise SpawnRefused("the connection closed before a whole request")
            data += chunk
            if len(data) > MAX_REQUEST:
                raise SpawnRefused(f"the request is larger than {MAX_REQUEST} bytes")
    except (SpawnRefused, OSError) as exc:
        for fd in fds:
            os.close(fd)
        raise SpawnRefused(f"cannot read the request: {exc}") if isinstance(exc, OSError) else exc
    finally:
        conn.settimeout(None)
    return data, fds


def _answer(conn: socket.socket, msg: dict) -> None:
    try:
        conn.sendall((json.dumps(msg) + "\n").encode())
    except OSError:
        pass


def _stop(child: subprocess.Popen) -> None:
    if child.poll() is not None:
        return
    try:
        os.killpg(child.pid, signal.SIGTERM)
    except OSError:
        child.terminate()
    try:
        child.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            child.kill()
        child.wait()
