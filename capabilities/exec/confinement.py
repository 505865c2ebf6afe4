"""Who exec'd programs run as, with what environment and limits, and how they are started so.

The privilege drop happens in the new process before anything the caller chose can run in it.
The caller's `env` (which may hold LD_PRELOAD, LD_AUDIT, GCONV_PATH, ...) is applied only to the
final program, by the last step of a chain whose earlier steps get an empty environment:

    sh (as the server's user, empty env)        joins the command's control groups and turns core
                                                 dumps off (only where the command has groups)
      -> setpriv (as the server's user, empty env) takes the desktop user's uid/gid/groups (when the
                                                 server is root), empties the capability bounding
                                                 and inheritable sets, sets no_new_privs and the
                                                 parent-death signal
      -> prlimit (desktop user, empty env)       lowers the per-command rlimits (hard and soft),
                                                 for the caps no control group holds
        -> env -i -- NAME=VALUE... (desktop user) replaces the environment and execs the program
          -> the program, with the caller's env

Each step is a plain exec in the same process, so the chain costs well under a millisecond,
and the server's Popen keeps its vfork fast path (no Python code runs in the child). When one
of the three tools is missing, or `bin` holds a '=' (which `env` would read as a variable),
the same steps are done in Python in the child before the exec (`_confine_in_child`), which
costs a full fork (a few milliseconds more).

Programs never see the server's own environment: theirs is built from the desktop session
(session.json's `env`), else from the user's passwd entry, plus the caller's `env`.

A root server never runs programs as root: it runs them as the session's desktop user, else
the `desktop` user, else `nobody`.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import resource
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from capabilities.containment import (DEFAULT_MAX_MEMORY_BYTES, DEFAULT_MAX_PROCESSES, MEMORY_ENV, NPROC_ENV,
                                      cap_from_env, join_argv)
from capabilities.session import SessionNotFound, read_session

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DESKTOP_USER = "desktop"

# Per-command limits, set in the server's environment (the spec's exec takes no fields for them).
LOG_MAX_ENV = "CODEDESK_EXEC_LOG_MAX_BYTES"
# A log is cut at this size (the program runs on; what it prints after is dropped).
DEFAULT_LOG_MAX_BYTES = 256 << 20
# The caps on tasks (processes and threads) and memory are defined with the control groups
# that hold them (`capabilities.containment`): 1024 tasks leave room for a large build while a
# fork bomb stops there; 8 GiB of memory, past which the kernel kills the command. Without
# control groups they become rlimits: RLIMIT_NPROC, which counts every task of the desktop
# user, set to what the user holds when the command starts plus the cap, so a later command
# still has that much room; and RLIMIT_DATA per process (heap and private writable memory; not
# RLIMIT_AS, which counts the address space Chromium and V8 reserve without using it).

_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The limits every command gets; read once from the server's environment."""

    log_max_bytes: int
    max_processes: int
    max_memory_bytes: int

    @classmethod
    def from_env(cls) -> "Limits":
        return cls(
            log_max_bytes=cap_from_env(LOG_MAX_ENV, DEFAULT_LOG_MAX_BYTES),
            max_processes=cap_from_env(NPROC_ENV, DEFAULT_MAX_PROCESSES),
            max_memory_bytes=cap_from_env(MEMORY_ENV, DEFAULT_MAX_MEMORY_BYTES),
        )


@dataclass(frozen=True, kw_only=True)
class RunAs:
    """Who programs run as, and the environment they start from."""

    user: str
    uid: int
    gid: int
    home: Path
    env: dict[str, str]
    switch: bool  # whether to change uid/gid when starting a program (the server is root)


def _unprivileged_account() -> pwd.struct_passwd:
    for name in (DESKTOP_USER, "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError(
        "the exec server runs as root, and there is neither a desktop session nor a 'desktop' or "
        "'nobody' user to run programs as; start the session (`codedesk desktop up`) or run the server "
        "as an unprivileged user"
    )


def desktop_identity() -> RunAs:
    """The user, home and environment a program gets.

    With a session: its user when this server is root (never root itself), and its environment
    (DISPLAY, XAUTHORITY, ...). Without one: this server's user, or when it is root the `desktop`
    user (else `nobody`), with an environment built from that user's passwd entry. Never the
    server's own environment, which may hold the runtime's secrets.
    """
    try:
        info = read_session()
    except SessionNotFound:
        info = None
    me = os.getuid()
    if me == 0:
        if info is not None and info.uid != 0:
            user, uid, gid, home = info.user, info.uid, info.gid, info.home
        else:
            entry = _unprivileged_account()
            user, uid, gid, home = entry.pw_name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir)
        switch = True
    elif info is not None and me == info.uid:
        user, uid, gid, home, switch = info.user, info.uid, info.gid, info.home, False
    else:
        entry = pwd.getpwuid(me)
        user, uid, gid, home, switch = entry.pw_name, me, os.getgid(), Path(entry.pw_dir), False
    try:
        shell = pwd.getpwuid(uid).pw_shell or "/bin/sh"
    except KeyError:
        shell = "/bin/sh"
    env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "SHELL": shell}
    if info is not None and uid == info.uid:
        env.update(info.env)
    env.update({"HOME": str(home), "USER": user, "LOGNAME": user})
    return RunAs(user=user, uid=uid, gid=gid, home=home, env=env, switch=switch)


def default_cwd(who: RunAs) -> str:
    """The home directory, or / for an account whose home does not exist (nobody's)."""
    return str(who.home) if who.home.is_dir() else "/"


def resolve_program(bin: str, cwd: str, path: str) -> str | None:
    """The file `bin` names: a path (relative to cwd) when it has a slash, else a PATH lookup."""
    if "/" in bin:
        candidate = os.path.join(cwd, bin)
        return candidate if os.path.exists(candidate) else None
    return shutil.which(bin, path=path)


_SH = shutil.which("sh", path=DEFAULT_PATH)
_SETPRIV = shutil.which("setpriv", path=DEFAULT_PATH)
_PRLIMIT = shutil.which("prlimit", path=DEFAULT_PATH)
_ENV = shutil.which("env", path=DEFAULT_PATH)


@dataclass(frozen=True, kw_only=True)
class Launch:
    """What to hand to subprocess.Popen: the argv, the environment and any extra options."""

    argv: list[str]
    env: dict[str, str]
    options: dict


@dataclass(frozen=True, kw_only=True)
class Caps:
    """How one command is held: the control groups it joins, and the rlimits no group replaces
    (None: not set)."""

    join: tuple[str, ...] = ()  # cgroup.procs files
    nproc: int | None = None
    data: int | None = None


def plan_launch(
    bin: str, args: list[str], cwd: str, env: dict[str, str], who: RunAs, caps: Caps
) -> Launch:
    """How to start `bin args` in `cwd`, confined (see the module docstring); `env` is the
    program's whole environment. The directory is entered after the drop of privileges, so a
    program cannot start inside a directory its user could not reach."""
    if _SETPRIV and _PRLIMIT and _ENV and _SH and "=" not in bin:
        return Launch(argv=_chain(bin, args, cwd, env, who, caps), env={}, options={})
    return Launch(
        argv=[bin, *args], env=env, options={"preexec_fn": _confiner(who, caps, _supplementary(who), cwd)}
    )


def _supplementary(who: RunAs) -> list[int]:
    try:
        return os.getgrouplist(who.user, who.gid)
    except OSError:
        return [who.gid]


def _chain(bin: str, args: list[str], cwd: str, env: dict[str, str], who: RunAs, caps: Caps) -> list[str]:
    join = join_argv(_SH, caps.join)
    setpriv = [_SETPRIV]
    if who.switch:
        groups = ",".join(str(g) for g in _supplementary(who))
        setpriv += [
            f"--reuid={who.uid}", f"--regid={who.gid}", f"--groups={groups}",
            "--bounding-set=-all", "--inh-caps=-all",
        ]
    setpriv += ["--nnp", "--pdeathsig=KILL", "--"]
    prlimit: list[str] = []
    if caps.nproc is not None or caps.data is not None or not caps.join:
        prlimit = [_PRLIMIT, "--core=0:0"]
        if caps.nproc is not None:
            nproc = _within_hard(resource.RLIMIT_NPROC, caps.nproc)
            prlimit.append(f"--nproc={nproc}:{nproc}")
        if caps.data is not None:
            data = _within_hard(resource.RLIMIT_DATA, caps.data)
            prlimit.append(f"--data={data}:{data}")
        prlimit.append("--")
    variables = [f"{name}={value}" for name, value in env.items()]
    return [*join, *setpriv, *prlimit, _ENV, "-i", f"--chdir={cwd}", "--", *variables, bin, *args]


def _confiner(who: RunAs, caps: Caps, groups: list[int], cwd: str):
    """The chain's steps as a preexec_fn (computed here, so the child only makes system calls)."""
    last_cap = _last_cap()
    nproc = _within_hard(resource.RLIMIT_NPROC, caps.nproc) if caps.nproc is not None else None
    data = _within_hard(resource.RLIMIT_DATA, caps.data) if caps.data is not None else None
    join = [os.fsencode(path) for path in caps.join]

    def confine() -> None:
        for path in join:  # before the change of ids: the groups are the server's
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        if who.switch:
            for cap in range(last_cap + 1):
                _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
            os.setgroups(groups)
            os.setresgid(who.gid, who.gid, who.gid)
            os.setresuid(who.uid, who.uid, who.uid)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot set no_new_privs")
        # After the change of ids, which would reset it.
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if data is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (data, data))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.chdir(cwd)

    return confine


_tasks_seen: dict[int, tuple[float, int]] = {}
TASKS_FRESH_SECONDS = 1.0


def user_tasks(uid: int) -> int:
    """How many tasks (processes and threads) `uid` holds: what RLIMIT_NPROC counts. Counted at
    most once a second (a scan of /proc costs milliseconds; a second-old count is close enough
    for the room a command gets above it)."""
    seen = _tasks_seen.get(uid)
    now = time.monotonic()
    if seen is not None and now - seen[0] < TASKS_FRESH_SECONDS:
        return seen[1]
    count = _count_tasks(uid)
    _tasks_seen[uid] = (now, count)
    return count


def _count_tasks(uid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as status:
                text = status.read()
        except OSError:
            continue
        uid_line = text[text.find(b"\nUid:") + 5:].split(None, 1)
        if not uid_line or int(uid_line[0]) != uid:
            continue
        threads = text[text.find(b"\nThreads:") + 9:].split(None, 1)
        count += int(threads[0]) if threads and threads[0].isdigit() else 1
    return count


def _within_hard(kind: int, value: int) -> int:
    """`value`, or the server's own hard limit when that is lower (an unprivileged process cannot raise it)."""
    hard = resource.getrlimit(kind)[1]
    return value if hard == resource.RLIM_INFINITY or hard >= value else hard


def _last_cap() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 63
