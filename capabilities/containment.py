"""Control groups for the session's programs: one group per exec command, made in a sub-tree the
session delegates to its desktop user, so a command's processes cannot leave it, end together,
and share caps that bind that command alone.

Which hierarchies are used, where the kernel allows them:

- the unified (cgroup v2) hierarchy: membership and `cgroup.kill` (every process of a group
  killed at once, forks in flight included); its `pids` and `memory` controllers when the
  delegated group may enable them (a pure v2 host);
- the v1 `pids` and `memory` hierarchies (a host that still mounts them, such as this one in
  hybrid mode): the caps, and membership where v2 is not usable.

Layout, the same under each hierarchy used (`<own>` is the cgroup of whoever delegated it, so
the session stays inside any limit its host puts on it):

    <mount>/<own>/codedesk-<tag>/             the session's base; its dir (and in v2 its
                                               cgroup.procs) belong to the desktop user
        commands/                             root's caps for all commands together; its dir
                                               belongs to the desktop user, its files to root
            <command id>/                     made by the exec server: one command, its caps
        servers/<name>/  (v2 only)            where the root launcher starts capability servers:
                                               a server inside the base may move the processes
                                               it starts into commands/ (v2's common-ancestor rule)

`delegate()` (run as root by `codedesk desktop up`, or by a root exec server for itself) makes
the base and returns a `Delegation`, which session.json carries as `containment`. Where no
hierarchy can be written (a container whose cgroup file system is read-only), the delegation's
mode is `rlimit` and the exec server falls back to finding processes in /proc and to rlimits
(see `capabilities/exec/process_table.py`).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("codedesk.containment")

MOUNTS = Path("/proc/self/mounts")
CGROUP_ROOT = Path("/sys/fs/cgroup")
COMMANDS = "commands"
SERVERS = "servers"
# Tasks (processes and threads) one command may hold, and memory it may use (exec's caps,
# overridden in the environment of the session and of the exec server).
NPROC_ENV = "CODEDESK_EXEC_MAX_PROCESSES"
MEMORY_ENV = "CODEDESK_EXEC_MAX_MEMORY_BYTES"
DEFAULT_MAX_PROCESSES = 1024
DEFAULT_MAX_MEMORY_BYTES = 8 << 30
# Every command of a session together may hold at most this many times a command's tasks:
# one fork bomb at its own cap leaves room for the others.
SESSION_PROCESS_FACTOR = 2


def cap_from_env(name: str, default: int) -> int:
    """A cap set in the environment (a whole number of at least 1), else `default`."""
    raw = os.environ.get(name, "")
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a whole number of bytes or processes") from None
    if value < 1:
        raise ValueError(f"{name}={raw!r} must be at least 1")
    return value


@dataclass(frozen=True, kw_only=True)
class Delegation:
    """Where a session's control groups are: each a base directory, or None where unusable.

    `mode` is "cgroup" when at least one hierarchy holds, else "rlimit"; `why` says what was
    missing (for session.json and the logs).
    """

    unified: Path | None = None
    pids: Path | None = None
    memory: Path | None = None
    unified_controllers: frozenset[str] = frozenset()
    why: str = ""

    @property
    def mode(self) -> str:
        return "cgroup" if (self.unified or self.pids or self.memory) else "rlimit"

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "unified": str(self.unified) if self.unified else None,
            "pids": str(self.pids) if self.pids else None,
            "memory": str(self.memory) if self.memory else None,
            "unified_controllers": sorted(self.unified_controllers),
            "why": self.why,
        }

    @classmethod
    def from_json(cls, raw: dict | None) -> "Delegation":
        raw = raw or {}

        def path(key: str) -> Path | None:
            value = raw.get(key)
            return Path(value) if value else None

        return cls(unified=path("unified"), pids=path("pids"), memory=path("memory"),
                   unified_controllers=frozenset(raw.get("unified_controllers") or ()),
                   why=str(raw.get("why") or ""))

    def bases(self) -> list[Path]:
        return [base for base in (self.unified, self.pids, self.memory) if base is not None]


def session_tag(data_dir: Path) -> str:
    """A short name for the session's groups, the same for every process of the session."""
    return "codedesk-" + hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]


# -- finding the hierarchies -----------------------------------------------------------------


def _mounts() -> tuple[Path | None, dict[str, Path]]:
    """The cgroup2 mount, and the v1 mounts by controller."""
    unified: Path | None = None
    v1: dict[str, Path] = {}
    try:
        lines = MOUNTS.read_text().splitlines()
    except OSError:
        return None, {}
    for line in lines:
        parts = line.split()
        if len(parts) < 4:
            continue
        where, kind, options = Path(parts[1]), parts[2], parts[3].split(",")
        if kind == "cgroup2" and unified is None:
            unified = where
        elif kind == "cgroup":
            for option in options:
                if option in ("pids", "memory"):
                    v1[option] = where
    return unified, v1


def own_cgroups(pid: int | str = "self") -> dict[str, str]:
    """This process's cgroup path per hierarchy: "" for v2, else the controller name."""
    found: dict[str, str] = {}
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            found[""] = path
        for controller in controllers.split(","):
            if controller in ("pids", "memory"):
                found[controller] = path
    return found


# -- delegation (root) -----------------------------------------------------------------------


def delegate(tag: str, uid: int, gid: int) -> Delegation:
    """Make the session's base under each writable hierarchy, hand it to `uid`, and put root's
    caps on all its commands together. Idempotent. Never raises: what cannot be made is left
    out, and `why` says so."""
    max_processes = cap_from_env(NPROC_ENV, DEFAULT_MAX_PROCESSES)
    unified_mount, v1 = _mounts()
    own = own_cgroups()
    problems: list[str] = []
    unified = pids = memory = None
    controllers: frozenset[str] = frozenset()
    if unified_mount is not None and "" in own:
        try:
            unified, controllers = _delegate_unified(unified_mount / own[""].lstrip("/") / tag, uid, gid,
                                                     max_processes)
        except OSError as exc:
            problems.append(f"cgroup v2 at {unified_mount}: {exc.strerror or exc}")
    elif unified_mount is None:
        problems.append("no cgroup v2 hierarchy")
    for controller in ("pids", "memory"):
        if controller in controllers:
            continue  # v2 holds it
        mount = v1.get(controller)
        if mount is None:
            if controller not in controllers:
                problems.append(f"no {controller} controller")
            continue
        try:
            base = _delegate_v1(mount / own.get(controller, "/").lstrip("/") / tag, uid, gid)
            if controller == "pids":
                _write(base / COMMANDS / "pids.max", str(max_processes * SESSION_PROCESS_FACTOR))
                pids = base
            else:
                _write(base / "memory.use_hierarchy", "1", missing_ok=True)
                memory = base
        except OSError as exc:
            problems.append(f"cgroup v1 {controller} at {mount}: {exc.strerror or exc}")
    delegation = Delegation(unified=unified, pids=pids, memory=memory, unified_controllers=controllers,
                            why="; ".join(problems))
    if delegation.mode == "rlimit":
        log.warning("no control groups for commands (%s): processes are found in /proc, caps are rlimits",
                    delegation.why)
    return delegation


def _delegate_unified(base: Path, uid: int, gid: int, max_processes: int) -> tuple[Path, frozenset[str]]:
    base.mkdir(exist_ok=True)
    for child in (COMMANDS, SERVERS):
        (base / child).mkdir(exist_ok=True)
    available = set(_read(base / "cgroup.controllers").split())
    wanted = {"pids", "memory"} & available
    enabled: set[str] = set()
    for controller in sorted(wanted):
        # The base holds no process (servers/ does), so it may hand controllers down.
        try:
            _write(base / "cgroup.subtree_control", f"+{controller}")
            _write(base / COMMANDS / "cgroup.subtree_control", f"+{controller}")
            enabled.add(controller)
        except OSError as exc:
            log.info("cgroup v2 controller %s not delegated: %s", controller, exc.strerror or exc)
    if "pids" in enabled:
        _write(base / COMMANDS / "pids.max", str(max_processes * SESSION_PROCESS_FACTOR))
    # The base's procs file (the common ancestor of servers/ and commands/) and the commands/
    # directory go to the desktop user; commands/' own files (its caps) stay root's.
    for path in (base, base / "cgroup.procs", base / COMMANDS):
        os.chown(path, uid, gid)
    return base, frozenset(enabled)


def _delegate_v1(base: Path, uid: int, gid: int) -> Path:
    base.mkdir(exist_ok=True)
    (base / COMMANDS).mkdir(exist_ok=True)
    os.chown(base / COMMANDS, uid, gid)
    return base


def server_group(delegation: Delegation, name: str) -> Path | None:
    """The v2 group a capability server is started in (made here, by root), or None."""
    if delegation.unified is None:
        return None
    group = delegation.unified / SERVERS / name
    try:
        group.mkdir(exist_ok=True)
    except OSError as exc:
        log.info("no group for server %s: %s", name, exc.strerror or exc)
        return None
    return group


def release(delegation: Delegation) -> None:
    """End every process left in the session's groups and remove them (at `desktop down`)."""
    for base in delegation.bases():
        for group in sorted(_groups_under(base), key=lambda p: -len(p.parts)):
            kill_group(group)
            remove_group(group)


def remove_empty(delegation: Delegation) -> None:
    """Remove the session's groups that hold nothing (a root exec server's own, at its stop)."""
    for base in delegation.bases():
        for group in sorted(_groups_under(base), key=lambda p: -len(p.parts)):
            if not read_procs(group):
                try:
                    group.rmdir()
                except OSError:
                    pass  # still used: another server of the session, or a process leaving


def _groups_under(base: Path) -> list[Path]:
    if not base.is_dir():
        return []
    return [Path(root) for root, _, _ in os.walk(base)]


# -- one command's groups (the exec server) --------------------------------------------------


@dataclass(frozen=True)
class CommandGroups:
    """The groups of one command, one per hierarchy used (`unified` first when there is one)."""

    dirs: tuple[Path, ...]
    unified: Path | None

    def join_files(self) -> list[str]:
        """The `cgroup.procs` files the command's first process writes itself into."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def members(self) -> set[int]:
        pids: set[int] = set()
        for d in self.dirs:
            pids |= read_procs(d)
        return pids

    def out_of_memory(self) -> bool:
        """Whether the kernel killed a process of this command for going past its memory cap."""
        for d in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                for line in _read(d / name).splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                        return True
        return False

    def kill(self) -> None:
        for d in self.dirs:
            kill_group(d)

    def remove(self) -> bool:
        return all(remove_group(d) for d in self.dirs)


class CommandGroupMaker:
    """Makes and finds the per-command groups under a delegation, for the exec server."""

    def __init__(self, delegation: Delegation) -> None:
        self.delegation = delegation
        # v2 is usable only from inside the base (the common-ancestor rule), or as root.
        unified = delegation.unified
        if unified is not None and os.geteuid() != 0 and not _inside(unified):
            log.info("cgroup v2 base %s not used: this server runs outside it", unified)
            unified = None
        self.unified = unified
        self.hierarchies = [b for b in (unified, delegation.pids, delegation.memory) if b is not None]

    @property
    def usable(self) -> bool:
        return bool(self.hierarchies)

    def holds(self) -> set[str]:
        """The caps the groups enforce: "pids", "memory"."""
        held = set(self.delegation.unified_controllers) if self.unified is not None else set()
        held |= {name for name, base in (("pids", self.delegation.pids), ("memory", self.delegation.memory)) if base}
        return held

    def describe(self) -> str:
        if not self.usable:
            return "rlimit"
        names = []
        if self.unified is not None:
            names.append("cgroup v2" + (f" ({', '.join(sorted(self.delegation.unified_controllers))})"
                                        if self.delegation.unified_controllers else ""))
        names += [f"cgroup v1 {c}" for c, b in (("pids", self.delegation.pids), ("memory", self.delegation.memory)) if b]
        return " + ".join(names)

    def make(self, command_id: str, *, max_processes: int, max_memory_bytes: int) -> CommandGroups:
        """Make the command's groups with its caps. Raises OSError when one cannot be made."""
        dirs: list[Path] = []
        try:
            for base in self.hierarchies:
                group = base / COMMANDS / command_id
                group.mkdir()
                dirs.append(group)
                self._cap(base, group, max_processes, max_memory_bytes)
        except OSError:
            for group in dirs:
                remove_group(group)
            raise
        return CommandGroups(tuple(dirs), dirs[0] if self.unified is not None else None)

    def _cap(self, base: Path, group: Path, max_processes: int, max_memory_bytes: int) -> None:
        if base == self.unified:
            if "pids" in self.delegation.unified_controllers:
                _write(group / "pids.max", str(max_processes))
            if "memory" in self.delegation.unified_controllers:
                _write(group / "memory.max", str(max_memory_bytes))
                _write(group / "memory.swap.max", "0", missing_ok=True)
        elif base == self.delegation.pids:
            _write(group / "pids.max", str(max_processes))
        elif base == self.delegation.memory:
            _write(group / "memory.limit_in_bytes", str(max_memory_bytes))
            # Past the cap the kernel kills rather than swaps (where swap is accounted).
            _write(group / "memory.memsw.limit_in_bytes", str(max_memory_bytes), missing_ok=True)

    def find(self, command_id: str) -> CommandGroups | None:
        """The groups a command was given (by this or an earlier server), if they still exist."""
        dirs = tuple(base / COMMANDS / command_id for base in self.hierarchies
                     if (base / COMMANDS / command_id).is_dir())
        if not dirs:
            return None
        unified = dirs[0] if self.unified is not None and dirs[0].is_relative_to(self.unified) else None
        return CommandGroups(dirs, unified)

    def command_ids(self) -> set[str]:
        """Every command that has groups now."""
        ids: set[str] = set()
        for base in self.hierarchies:
            try:
                ids |= {entry.name for entry in os.scandir(base / COMMANDS) if entry.is_dir()}
            except OSError:
                continue
        return ids


def _inside(base: Path) -> bool:
    mount, _ = _mounts()
    path = own_cgroups().get("")
    if mount is None or path is None:
        return False
    return (mount / path.lstrip("/")).is_relative_to(base)


# Writes the shell's own pid into each file up to "--", turns core dumps off, execs the rest.
# The files come as arguments, never inside the script.
JOIN_SCRIPT = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 126; shift; done; shift; ulimit -c 0; exec "$@"'


def join_argv(sh: str, procs_files: list[str] | tuple[str, ...]) -> list[str]:
    """The argv prefix that starts a program in the groups whose `cgroup.procs` files are given
    (nothing when there are none): the program is in them before its first instruction."""
    return [sh, "-c", JOIN_SCRIPT, "sh", *procs_files, "--"] if procs_files else []


# -- plain operations on a group -------------------------------------------------------------


def read_procs(group: Path) -> set[int]:
    return {int(line) for line in _read(group / "cgroup.procs").split() if line.isdigit()}


def kill_group(group: Path) -> None:
    """End every process in the group: `cgroup.kill` where the kernel has it (atomic, forks in
    flight included), else SIGKILL rounds until the group is empty (the group's pids cap bounds
    how many a fork bomb can make meanwhile)."""
    if (group / "cgroup.kill").exists():
        try:
            _write(group / "cgroup.kill", "1")
            return
        except OSError:
            pass
    for _ in range(200):
        pids = read_procs(group)
        if not pids:
            return
        for pid in pids:
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        time.sleep(0.01)
    log.warning("processes left in %s after repeated SIGKILL", group)


def remove_group(group: Path) -> bool:
    """Remove an empty group; False while processes are still leaving it."""
    for _ in range(50):
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return False
            time.sleep(0.01)
    return False


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str, *, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except FileNotFoundError:
        if not missing_ok:
            raise
