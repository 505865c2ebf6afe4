"""Running programs for the exec server: who they run as, starting them, watching them end,
enforcing their timeouts and killing them with everything they started.

Who writes the log, and what happens when the server dies. The program's stdout and stderr
are the log file itself (an O_APPEND descriptor inherited by the program), so output goes
straight to disk without passing through this process: memory stays flat however much a
program prints, and nothing is lost between the program and the disk if the server stops.
A command's status, though, can only be known by the server that started it (it alone can
wait for the exit code), so a command must not outlive its server unnoticed:
- the server ends its running commands when it stops (stdin closed, SIGTERM, SIGINT, SIGHUP)
  and records them as `failed:interrupted`;
- if the server is killed outright, the program's main process gets SIGKILL from the kernel
  (PR_SET_PDEATHSIG, set by setpriv just before it execs the program), and whatever it
  started is found and killed by the next exec server on this data directory, which also
  records the command as `failed:interrupted`.
The log stays readable either way.

Finding everything a command started. Each program runs in a new session (setsid), so its
process group catches ordinary children, and it carries `CODEDESK_EXEC_ID=<id>` in its
environment, which its descendants inherit even when they leave the session (setsid,
daemonising double forks). Killing a command signals every process in its session or carrying
its id: SIGTERM, a grace period, then SIGKILL until none is left, so a child that ignores
SIGTERM is still gone. (cgroups would be tighter, but are not reliably writable where this runs.)
"""

from __future__ import annotations

import ctypes
import logging
import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil
from anyio.abc import TaskGroup

from capabilities.session import SessionNotFound, read_session

from .errors import RequestRefused
from .log_store import RUNNING, CommandRecord, LogStore
from .requests import ExecRequest

MARKER_VAR = "CODEDESK_EXEC_ID"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Time a program gets between SIGTERM and SIGKILL.
KILL_GRACE_SECONDS = 2.0
# Shorter when the server itself is stopping: its own caller gives it about two seconds.
SHUTDOWN_GRACE_SECONDS = 0.5
PRUNE_EVERY_SECONDS = 6 * 3600

INTERRUPTED = "failed:interrupted"
logger = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True, kw_only=True)
class RunAs:
    """Who programs run as: the desktop user when we are root, else ourselves."""

    user: str
    uid: int
    gid: int
    home: Path
    env: dict[str, str]
    switch: bool  # whether to change uid/gid when starting a program


def desktop_identity() -> RunAs:
    """The user, home and environment a program gets, from the desktop session when there is one.

    With a session: its environment (DISPLAY, XAUTHORITY, ...), as its user when this server is
    root. Without one: this server's own user, environment and home.
    """
    try:
        info = read_session()
    except SessionNotFound:
        info = None
    me = os.getuid()
    if info is None:
        env = dict(os.environ)
        entry = pwd.getpwuid(me)
        return RunAs(user=entry.pw_name, uid=me, gid=os.getgid(), home=Path(entry.pw_dir), env=env, switch=False)
    if me == 0 and info.uid != 0:
        user, uid, gid, home, switch = info.user, info.uid, info.gid, info.home, True
    elif me == info.uid:
        user, uid, gid, home, switch = info.user, info.uid, info.gid, info.home, False
    else:
        entry = pwd.getpwuid(me)
        user, uid, gid, home, switch = entry.pw_name, me, os.getgid(), Path(entry.pw_dir), False
    try:
        shell = pwd.getpwuid(uid).pw_shell or "/bin/sh"
    except KeyError:
        shell = "/bin/sh"
    # The desktop's environment, not this server's (which may hold the runtime's secrets).
    env = {"PATH": DEFAULT_PATH, "LANG": os.environ.get("LANG", "C.UTF-8"), "SHELL": shell}
    env.update(info.env)
    env.update({"HOME": str(home), "USER": user, "LOGNAME": user})
    return RunAs(user=user, uid=uid, gid=gid, home=home, env=env, switch=switch)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _die_with_server() -> None:
    # Runs in the child after it took the desktop user's ids (which would reset the setting).
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is not: it has already died)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def find_members(command_id: str, session_id: int | None) -> set[int]:
    """The live processes of a command: in its session, or carrying its id in their environment."""
    marker = f"\0{MARKER_VAR}={command_id}\0".encode()
    me = os.getpid()
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        try:
            if session_id is not None and os.getsid(pid) == session_id:
                if _alive(pid):
                    found.add(pid)
                continue
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if marker in b"\0" + environ.read() and _alive(pid):
                    found.add(pid)
        except OSError:
            continue
    return found


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


async def kill_tree(command_id: str, session_id: int | None, grace: float) -> None:
    """Stop every process of a command: SIGTERM, up to `grace` seconds, then SIGKILL until none is left."""
    members = find_members(command_id, session_id)
    if not members:
        return
    _signal_all(members, signal.SIGTERM)
    # Stopped processes only act on SIGTERM once continued.
    _signal_all(members, signal.SIGCONT)
    with anyio.move_on_after(grace):
        while find_members(command_id, session_id):
            await anyio.sleep(0.05)
        return
    for _ in range(50):
        members = find_members(command_id, session_id)
        if not members:
            return
        _signal_all(members, signal.SIGKILL)
        await anyio.sleep(0.02)


@dataclass(eq=False, kw_only=True)
class Command:
    """A command this server started and is watching."""

    record: CommandRecord
    process: subprocess.Popen
    ending: str | None = None  # the status to record when it exits because we stopped it
    done: anyio.Event = field(default_factory=anyio.Event)


class ProcessTable:
    """The commands this server runs, and the status of any command in the store."""

    def __init__(self, store: LogStore, tasks: TaskGroup) -> None:
        self.store = store
        self._tasks = tasks
        self._running: dict[str, Command] = {}
        self._me = os.getpid()
        self._me_started = _started(self._me) or time.time()
        self._boot = _boot_id()

    # -- lifecycle -------------------------------------------------------------------------

    async def recover(self) -> None:
        """At start: settle commands whose server is gone as interrupted, prune old logs."""
        for record in self.store.records():
            if record.status == RUNNING and not self._owner_alive(record):
                await self._interrupt(record)
        self.store.prune()
        self._tasks.start_soon(self._prune_periodically)

    async def stop_all(self) -> None:
        """At shutdown: end every running command and record it as interrupted."""
        commands = list(self._running.values())
        for command in commands:
            command.ending = INTERRUPTED
        async with anyio.create_task_group() as tg:
            for command in commands:
                tg.start_soon(kill_tree, command.record.id, command.process.pid, SHUTDOWN_GRACE_SECONDS)
        for command in commands:
            self._finish(command, INTERRUPTED)

    async def _prune_periodically(self) -> None:
        while True:
            await anyio.sleep(PRUNE_EVERY_SECONDS)
            await anyio.to_thread.run_sync(self.store.prune)

    # -- starting --------------------------------------------------------------------------

    def launch(self, request: ExecRequest) -> CommandRecord:
        """Start a program and return its record at once; a program that cannot start gets a
        `failed:<reason>` status (and a line in its log saying why), not an error."""
        who = desktop_identity()
        cwd = request.cwd or str(who.home)
        if not os.path.isdir(cwd):
            raise RequestRefused(f"exec refused: field 'cwd': {cwd} is not an existing directory")
        env = {**who.env, **request.env}
        executable = _resolve(request.bin, cwd, env.get("PATH", DEFAULT_PATH))

        def make_record(command_id: str) -> CommandRecord:
            return CommandRecord(
                id=command_id, bin=request.bin, args=list(request.args), cwd=cwd,
                timeout=request.timeout, user=who.user, started_at=time.time(),
                owner_pid=self._me, owner_started=self._me_started, boot_id=self._boot,
            )

        record, log_fd = self.store.create(make_record)
        try:
            if executable is None:
                return self._not_started(record, "not found", f"{request.bin!r} was not found (PATH={env.get('PATH', '')})")
            if os.path.isdir(executable) or not os.access(executable, os.X_OK):
                return self._not_started(record, "permission denied", f"{executable} is not an executable file")
            env[MARKER_VAR] = record.id
            try:
                process = subprocess.Popen(
                    _argv(request, who),
                    stdin=subprocess.DEVNULL,
                    stdout=log_fd,
                    stderr=log_fd,
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                    **_spawn_options(who),
                )
            except OSError as exc:
                reason = "not found" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc)).lower()
                return self._not_started(record, reason, f"could not start {request.bin!r}: {exc}")
        finally:
            os.close(log_fd)
        record.pid = process.pid
        record.pid_started = _started(process.pid)
        self.store.save(record)
        command = Command(record=record, process=process)
        self._running[record.id] = command
        self._tasks.start_soon(self._watch, command)
        return record

    def _not_started(self, record: CommandRecord, reason: str, message: str) -> CommandRecord:
        self.store.note(record.id, message)
        record.status, record.ended_at = f"failed:{reason}", time.time()
        self.store.save(record)
        return record

    async def _watch(self, command: Command) -> None:
        """Wait for the program to exit or its timeout to pass, then record its status."""
        try:
            await self._follow(command)
        except Exception as exc:  # one command's trouble must not take the server down
            logger.exception("watching %s failed", command.record.id)
            self._finish(command, f"failed:{exc}")

    async def _follow(self, command: Command) -> None:
        process = command.process
        pidfd = os.pidfd_open(process.pid)
        try:
            with anyio.move_on_after(command.record.timeout) as deadline:
                await anyio.wait_readable(pidfd)
            if deadline.cancelled_caught:
                if command.ending is None:
                    command.ending = "timeout"
                await kill_tree(command.record.id, process.pid, KILL_GRACE_SECONDS)
                await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        # The pidfd is readable once the process exited; wait() only collects it now.
        code = process.wait()
        if command.ending is not None:
            status = command.ending
        elif code >= 0:
            status = f"completed:{code}"
        else:
            status = f"failed:killed by {_signal_name(-code)}"
        self._finish(command, status)

    def _finish(self, command: Command, status: str) -> None:
        if command.done.is_set():
            return
        command.record = self.store.settle(command.record.id, status)
        self._running.pop(command.record.id, None)
        command.done.set()

    # -- following -------------------------------------------------------------------------

    async def status(self, command_id: str) -> tuple[CommandRecord, bool]:
        """The command's record as it stands now, and whether it is final.

        A command another exec server was running is settled as interrupted if that server is gone.
        """
        command = self._running.get(command_id)
        if command is not None:
            return command.record, False
        record = self.store.load(command_id)
        if record.status == RUNNING and not self._owner_alive(record):
            record = await self._interrupt(record)
        return record, record.status != RUNNING

    async def kill(self, command_id: str) -> CommandRecord:
        """Cancel a running command (and everything it started); an ended one keeps its status."""
        command = self._running.get(command_id)
        if command is not None:
            if command.ending is None:
                command.ending = "cancelled"
            await kill_tree(command_id, command.process.pid, KILL_GRACE_SECONDS)
            await command.done.wait()
            return command.record
        record, final = await self.status(command_id)
        if final:
            return record
        # Run by another live exec server on this data directory: stop it, record the
        # cancellation first so that server keeps it when it sees the program exit.
        record = self.store.settle(command_id, "cancelled")
        await kill_tree(command_id, self._session_of(record), KILL_GRACE_SECONDS)
        return record

    # -- helpers ---------------------------------------------------------------------------

    def _owner_alive(self, record: CommandRecord) -> bool:
        if record.boot_id != self._boot:
            return False
        if record.owner_pid == self._me:
            # Ours, yet not in our table: a previous process that had our pid.
            return record.owner_started == self._me_started and record.id in self._running
        started = _started(record.owner_pid)
        return started is not None and abs(started - record.owner_started) < 0.5

    def _session_of(self, record: CommandRecord) -> int | None:
        """The program's session id, if its main process is still the one we started."""
        if record.pid is None or record.pid_started is None or record.boot_id != self._boot:
            return None
        started = _started(record.pid)
        return record.pid if started is not None and abs(started - record.pid_started) < 0.5 else None

    async def _interrupt(self, record: CommandRecord) -> CommandRecord:
        if record.boot_id == self._boot:
            await kill_tree(record.id, self._session_of(record), SHUTDOWN_GRACE_SECONDS)
        return self.store.settle(record.id, INTERRUPTED)


_SETPRIV = shutil.which("setpriv")


def _argv(request: ExecRequest, who: RunAs) -> list[str]:
    """The command line to start: the program itself, behind util-linux's setpriv when present.

    setpriv takes the desktop user's ids and sets the parent-death signal after that (a change
    of ids would reset it), then execs the program in the same process. It spares a Python
    `preexec_fn`, which forces a full fork of this process (~30 ms instead of ~2 ms).
    """
    if _SETPRIV is None:
        return [request.bin, *request.args]
    ids = [f"--reuid={who.uid}", f"--regid={who.gid}", "--init-groups"] if who.switch else []
    return [_SETPRIV, *ids, "--pdeathsig", "KILL", "--", request.bin, *request.args]


def _spawn_options(who: RunAs) -> dict:
    """Popen options doing in Python what setpriv does, when setpriv is missing."""
    if _SETPRIV is not None:
        return {}
    options: dict = {"preexec_fn": _die_with_server}
    if who.switch:
        options.update(user=who.uid, group=who.gid, extra_groups=os.getgrouplist(who.user, who.gid))
    return options


def _resolve(bin: str, cwd: str, path: str) -> str | None:
    """The file `bin` names: a path (relative to cwd) when it has a slash, else a PATH lookup."""
    if "/" in bin:
        candidate = os.path.join(cwd, bin)
        return candidate if os.path.exists(candidate) else None
    return shutil.which(bin, path=path)

