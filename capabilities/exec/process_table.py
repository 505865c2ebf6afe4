"""Running programs for the exec server: starting them confined (see `confinement`), watching
them end, enforcing their timeouts and log caps, and killing them with everything they started.

Who writes the log, and what happens when the server dies. The program's stdout and stderr
are the log file itself (an O_APPEND descriptor inherited by the program), so output goes
straight to disk without passing through this process: memory stays flat however much a
program prints, and nothing is lost between the program and the disk if the server stops.
A command's status, though, can only be known by the server that started it (it alone can
wait for the exit code), so a command must not outlive its server unnoticed:
- the server ends its running commands when it stops (stdin closed, SIGTERM, SIGINT, SIGHUP)
  and records them as `failed:interrupted`;
- if the server is killed outright, the program's main process gets SIGKILL from the kernel
  (PR_SET_PDEATHSIG, set just before the program starts), and whatever it started is found
  and killed by the next exec server on this data directory, which also records the command
  as `failed:interrupted`.
The log stays readable either way.

The log cap. A log may grow to `Limits.log_max_bytes`; a patrol a few times a second cuts it
back to that size (the program runs on, what it prints beyond is dropped), records the cut in
the command's record, and reads never go past it, so the cut is exact even between patrols.

A command owns every process it starts. Where the session delegates control groups
(`capabilities.containment`), each command runs in groups of its own that its processes cannot
leave however they detach (`&`, setsid, a double fork, nohup); the groups carry its caps (tasks,
memory), say when the kernel killed it for memory (`failed:out_of_memory`), and end it at once
(`cgroup.kill`). Elsewhere (the fallback) the server follows the command as before: each program
runs in a new session, carries `CODEDESK_EXEC_ID=<id>` in its environment, the patrol notes its
descendants (pid and start time), and the server is the subreaper of its programs, so an orphan
becomes the server's child instead of init's; killing signals all of these, SIGTERM, a grace
period, then SIGSTOP+SIGKILL rounds until none is left.

What a command leaves running when its main process ends is ended `LEFTOVER_GRACE_SECONDS`
later, unless it was started with `detach: true`: then it runs until `kill`, the command's
timeout, or the server's stop, and stream_logs lists it (`still_running`). When the server stops
it ends every process it started, detached ones included; a server that starts after one that
was killed ends what that one left (found by its groups, else by the environment mark) and
records a command still running as `failed:interrupted`. Adopted orphans are collected
(waitid) every patrol, so their zombies do not hold process slots.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil
from anyio.abc import TaskGroup

from capabilities.containment import (CommandGroupMaker, CommandGroups, Delegation, delegate, remove_empty,
                                      session_tag)
from capabilities.session import SessionNotFound, data_dir, read_session

from .confinement import (DEFAULT_PATH, Caps, Limits, default_cwd, desktop_identity, plan_launch, resolve_program,
                          user_tasks)
from .errors import RequestRefused
from .log_store import RUNNING, CommandRecord, LogStore
from .requests import ExecRequest

MARKER_VAR = "CODEDESK_EXEC_ID"
# Time a program gets between SIGTERM and SIGKILL.
KILL_GRACE_SECONDS = 2.0
# Shorter when the server itself is stopping: its own caller gives it about two seconds.
SHUTDOWN_GRACE_SECONDS = 0.5
# What a command left running when its main process ended lives this long more (unless detached).
LEFTOVER_GRACE_SECONDS = 1.0
# stream_logs lists at most this many of the processes an ended command left running.
MAX_LISTED = 20
PRUNE_EVERY_SECONDS = 6 * 3600
# Ended commands whose leftovers `kill` can still find by what the patrol noted.
MAX_ENDED_KEPT = 256
# How often running commands' logs are measured, and how many of those rounds between two
# scans of /proc that note their descendants (a scan reads every process's stat: a few ms).
PATROL_SECONDS = 0.1
SCAN_EVERY_PATROLS = 5

INTERRUPTED = "failed:interrupted"
OUT_OF_MEMORY = "failed:out_of_memory"
logger = logging.getLogger(__name__)
_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


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


@dataclass(frozen=True)
class Proc:
    """One line of a /proc scan: enough to find a command's processes and tell a reused pid."""

    pid: int
    ppid: int
    sid: int
    start: int  # clock ticks since boot: with the pid, names one process for good
    state: bytes


def scan_one(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return Proc(pid, int(fields[1]), int(fields[4]), int(fields[19]), fields[0])


def scan() -> dict[int, Proc]:
    """Every process on the machine, zombies included, from /proc."""
    found: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (proc := scan_one(int(name))) is not None:
            found[proc.pid] = proc
    return found


def _now_ticks() -> int:
    """Now, in the unit of a scan's `start` (clock ticks since boot), rounded up."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK")) + 1


def _alive(proc: Proc) -> bool:
    """A zombie is not alive: it has already died."""
    return proc.state not in (b"Z", b"X")


def find_members(
    command_id: str, session_id: int | None, tracked: dict[int, int] | None = None,
    procs: dict[int, Proc] | None = None,
) -> set[int]:
    """The live processes of a command: those in its session, carrying its id in their
    environment, or seen before as its descendants (`tracked`: pid -> start), and every
    descendant of those."""
    procs = scan() if procs is None else procs
    marker = f"\0{MARKER_VAR}={command_id}\0".encode()
    me = os.getpid()
    found: set[int] = set()
    for pid, proc in procs.items():
        if pid == me:
            continue
        if session_id is not None and proc.sid == session_id:
            found.add(pid)
        elif tracked is not None and tracked.get(pid) == proc.start:
            found.add(pid)
        else:
            try:
                with open(f"/proc/{pid}/environ", "rb") as environ:
                    if marker in b"\0" + environ.read():
                        found.add(pid)
            except OSError:
                continue
    # Children of members are members, even after they left the session and dropped the marker.
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found and child != me:
                found.add(child)
                todo.append(child)
    return {pid for pid in found if _alive(procs[pid])}


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def reap_orphans(own: set[int]) -> None:
    """Collect the exit of orphans this server adopted as their subreaper (never of the programs
    it started, whose watchers collect them): an uncollected zombie still counts against the
    desktop user's process limit."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid in own:
            return  # nothing has ended, or the first to have ended is one of ours: its watcher's
        try:
            os.waitid(os.P_PID, info.si_pid, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            return


async def kill_tree(
    command_id: str, session_id: int | None, grace: float,
    tracked: dict[int, int] | None = None, own: set[int] | None = None,
) -> None:
    """Stop every process of a command: SIGTERM, up to `grace` seconds, then SIGKILL until none is left.

    Each SIGKILL round stops the processes first, so a fork bomb cannot refill the places of
    those already killed while the round goes on.
    """
    members = find_members(command_id, session_id, tracked)
    if not members:
        return
    _signal_all(members, signal.SIGTERM)
    # Stopped processes only act on SIGTERM once continued.
    _signal_all(members, signal.SIGCONT)
    with anyio.move_on_after(grace):
        while find_members(command_id, session_id, tracked):
            await anyio.sleep(0.05)
        return
    for _ in range(200):
        procs = scan()
        members = find_members(command_id, session_id, tracked, procs)
        if not members:
            return
        _signal_all(members, signal.SIGSTOP)
        _signal_all(members, signal.SIGKILL)
        reap_orphans(own or set())
        await anyio.sleep(0.02)
    logger.warning("%s: processes still alive after repeated SIGKILL", command_id)


@dataclass(eq=False, kw_only=True)
class Command:
    """A command this server started and is watching."""

    record: CommandRecord
    process: subprocess.Popen
    groups: CommandGroups | None = None  # its control groups, where the session has them
    detach: bool = False  # what it leaves running lives on after its main process ends
    deadline: float = 0.0  # time.monotonic() at which the command and all it started are killed
    ending: str | None = None  # the status to record when it exits because we stopped it
    done: anyio.Event = field(default_factory=anyio.Event)
    # Its descendants seen so far, pid -> start (clock ticks), however far they strayed.
    tracked: dict[int, int] = field(default_factory=dict)
    start_ticks: int = 0  # when it started, in the clock ticks of a scan's `start`
    end_ticks: int | None = None  # when its main process was seen to end


CONTAINMENT_ENV = "CODEDESK_EXEC_CONTAINMENT"
"""`rlimit` makes the server use the fallback even where control groups are delegated (to
measure it, or where a host's groups misbehave); anything else, or unset, uses them."""


def _containment() -> tuple[Delegation, bool]:
    """The session's delegated control groups (a root server without a session makes its own),
    and whether this server made them."""
    if os.environ.get(CONTAINMENT_ENV) == "rlimit":
        return Delegation(why=f"{CONTAINMENT_ENV}=rlimit"), False
    try:
        raw = read_session().extra.get("containment")
    except SessionNotFound:
        raw = None
    if raw is not None:
        return Delegation.from_json(raw), False
    if os.geteuid() == 0:
        return delegate(session_tag(data_dir()), 0, 0), True
    return Delegation(why="no desktop session delegated control groups to this server"), False


class ProcessTable:
    """The commands this server runs, and the status of any command in the store."""

    def __init__(self, store: LogStore, tasks: TaskGroup, limits: Limits | None = None) -> None:
        self.store = store
        self.limits = limits or Limits.from_env()
        self._tasks = tasks
        # Searches run in threads; a few at a time, so slow patterns cannot pile threads up.
        self.search_limiter = anyio.CapacityLimiter(4)
        self._running: dict[str, Command] = {}
        # Commands of ours that ended, with the descendants last seen: kill still reaches
        # what they left running (a fork bomb whose first shell returned, for instance).
        self._ended: dict[str, Command] = {}
        self._me = os.getpid()
        self._me_started = _started(self._me) or time.time()
        self._boot = _boot_id()
        delegation, self._made_groups = _containment()
        self.groups = CommandGroupMaker(delegation)
        logger.info("exec containment: %s", self.groups.describe())
        # Orphans of our programs become our children, not init's: they stay findable.
        _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    # -- lifecycle -------------------------------------------------------------------------

    async def recover(self) -> None:
        """At start: end what servers now gone left running, settle their running commands as
        interrupted, prune old logs."""
        for record in self.store.records():
            if record.status == RUNNING and not self._owner_alive(record):
                await self._interrupt(record)
        await self._end_orphaned()
        self.store.prune()
        self._tasks.start_soon(self._prune_periodically)
        self._tasks.start_soon(self._patrol)

    async def _end_orphaned(self, *, ours: bool = False) -> None:
        """End the processes of commands whose server is gone (detached ones, leftovers), and
        with `ours` those of this server's commands too; found by their control groups, else
        by the environment mark."""
        if self.groups.usable:
            ids = self.groups.command_ids()
        else:
            ids = {command_id for command_id, _ in _marked(scan())}
        for command_id in ids - set(self._running):
            try:
                record = self.store.load(command_id)
            except Exception:  # a group or mark without a record: nobody can own it
                record = None
            mine = record is not None and record.owner_pid == self._me and record.owner_started == self._me_started
            if record is not None and not (ours and mine) and (mine or self._owner_alive(record)):
                continue
            groups = self.groups.find(command_id) if self.groups.usable else None
            if groups is not None:
                await _end_groups(groups, 0.0)
            else:
                await kill_tree(command_id, None, SHUTDOWN_GRACE_SECONDS)
            if record is not None and record.status == RUNNING:
                self.store.settle(command_id, INTERRUPTED)

    async def stop_all(self) -> None:
        """At shutdown: end every process this server started (running, detached and left
        over), and record the running commands as interrupted."""
        commands = list(self._running.values())
        for command in commands:
            command.ending = INTERRUPTED
        async with anyio.create_task_group() as tg:
            for command in commands:
                tg.start_soon(self._kill_tree, command, SHUTDOWN_GRACE_SECONDS)
            for command in list(self._ended.values()):
                tg.start_soon(self._kill_tree, command, SHUTDOWN_GRACE_SECONDS, True)
        for command in commands:
            self._finish(command, INTERRUPTED)
        await self._end_orphaned(ours=True)  # ended commands no longer in the table
        if self._made_groups:
            remove_empty(self.groups.delegation)

    async def _prune_periodically(self) -> None:
        while True:
            await anyio.sleep(PRUNE_EVERY_SECONDS)
            await anyio.to_thread.run_sync(self.store.prune)

    async def _patrol(self) -> None:
        """Cut logs back to their cap, note every command's descendants, collect adopted orphans."""
        rounds = 0
        while True:
            await anyio.sleep(PATROL_SECONDS)
            reap_orphans({command.process.pid for command in self._running.values()})
            if not self._running:
                continue
            rounds += 1
            try:
                for command in list(self._running.values()):
                    self._enforce_log_cap(command.record)
                if rounds % SCAN_EVERY_PATROLS == 0:
                    self._note_descendants()
            except Exception:  # one bad pass must not end the patrol
                logger.exception("exec patrol failed")

    def _note_descendants(self, also: tuple[Command, ...] = ()) -> None:
        """Note the descendants of the running commands (and of `also`, ended ones), and count
        orphans adopted before any scan saw them to each command that ran when they started."""
        running = list(self._running.values())
        commands = running + [c for c in also if c not in running]
        procs = scan()
        children: dict[int, list[int]] = {}
        for proc in procs.values():
            children.setdefault(proc.ppid, []).append(proc.pid)
        for command in commands:
            # Drop the ones that died, then add every descendant of what is left.
            tracked = {pid: start for pid, start in command.tracked.items() if pid in procs and procs[pid].start == start}
            todo = list(tracked)
            if command.end_ticks is None and command.process.pid in procs:  # an ended one's pid may be anyone's now
                todo.append(command.process.pid)
            while todo:
                for child in children.get(todo.pop(), ()):
                    if child not in tracked and child != self._me:
                        tracked[child] = procs[child].start
                        todo.append(child)
            command.tracked = tracked
        known = {(pid, start) for c in (*running, *self._ended.values()) for pid, start in c.tracked.items()}
        own = {command.process.pid for command in running}
        for proc in procs.values():
            if proc.ppid != self._me or proc.pid in own or (proc.pid, proc.start) in known or not _alive(proc):
                continue
            for command in commands:
                end = command.end_ticks if command.end_ticks is not None else proc.start
                if command.start_ticks <= proc.start <= end:
                    command.tracked[proc.pid] = proc.start

    def _enforce_log_cap(self, record: CommandRecord) -> None:
        cap = record.log_cut_at if record.log_cut_at is not None else self.limits.log_max_bytes
        if self.store.cut(record.id, cap) and record.log_cut_at is None:
            record.log_cut_at = cap
            self.store.save(record)

    async def _kill_tree(self, command: Command, grace: float, ended: bool = False) -> None:
        """End every process of the command: by its control groups where it has them; else
        kill_tree with what this server knows of its descendants, and a second sweep for an
        orphan adopted while the first one killed its parent."""
        if command.groups is not None:
            await _end_groups(command.groups, grace)
            return
        main = command.process.pid
        # A pid in use as a session id is not given to a new process; so if an ended command's
        # pid names a process now, its old session is empty and the number is someone else's.
        session = main if not ended or scan_one(main) is None else None
        for _ in range(2):
            self._note_descendants(also=(command,) if ended else ())
            await kill_tree(
                command.record.id, session, grace, command.tracked,
                {c.process.pid for c in self._running.values()},
            )

    def left_running(self, command: Command) -> list[int]:
        """The live processes of an ended command (what it left running)."""
        if command.groups is not None:
            return sorted(command.groups.members())
        self._note_descendants(also=(command,))
        return sorted(find_members(command.record.id, None, command.tracked))

    # -- starting --------------------------------------------------------------------------

    def launch(self, request: ExecRequest) -> CommandRecord:
        """Start a program and return its record at once; a program that cannot start gets a
        `failed:<reason>` status (and a line in its log saying why), not an error."""
        who = desktop_identity()
        cwd = request.cwd or default_cwd(who)
        if not os.path.isdir(cwd):
            raise RequestRefused(f"exec refused: field 'cwd': {cwd} is not an existing directory")
        env = {**who.env, **request.env}
        executable = resolve_program(request.bin, cwd, env.get("PATH", DEFAULT_PATH))

        def make_record(command_id: str) -> CommandRecord:
            return CommandRecord(
                id=command_id, bin=request.bin, args=list(request.args), cwd=cwd,
                timeout=request.timeout, user=who.user, started_at=time.time(),
                owner_pid=self._me, owner_started=self._me_started, boot_id=self._boot,
            )

        record, log_fd = self.store.create(make_record)
        groups: CommandGroups | None = None
        try:
            if executable is None:
                return self._not_started(record, "not found", f"{request.bin!r} was not found (PATH={env.get('PATH', '')})")
            if os.path.isdir(executable) or not os.access(executable, os.X_OK):
                return self._not_started(record, "permission denied", f"{executable} is not an executable file")
            env[MARKER_VAR] = record.id
            groups, caps = self._hold(record.id, who.uid)
            plan = plan_launch(request.bin, list(request.args), cwd, env, who, caps)
            try:
                process = subprocess.Popen(
                    plan.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log_fd,
                    stderr=log_fd,
                    cwd="/",  # the program's own directory is entered after the drop of privileges
                    env=plan.env,
                    start_new_session=True,
                    **plan.options,
                )
            except OSError as exc:
                reason = "not found" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc)).lower()
                return self._not_started(record, reason, f"could not start {request.bin!r}: {exc}")
            except subprocess.SubprocessError as exc:  # the confinement itself failed in the child
                return self._not_started(record, "not confined", f"could not confine {request.bin!r}: {exc}")
        finally:
            os.close(log_fd)
            if groups is not None and record.status != RUNNING:
                groups.remove()
        record.pid = process.pid
        record.pid_started = _started(process.pid)
        self.store.save(record)
        start = scan_one(process.pid)
        command = Command(record=record, process=process, groups=groups, detach=request.detach,
                          deadline=time.monotonic() + request.timeout,
                          start_ticks=start.start if start else 0)
        self._running[record.id] = command
        self._tasks.start_soon(self._watch, command)
        return record

    def _hold(self, command_id: str, uid: int) -> tuple[CommandGroups | None, Caps]:
        """The command's control groups and the rlimits for the caps they do not hold."""
        limits = self.limits
        if self.groups.usable:
            try:
                groups = self.groups.make(command_id, max_processes=limits.max_processes,
                                          max_memory_bytes=limits.max_memory_bytes)
            except OSError as exc:
                logger.warning("no control groups for %s (%s): falling back to rlimits", command_id, exc)
            else:
                held = self.groups.holds()
                return groups, Caps(
                    join=tuple(groups.join_files()),
                    nproc=None if "pids" in held else user_tasks(uid) + limits.max_processes,
                    data=None if "memory" in held else limits.max_memory_bytes,
                )
        # RLIMIT_NPROC counts all the user's tasks: what it holds now plus this command's room.
        return None, Caps(nproc=user_tasks(uid) + limits.max_processes, data=limits.max_memory_bytes)

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
            with anyio.move_on_after(command.deadline - time.monotonic()) as deadline:
                await anyio.wait_readable(pidfd)
            if deadline.cancelled_caught:
                if command.ending is None:
                    command.ending = "timeout"
                await self._kill_tree(command, KILL_GRACE_SECONDS)
                await anyio.wait_readable(pidfd)
        finally:
            os.close(pidfd)
        # The pidfd is readable once the process exited; wait() only collects it now.
        code = process.wait()
        if command.ending is not None:
            status = command.ending
        elif code != 0 and command.groups is not None and command.groups.out_of_memory():
            status = OUT_OF_MEMORY
        elif code >= 0:
            status = f"completed:{code}"
        else:
            status = f"failed:killed by {_signal_name(-code)}"
        self._finish(command, status)
        await self._end_leftovers(command)

    async def _end_leftovers(self, command: Command) -> None:
        """What the command left running: ended after a grace period, or for a detached
        command at its deadline (kill and the server's stop end it sooner)."""
        if command.detach:
            with anyio.move_on_after(command.deadline - time.monotonic()):
                while self.left_running(command):
                    await anyio.sleep(SCAN_EVERY_PATROLS * PATROL_SECONDS)
                self._release(command)
                return
        else:
            await anyio.sleep(LEFTOVER_GRACE_SECONDS)
        if self.left_running(command):
            await self._kill_tree(command, KILL_GRACE_SECONDS, ended=True)
        self._release(command)

    def _release(self, command: Command) -> None:
        """Remove the command's groups once empty (kill of an ended command then finds nothing)."""
        if command.groups is not None and not command.groups.members():
            command.groups.remove()

    def _finish(self, command: Command, status: str) -> None:
        if command.done.is_set():
            return
        # What it left running stays reachable by kill: noted when kill asks (`_kill_tree`), from
        # what the patrol saw and the orphans adopted before this moment.
        command.end_ticks = _now_ticks()
        self._enforce_log_cap(command.record)
        cut = command.record.log_cut_at
        command.record = self.store.settle(command.record.id, status)
        if cut is not None and command.record.log_cut_at is None:
            command.record.log_cut_at = cut
            self.store.save(command.record)
        self._running.pop(command.record.id, None)
        self._ended[command.record.id] = command
        while len(self._ended) > MAX_ENDED_KEPT:
            self._ended.pop(next(iter(self._ended)))
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
            with anyio.CancelScope(shield=True):  # a cancelled call must not stop a kill halfway
                await self._kill_tree(command, KILL_GRACE_SECONDS)
            await command.done.wait()
            return command.record
        record, final = await self.status(command_id)
        if final:
            ended = self._ended.get(command_id)
            if ended is not None:  # what it left running goes; its status stays
                await self._kill_tree(ended, KILL_GRACE_SECONDS, ended=True)
                self._release(ended)
            elif (groups := self.groups.find(command_id)) is not None:  # left by an earlier server
                await _end_groups(groups, KILL_GRACE_SECONDS)
            return record
        # Run by another live exec server on this data directory: stop it, record the
        # cancellation first so that server keeps it when it sees the program exit.
        record = self.store.settle(command_id, "cancelled")
        await kill_tree(command_id, self._session_of(record), KILL_GRACE_SECONDS)
        return record

    def still_running(self, command_id: str) -> list[str]:
        """What an ended command of this server left running, as "pid name" (at most MAX_LISTED)."""
        command = self._ended.get(command_id)
        if command is None:
            return []
        listed = []
        for pid in self.left_running(command)[:MAX_LISTED]:
            try:
                listed.append(f"{pid} {psutil.Process(pid).name()}")
            except psutil.Error:
                continue
        return listed

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
            groups = self.groups.find(record.id) if self.groups.usable else None
            if groups is not None:
                await _end_groups(groups, SHUTDOWN_GRACE_SECONDS)
            else:
                await kill_tree(record.id, self._session_of(record), SHUTDOWN_GRACE_SECONDS)
        return self.store.settle(record.id, INTERRUPTED)


async def _end_groups(groups: CommandGroups, grace: float) -> None:
    """End a command held in control groups: SIGTERM, up to `grace` seconds for it to leave,
    then the groups' kill (nothing escapes it), and remove the groups."""
    members = groups.members()
    if members and grace > 0:
        _signal_all(members, signal.SIGTERM)
        _signal_all(members, signal.SIGCONT)
        with anyio.move_on_after(grace):
            while groups.members():
                await anyio.sleep(0.05)
    if groups.members():
        await anyio.to_thread.run_sync(groups.kill)
    await anyio.to_thread.run_sync(groups.remove)


def _marked(procs: dict[int, Proc]) -> set[tuple[str, int]]:
    """(command id, pid) of every process carrying an exec command's mark in its environment."""
    found: set[tuple[str, int]] = set()
    prefix = f"{MARKER_VAR}=".encode()
    me = os.getpid()
    for pid in procs:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                variables = environ.read().split(b"\0")
        except OSError:
            continue
        for variable in variables:
            if variable.startswith(prefix):
                found.add((variable[len(prefix):].decode(errors="replace"), pid))
    return found



