"""`codedesk desktop up|down|status`: start, stop and inspect the desktop session.

`up` spawns the session supervisor detached, waits until every part answers, prints the
viewer URL (secret included) and returns; a second `up` on the same data dir reports the
running session instead of starting another. `down` stops it and leaves no X lock behind.
`status` prints JSON: each part, its pid, the ports and the screen size.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from capabilities.egress import EgressConfigError, EgressPolicy
from capabilities.session import SESSION_FILE, SessionNotFound, data_dir, read_session, remove_session

from . import procs
from .layout import DesktopError, DesktopUser, SessionLayout, install_hint, make_private_dir, missing_packages

UP_TIMEOUT = 120.0  # past Chromium's own start bound (supervisor.CHROMIUM_READY_TIMEOUT)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="codedesk desktop", description="The desktop session.")
    # "_supervise" is internal (the detached supervisor), so the metavar lists only the public ones.
    sub = p.add_subparsers(dest="command", required=True, metavar="{up,down,status}")

    def data_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--data", type=Path, default=None,
                        help="the session's data directory (default: $CODEDESK_DATA, else /data in a "
                             "container or as root, else ~/.local/share/codedesk)")

    up = sub.add_parser("up", help="start the session (or report the running one)")
    data_arg(up)
    in_container = Path("/.dockerenv").exists()
    up.add_argument("--viewer-host", default="0.0.0.0" if in_container else "127.0.0.1",
                    help="address the noVNC viewer listens on (it requires the session's secret)")
    up.add_argument("--viewer-port", type=int, default=0, help="viewer port (default: a free one)")
    up.add_argument("--view-only", action="store_true",
                    help="viewers watch but cannot use the mouse and keyboard")
    up.add_argument("--json", action="store_true", help="print the session's facts as JSON")
    up.add_argument("--video", action="store_true",
                    help="record the screen from the start, in <data>/video (same as CODEDESK_VIDEO=on; "
                         "retention: CODEDESK_VIDEO_KEEP_MB, default 2048, and CODEDESK_VIDEO_KEEP_HOURS, 24)")
    egress_args(up)

    down = sub.add_parser("down", help="stop the session")
    data_arg(down)
    status = sub.add_parser("status", help="print the session's parts as JSON")
    data_arg(status)

    sv = sub.add_parser("_supervise")
    data_arg(sv)
    sv.add_argument("--viewer-host", default="127.0.0.1")
    sv.add_argument("--viewer-port", type=int, default=0)
    sv.add_argument("--view-only", action="store_true")
    sv.add_argument("--ready-fd", type=int, default=None)
    egress_args(sv)
    return p


def egress_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--egress-deny", action="append", default=[], metavar="CIDR",
                        help="refuse pages and programs this range too (repeatable); link-local and "
                             "cloud metadata ranges are always refused unless allowed")
    parser.add_argument("--egress-allow", action="append", default=[], metavar="CIDR",
                        help="lift the default refusal for this range (repeatable), e.g. a metadata "
                             "service the session must reach")


def _egress(args) -> EgressPolicy:
    try:
        return EgressPolicy.parse(deny=args.egress_deny, allow=args.egress_allow)
    except EgressConfigError as exc:
        raise DesktopError(f"{exc}; give ranges like 10.0.0.0/8 or fd00::/8") from exc


def _data(args) -> Path:
    return (args.data.expanduser().resolve() if args.data else data_dir())


def _read_state(layout: SessionLayout) -> dict | None:
    try:
        return json.loads(layout.state_file.read_text())
    except (OSError, ValueError):
        return None


def _lock_holder(layout: SessionLayout) -> int | None:
    """Pid of the supervisor holding the data dir's lock, if one runs."""
    import fcntl
    try:
        fd = os.open(layout.lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return int(layout.lock_file.read_text().strip() or 0) or -1
            except (OSError, ValueError):
                return -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _print_up(data: Path, as_json: bool, already: bool) -> None:
    info = read_session(data)
    if as_json:
        print(json.dumps({**info.to_json(), "already_running": already}, indent=2))
        return
    print(f"desktop session {'already running' if already else 'up'} on display {info.display} "
          f"(data {data})")
    print(f"viewer:   {info.viewer_url}")
    print(f"devtools: {info.devtools_url}")
    firewall = info.extra.get("egress_firewall")
    if firewall and firewall != "on":
        print(f"warning: programs' egress is not filtered ({firewall}); pages are still checked "
              f"by the browser server", file=sys.stderr)


def _wait_for_session(data: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if (data / SESSION_FILE).exists():
            return
        time.sleep(0.05)
    raise DesktopError(f"a session is starting in {data} but did not become ready; try "
                       f"`codedesk desktop status --data {data}`")


def up(data: Path, viewer_host: str = "127.0.0.1", viewer_port: int = 0, view_only: bool = False,
       as_json: bool = False, egress: EgressPolicy = EgressPolicy()) -> int:
    """Start the session at `data` (or report the running one); returns the exit code."""
    missing = missing_packages()
    if missing:
        raise DesktopError(install_hint(missing))
    DesktopUser.resolve()  # say how to create the session's users when one is missing
    DesktopUser.viewer()
    data.mkdir(parents=True, exist_ok=True)
    layout = SessionLayout(data)
    deadline = time.monotonic() + UP_TIMEOUT
    if _lock_holder(layout):
        _wait_for_session(data, deadline)
        _print_up(data, as_json, already=True)
        return 0
    if layout.state_file.exists():
        # A supervisor died without `down`: stop what it left (its Chromium holds the profile).
        _cleanup_after(layout, _read_state(layout))
    make_private_dir(layout.logs)
    r, w = os.pipe()
    _start_supervisor(layout, w, viewer_host, viewer_port, view_only, egress)
    os.close(w)
    try:
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([r], [], [], max(left, 0))
            if not ready:
                raise DesktopError(f"the session did not start within {UP_TIMEOUT:.0f} s; see "
                                   f"{layout.logs / 'supervisor.log'}")
            chunk = os.read(r, 4096)
            if not chunk:
                raise DesktopError(f"the session supervisor exited during start; see "
                                   f"{layout.logs / 'supervisor.log'}")
            buf += chunk
    finally:
        os.close(r)
    msg = json.loads(buf.split(b"\n", 1)[0])
    if msg.get("already_running"):
        _wait_for_session(data, deadline)
        _print_up(data, as_json, already=True)
        return 0
    if not msg.get("ok"):
        raise DesktopError(msg.get("error") or "the session failed to start")
    _print_up(data, as_json, already=False)
    return 0


def _start_supervisor(layout: SessionLayout, ready_fd: int, viewer_host: str, viewer_port: int,
                      view_only: bool, egress: EgressPolicy) -> None:
    """Run the supervisor detached (own session, stdio to its log), reporting on `ready_fd`.

    It is forked from this process when that is safe (no other threads), which spares a
    second interpreter start on the way to a ready desktop; otherwise a fresh interpreter.
    """
    from .supervisor import Options, run  # imported before forking, so only once

    log_path = layout.logs / "supervisor.log"
    if threading.active_count() > 1:
        argv = [sys.executable, "-m", "runtime.desktop", "_supervise", "--data", str(layout.data),
                "--viewer-host", viewer_host, "--viewer-port", str(viewer_port),
                "--ready-fd", str(ready_fd)] + (["--view-only"] if view_only else [])
        for key, ranges in egress.to_config().items():
            argv += [arg for cidr in ranges for arg in (f"--egress-{key}", cidr)]
        with procs.open_log(log_path) as logf:
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                             pass_fds=(ready_fd,), start_new_session=True, close_fds=True)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)  # the first child exits at once; the grandchild is the supervisor
        return
    code = 1
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        try:  # `ps`/`top` name it for what it is, not the `up` it was forked from
            Path("/proc/self/comm").write_text("codedesk-super")
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDONLY)
        logf = procs.open_log(log_path)  # kept referenced: closing it would close fds 1 and 2's source
        os.dup2(null, 0)
        os.dup2(logf.fileno(), 1)
        os.dup2(logf.fileno(), 2)
        # Keep nothing of the caller's but the ready pipe (a caller waiting for EOF on a pipe
        # it gave us must not wait for the whole session).
        os.closerange(3, ready_fd)
        os.closerange(ready_fd + 1, 65536)
        code = run(Options(layout.data, viewer_host, viewer_port, view_only, egress), ready_fd)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        os._exit(code)


def down(data: Path, timeout: float = 30.0) -> int:
    """Stop the session at `data`; nothing to stop is not an error."""
    layout = SessionLayout(data)
    state = _read_state(layout)
    holder = _lock_holder(layout)
    pid = holder if holder and holder > 0 else (state or {}).get("supervisor_pid")
    if pid and procs.pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while procs.pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if procs.pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    if state:
        _cleanup_after(layout, state)
        print(f"desktop session at {data} stopped")
    else:
        print(f"no desktop session running at {data}")
    return 0


def _cleanup_after(layout: SessionLayout, state: dict | None) -> None:
    """Stop whatever a session left behind when its supervisor did not (it was killed)."""
    if state:
        devtools = state.get("ports", {}).get("devtools")
        if devtools:
            procs.stop_chromium(layout.chrome, f"http://127.0.0.1:{devtools}")
        procs.kill_marked(state.get("session_id", ""), layout.chrome)
        display = state.get("display", "")
        if display.startswith(":") and display[1:].isdigit():
            procs.remove_stale_x_lock(int(display[1:]))
        for key in ("run_dir", "viewer_dir"):
            folder = state.get(key)
            if folder and Path(folder).name.startswith("codedesk-"):
                shutil.rmtree(folder, ignore_errors=True)
    remove_session(layout.data)
    layout.state_file.unlink(missing_ok=True)


def status(data: Path) -> dict:
    """The session's parts, pids, ports and screen size (`running: false` when there is none)."""
    layout = SessionLayout(data)
    state = _read_state(layout)
    if not state or not procs.pid_alive(state.get("supervisor_pid")):
        return {"running": False, "data_dir": str(data)}
    parts = {}
    for name, p in state["parts"].items():
        parts[name] = {"pid": p["pid"], "running": procs.pid_alive(p["pid"]),
                       "restarts": p["restarts"], "supervised": p["supervised"]}
    # Chromium may have been closed and started again by the browser capability or a launcher.
    browsers = procs.chromium_pids(layout.chrome, main_only=True)
    if browsers and "chromium" in parts:
        parts["chromium"].update(pid=browsers[0], running=True)
    try:
        info = read_session(data)
    except SessionNotFound:
        info = None
    return {
        "running": True,
        "data_dir": str(data),
        "display": state["display"],
        "screen": _screen_size(state) or state["screen"],
        "supervisor_pid": state["supervisor_pid"],
        "ports": state["ports"],
        "vnc_socket": state.get("vnc_socket"),
        "parts": parts,
        "viewer_url": info.viewer_url if info else None,
        "devtools_url": info.devtools_url if info else None,
    }


def _screen_size(state: dict) -> dict | None:
    from Xlib import display as xdisplay
    os.environ.setdefault("XAUTHORITY", state["xauthority"])
    try:
        d = xdisplay.Display(state["display"])
    except Exception:
        return None
    try:
        g = d.screen().root.get_geometry()
        return {"width": g.width, "height": g.height}
    finally:
        d.close()


def cli_main(argv: list[str]) -> int:
    """Entry point of `codedesk desktop ...`; returns the process exit code."""
    args = _parser().parse_args(argv)
    data = _data(args)
    try:
        if args.command == "up":
            if args.video:
                os.environ["CODEDESK_VIDEO"] = "on"  # the supervisor inherits it
            return up(data, args.viewer_host, args.viewer_port, args.view_only, args.json, _egress(args))
        if args.command == "down":
            return down(data)
        if args.command == "status":
            st = status(data)
            print(json.dumps(st, indent=2))
            return 0 if st["running"] else 3
        if args.command == "_supervise":
            from .supervisor import Options, run
            return run(Options(data, args.viewer_host, args.viewer_port, args.view_only, _egress(args)),
                       args.ready_fd)
    except DesktopError as exc:
        print(f"codedesk desktop {args.command}: {exc}", file=sys.stderr)
        return 1
    return 2
