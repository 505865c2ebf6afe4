"""How the runtime starts a stdio capability server: as whom, and with what environment.

The runtime holds the HTTP token; everything a script can drive must be out of reach of it.
So, whichever server it is (built-in or from the config):

- **Its user.** A runtime running as root never starts a server as root: each runs as the
  desktop session's user (uid, gid and home from `session.json`, else the `desktop` account),
  through `setpriv` with `no_new_privs`, no capabilities and an empty bounding set. The desktop
  user cannot read a root process's memory, environment or files, so the token stays with the
  runtime. A runtime that is not root starts servers as itself (there is no one to drop to),
  unless `$CODEDESK_SPAWN_SOCKET` names the session supervisor's spawn service (the
  container): then the root supervisor starts each server as the desktop user, with the same
  confinement, on pipes this runtime made (`spawned_stdio_client`, `runtime/desktop/spawn.py`).
  Either way the runtime talks to it over those pipes with `pipe_client`.
- **Its environment** is built here, never inherited: the locale, PATH, the display, the
  session's data directory and the `CODEDESK_*` settings, minus every secret; then the
  config's `env` for that server. The runtime's own variables (its token among them) stay
  with the runtime, and so out of every program a server starts.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pwd
import shutil
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp.client.stdio import FORCE_KILL_TIMEOUT, PROCESS_TERMINATION_TIMEOUT, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from capabilities import wire
from capabilities.containment import Delegation, join_argv, server_group
from capabilities.session import SessionNotFound, data_dir, read_session

from .config import StdioServer

logger = logging.getLogger(__name__)

PASSED_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "DISPLAY", "XAUTHORITY",
              "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
"""Variables of the runtime's environment a server gets as they are (besides `CODEDESK_*`)."""

SECRET_ENV = frozenset({"CODEDESK_TOKEN"})
"""`CODEDESK_*` variables that are secrets: never passed to a server."""

SETPRIV = "/usr/bin/setpriv"

SPAWN_SOCKET_ENV = "CODEDESK_SPAWN_SOCKET"
"""The session supervisor's spawn service, for a runtime that is not root (the container)."""
SPAWN_WAIT_SECONDS = 60.0
"""How long a server start waits for the spawn service to appear (the session is starting)."""
SPAWN_EXIT_WAIT_SECONDS = 2.0
"""After closing a server's stdin, how long to wait for it to exit before it is stopped."""
_PIPE_BYTES = 1 << 20  # a server's stdout pipe (Linux lets a user have 1 MiB), and a read of a long answer
_READ_BYTES = 1 << 16


class LaunchError(RuntimeError):
    """A server cannot be started as it must be (no unprivileged user to run it as)."""


@dataclass(frozen=True)
class ServerAccount:
    """Who a server runs as: `switch` is true when the runtime is root and drops to it."""

    name: str
    uid: int
    gid: int
    home: Path
    switch: bool
    launcher: Path | None = None
    """The spawn service that starts servers as this account (a runtime that is not root)."""


def server_account() -> ServerAccount:
    """The account stdio servers run as (see the module docstring)."""
    launcher = os.environ.get(SPAWN_SOCKET_ENV) if os.geteuid() != 0 else None
    if os.geteuid() != 0 and not launcher:
        me = pwd.getpwuid(os.geteuid())
        return ServerAccount(me.pw_name, me.pw_uid, me.pw_gid, Path(os.environ.get("HOME") or me.pw_dir), False)
    try:
        info = read_session()
    except SessionNotFound:
        info = None
    if info is not None and info.uid != 0:
        if launcher:
            return ServerAccount(info.user, info.uid, info.gid, info.home, False, Path(launcher))
        return ServerAccount(info.user, info.uid, info.gid, info.home, True)
    name = os.environ.get("CODEDESK_DESKTOP_USER", "desktop")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise LaunchError(
            f"the runtime runs as root and starts capability servers as the desktop user {name!r}, "
            f"which does not exist; create it with `make install`"
        ) from None
    if entry.pw_uid == 0:
        raise LaunchError(f"the desktop user {name!r} is root; capability servers never run as root")
    if launcher:
        return ServerAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir), False,
                             Path(launcher))
    return ServerAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir), True)


def server_environment(account: ServerAccount, extra: dict[str, str]) -> dict[str, str]:
    """The whole environment of a server process: built, never inherited (module docstring)."""
    env = {key: os.environ[key] for key in PASSED_ENV if key in os.environ}
    env.update({key: value for key, value in os.environ.items()
                if key.startswith("CODEDESK_") and key not in SECRET_ENV})
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["CODEDESK_DATA"] = str(data_dir())  # the same session, whatever the server's HOME says
    env.update(HOME=str(account.home), USER=account.name, LOGNAME=account.name)
    env.update(extra)
    return env


def server_command(config: StdioServer, account: ServerAccount, name: str = "") -> tuple[str, list[str], str | None]:
    """`(command, args, cwd)` that start the server as `account` (a spawn service adds the drop
    itself: it is given the server's own command). A root runtime starts it inside the session's
    control groups (`servers/<name>`), from where exec may move the programs it starts into
    groups of their own (`capabilities.containment`)."""
    if not account.switch:
        return config.command, list(config.args), config.cwd
    setpriv = shutil.which("setpriv") or SETPRIV
    cwd = config.cwd or (str(account.home) if account.home.is_dir() else "/")
    argv = [
        setpriv, f"--reuid={account.uid}", f"--regid={account.gid}", "--init-groups",
        "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all",
        "--", config.command, *config.args,
    ]
    argv = [*_join_server_group(name), *argv]
    return argv[0], argv[1:], cwd


def _join_server_group(name: str) -> list[str]:
    try:
        delegation = Delegation.from_json(read_session().extra.get("containment"))
    except SessionNotFound:
        return []
    group = server_group(delegation, name or "server") if name.isidentifier() else None
    return join_argv(shutil.which("sh") or "/bin/sh", [str(group / "cgroup.procs")]) if group else []


@asynccontextmanager
async def spawned_stdio_client(
    launcher: Path, command: str, args: list[str], env: dict[str, str], cwd: str | None,
    errlog: TextIO = sys.stderr,
) -> AsyncIterator[tuple[Any, Any]]:
    """An MCP stdio transport to a server the spawn service at `launcher` starts as the desktop
    user: this runtime makes the pipes and hands the server's ends over (SCM_RIGHTS); the
    service's connection stays open while the server lives and stops it when closed.
    Yields `(read_stream, write_stream)` as `mcp.client.stdio.stdio_client` does."""
    conn = await _connect_launcher(launcher)
    try:
        (in_r, in_w), (out_r, out_w) = pipes = _server_pipes()
        with _handing_over(pipes):
            request = json.dumps({"argv": [command, *args], "env": env, "cwd": cwd}).encode() + b"\n"
            try:
                socket.send_fds(conn, [request], [in_r, out_w, errlog.fileno()])
                reply = await _read_reply(conn)
            except OSError as exc:
                raise LaunchError(f"the spawn service at {launcher} failed while starting {command}: {exc}") from exc
            if not reply.get("ok"):
                raise LaunchError(f"the spawn service at {launcher} refused to start {command}: "
                                  f"{reply.get('error') or reply}")

        async def stopped() -> None:
            with anyio.move_on_after(SPAWN_EXIT_WAIT_SECONDS):
                await _read_reply(conn)

        async with pipe_client(in_w, out_r, command, stopped) as streams:
            yield streams
    finally:
        conn.close()


@asynccontextmanager
async def child_stdio_client(
    command: str, args: list[str], env: dict[str, str], cwd: str | None, errlog: TextIO = sys.stderr,
) -> AsyncIterator[tuple[Any, Any]]:
    """An MCP stdio transport to a server this runtime starts as its own child, as the SDK's
    `stdio_client` does (the SDK's environment defaults under `env`, a session of its own, so
    its whole process group is stopped at the end), on `pipe_client`."""
    (in_r, in_w), (out_r, out_w) = pipes = _server_pipes()
    with _handing_over(pipes):
        process = await anyio.open_process([command, *args], stdin=in_r, stdout=out_w, stderr=errlog,
                                           env=get_default_environment() | env, cwd=cwd, start_new_session=True)

    async def stopped() -> None:
        with anyio.move_on_after(PROCESS_TERMINATION_TIMEOUT):
            await process.wait()
        if process.returncode is None:
            await terminate_posix_process_tree(process, FORCE_KILL_TIMEOUT)
        await process.aclose()

    async with pipe_client(in_w, out_r, command, stopped) as streams:
        yield streams


def _server_pipes() -> tuple[tuple[int, int], tuple[int, int]]:
    """The pipes of a server's stdin and stdout, close-on-exec; its stdout's as large as the
    system allows a user (a result of megabytes crosses in fewer reads)."""
    stdin = os.pipe2(os.O_CLOEXEC)
    stdout = os.pipe2(os.O_CLOEXEC)
    try:
        fcntl.fcntl(stdout[0], fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except (OSError, AttributeError):
        pass  # the default size
    return stdin, stdout


@contextmanager
def _handing_over(pipes: tuple[tuple[int, int], tuple[int, int]]) -> Iterator[None]:
    """While the server's ends of `pipes` are handed to it: they are closed here after (it has its
    copies), and ours too if that fails."""
    (in_r, in_w), (out_r, out_w) = pipes
    try:
        yield
    except BaseException:
        os.close(in_w)
        os.close(out_r)
        raise
    finally:
        os.close(in_r)
        os.close(out_w)


@asynccontextmanager
async def pipe_client(in_w: int, out_r: int, command: str,
                      stopped: Callable[[], Awaitable[None]]) -> AsyncIterator[tuple[Any, Any]]:
    """The MCP streams over a started server's stdin (`in_w`) and stdout (`out_r`), which it owns
    and closes. At the end it ends the server the MCP way: what was accepted is flushed, its
    stdin is closed, and `stopped()` waits for it to exit (or stops it)."""
    os.set_blocking(in_w, False)
    os.set_blocking(out_r, False)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def stdout_reader() -> None:
        lines = LineSplitter()
        size = _READ_BYTES
        async with read_writer:
            while True:
                await anyio.wait_readable(out_r)
                try:
                    chunk = os.read(out_r, size)
                except BlockingIOError:
                    continue
                if not chunk:
                    return
                # a read that filled its buffer: more is coming, read it in larger ones (a buffer
                # of a megabyte for each small answer would cost more than the answer)
                size = _PIPE_BYTES if len(chunk) == size else _READ_BYTES
                try:
                    complete = lines.feed(chunk)
                except LineTooLong as exc:  # no client reads that: the link ends, the server is stopped
                    logger.error("server %s wrote %s; its link is closed", command, exc)
                    return
                for line in complete:
                    try:
                        message: SessionMessage | Exception = SessionMessage(wire.parse_message(line))
                    except ValueError as exc:
                        logger.warning("server %s wrote a line that is not JSON-RPC: %r", command, line[:200])
                        message = exc
                    try:
                        await read_writer.send(message)
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return

    writer_scope = anyio.CancelScope()
    writer_done = anyio.Event()

    async def stdin_writer() -> None:
        try:
            with writer_scope:
                async with write_reader:
                    async for session_message in write_reader:
                        data = (session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                                + "\n").encode()
                        while data:  # written at once, but for what a full pipe holds back
                            try:
                                data = data[os.write(in_w, data):]
                            except BlockingIOError:
                                await anyio.wait_writable(in_w)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server is gone: end the session's read side instead of a request hanging.
            await read_writer.aclose()
        finally:
            writer_done.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stdout_reader)
            tg.start_soon(stdin_writer)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    write_stream.close()
                    with anyio.move_on_after(0.5):
                        await writer_done.wait()
                    writer_scope.cancel()
                    await writer_done.wait()
                    os.close(in_w)
                    in_w = -1
                    await stopped()
                tg.cancel_scope.cancel()
    finally:
        if in_w >= 0:
            os.close(in_w)
        os.close(out_r)
        for stream in (read_stream, write_stream, read_writer, write_reader):
            stream.close()


class LineTooLong(ValueError):
    pass


class LineSplitter:
    """Whole lines out of the chunks read from a pipe, in time linear in their length: a line of
    megabytes comes in hundreds of chunks, and joining each to what came before (as the SDK's
    client does) copies it again for every chunk. A line longer than `max_bytes` is refused
    (`LineTooLong`) rather than kept growing."""

    def __init__(self, max_bytes: int = wire.MAX_MESSAGE_BYTES) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._max_bytes = max_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        *complete, rest = chunk.split(b"\n")
        if complete:
            complete[0] = b"".join((*self._parts, complete[0]))
            self._parts.clear()
            self._size = 0
        if rest:
            self._parts.append(rest)
            self._size += len(rest)
            if self._size > self._max_bytes:
                raise LineTooLong(f"a line of more than {self._max_bytes} bytes")
        return complete


async def _connect_launcher(launcher: Path) -> socket.socket:
    deadline = time.monotonic() + SPAWN_WAIT_SECONDS
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            conn.connect(str(launcher))
            conn.setblocking(False)
            return conn
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            conn.close()
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"no spawn service at {launcher} ({exc.strerror}); the desktop session starts it: "
                    f"run `codedesk desktop up` as root with {SPAWN_SOCKET_ENV}={launcher} and "
                    f"CODEDESK_SPAWN_FOR=<this runtime's user>"
                ) from exc
        except OSError as exc:
            conn.close()
            raise LaunchError(f"cannot reach the spawn service at {launcher}: {exc}") from exc
        await anyio.sleep(0.1)


async def _read_reply(conn: socket.socket) -> dict[str, Any]:
    """One JSON line from the spawn service ({} when it closed the connection)."""
    data = b""
    while not data.endswith(b"\n"):
        await anyio.wait_readable(conn)
        try:
            chunk = conn.recv(4096)
        except BlockingIOError:
            continue
        if not chunk:
            return {}
        data += chunk
    return json.loads(data)
