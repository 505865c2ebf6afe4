"""The session supervisor: one long-lived process per session that starts its parts in order,
restarts the ones that crash (Chromium excepted), serves screen resizes, and stops everything.

`codedesk desktop up` spawns it detached and waits for its "ready" line on a pipe; `down`
sends it SIGTERM. It runs as the caller (root or not). Every part runs unprivileged: the desktop
as the desktop user, the viewer (x11vnc, websockify) as the viewer user, which the desktop user
cannot reach: x11vnc listens only on a unix socket in the viewer's private folder, and only
websockify, given the session's secret, reaches it (through the supervisor's input watch,
`viewer_input`, which keeps the input lease). Started as root, the supervisor never
writes through a folder the desktop user controls: those files are written as that user.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from capabilities.egress import EgressPolicy
from capabilities import containment
from capabilities.session import SessionInfo, remove_session, write_session

from .layout import (NOVNC_DIR, DesktopError, DesktopUser, SessionLayout, free_port, image_dir,
                     make_private_dir, port_is_free)
from .screen import MAX_SIZE, START_SIZE, ScreenSizer
from .userfiles import prepare_chrome_profile, prepare_home, write_xauthority
from . import procs, viewer_input
from .firewall import apply_egress_firewall
from .oversight import OversightRelay, runtime_socket as oversight_socket
from .spawn import SpawnService, client_uid
from .video import VIDEO_ENV, VideoError, VideoRecorder

log = logging.getLogger("codedesk.desktop")

CHROMIUM = "/usr/bin/chromium"
# Flags that keep Chromium quiet on a closed network and lean in memory.
CHROMIUM_FLAGS = [
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-breakpad",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-component-extensions-with-background-pages",
    "--metrics-recording-only",
    "--password-store=basic",
    "--hide-crash-restore-bubble",  # after a crashed display, no "Restore pages?" in the way
    "--disable-features=Translate,MediaRouter,DialMediaRouteProvider,OptimizationHints,"
    "OptimizationHintsFetching,OptimizationGuideModelDownloading,OptimizationTargetPrediction,"
    "AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions,"
    "GlobalMediaControls,LensOverlay,HistoryEmbeddings,SidePanelPinning,PrivacySandboxSettings4,"
    "SafeBrowsingEnhancedProtection,SpareRendererForSitePerProcess,"
    # The WebUI address-bar popups keep a renderer of ~50 MB alive even with no window open;
    # without them the address bar uses its native popup.
    "WebUIOmniboxPopup,WebUIOmniboxAimPopup",
    "--start-maximized",
]
READY_TIMEOUT = 30.0
# Chromium's first start with a fresh profile on a busy two-core machine can pass 30 s.
CHROMIUM_READY_TIMEOUT = 90.0
# A part that crashes this many times within RESTART_WINDOW seconds is given up on.
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0


def _log_tail(path: Path, lines: int = 8) -> str:
    """The last lines of a part's log, indented, to quote in an error ("" when there are none)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            tail = f.read().decode("utf-8", "replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "".join(f"\n    {line}" for line in tail if line.strip())


def _read_line(fd: int, timeout: float) -> bytes:
    """Read from `fd` up to a newline (b"" on timeout or EOF first)."""
    buf = b""
    deadline = time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            return b""
        chunk = os.read(fd, 256)
        if not chunk:
            return b""
        buf += chunk
    return buf


def _small_dev_shm() -> bool:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return True
    return st.f_frsize * st.f_blocks < 512 * 1024 * 1024


async def _always_ready() -> bool:
    return True


@dataclass
class Part:
    """One supervised process of the session, with its own readiness check and restart rule.

    `ready` answers whether the started process serves (polled until it does); `relaunch`
    starts it again after a crash (None: spawn the same argv); `restart` False leaves it down.
    """

    name: str
    argv: list[str]
    user: DesktopUser
    restart: bool = True
    needs_x: bool = True
    ready: Callable[[], Awaitable[bool]] = _always_ready
    ready_timeout: float = READY_TIMEOUT
    relaunch: Callable[[], Awaitable[None]] | None = None
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    crashes: list[float] = field(default_factory=list)
    restarts: int = 0
    given_up: bool = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Options:
    """What `up` asked for."""

    data: Path
    viewer_host: str = "127.0.0.1"
    viewer_port: int = 0
    view_only: bool = False
    egress: EgressPolicy = field(default_factory=EgressPolicy)


class Supervisor:
    """One session's processes, ports and screen: started by `start`, kept up by `watch`,
    stopped by `stop`. Holds the data dir's lock while it lives."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.layout = SessionLayout(opts.data)
        self.user = DesktopUser.resolve()
        self.viewer_user = DesktopUser.viewer()
        self.session_id = secrets.token_hex(4)
        self.secret = secrets.token_urlsafe(24)
        self.run_dir = Path(f"/tmp/codedesk-{self.session_id}")  # the desktop user's XDG_RUNTIME_DIR
        self.xauthority = self.run_dir / "Xauthority"
        # The viewer's private folder: its copy of the X cookie, x11vnc's socket, its web root.
        self.viewer_dir = Path(f"/tmp/codedesk-{self.session_id}-viewer")
        self.vnc_socket = self.viewer_dir / "vnc.sock"
        self.display_num: int | None = None
        self.sizer: ScreenSizer | None = None
        self.size = START_SIZE
        self.parts: dict[str, Part] = {}
        self.ports: dict[str, int] = {}
        self.env: dict[str, str] = {}
        self.stopping = False
        self.firewall = "not applied yet"
        self.containment = containment.Delegation(why="not delegated yet")
        self._lock_fd: int | None = None
        self._resize_server: asyncio.AbstractServer | None = None
        self._viewer_servers: list[asyncio.AbstractServer] = []  # the input watch and lease channel
        self.lease: viewer_input.LeaseKeeper | None = None
        self.oversight: OversightRelay | None = None  # live runs and approvals for the viewers
        self.video: VideoRecorder | None = None  # the screen recorder (runtime/desktop/video.py)
        self._logs: list = []

    # ----------------------------------------------------------------- setup
    def acquire_lock(self) -> bool:
        """Take the data dir's session lock; False when another supervisor holds it."""
        fd = os.open(self.layout.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd
        return True

    def prepare(self) -> None:
        lay = self.layout
        self._own_data_dir()
        self._check_reachable()
        # The kernel's backstop for the egress policy: the desktop user's packets to denied
        # ranges are rejected, whatever a page or a program does (firewall.py).
        self.firewall = apply_egress_firewall(self.user.uid, self.opts.egress) or "on"
        if self.firewall != "on":
            log.warning("egress firewall not applied: %s", self.firewall)
        # Control groups for exec's commands, handed to the desktop user (containment.py).
        if os.geteuid() == 0:
            self.containment = containment.delegate(
                containment.session_tag(lay.data), self.user.uid, self.user.gid)
        else:
            self.containment = containment.Delegation(why="the session was not started as root")
        x11_dir = Path("/tmp/.X11-unix")
        if os.geteuid() == 0 and not x11_dir.exists():
            # Xvfb runs unprivileged and cannot make this root-owned sticky directory itself.
            x11_dir.mkdir(exist_ok=True)
            x11_dir.chmod(0o1777)
        for folder, owner in ((self.run_dir, self.user), (self.viewer_dir, self.viewer_user)):
            folder.mkdir(mode=0o700)  # fresh (the name is new): nobody can have planted anything
            if owner.switch:
                os.chown(folder, owner.uid, owner.gid)
        video = lay.data / "video"  # ffmpeg's, as the viewer account: in the root-owned data dir
        video.mkdir(mode=0o700, exist_ok=True)
        if self.viewer_user.switch:
            os.chown(video, self.viewer_user.uid, self.viewer_user.gid, follow_symlinks=False)
        os.chmod(video, 0o700, follow_symlinks=False)
        self._cookie = secrets.token_bytes(16)
        self._write_xauthority()
        self.ports["devtools"] = free_port()
        self.ports["resize"] = free_port()
        if self.opts.viewer_port:
            if not port_is_free(self.opts.viewer_port, self.opts.viewer_host):
                raise DesktopError(
                    f"viewer port {self.opts.viewer_port} on {self.opts.viewer_host} is busy; "
                    f"pass another --viewer-port, or omit it to pick a free one"
                )
            self.ports["viewer"] = self.opts.viewer_port
        else:
            self.ports["viewer"] = free_port(self.opts.viewer_host)
        # Written as the desktop user: its home and profile are folders it controls.
        self.user.run_as(prepare_home, lay, self.browser_argv(startup_window=True))
        self.user.run_as(prepare_chrome_profile, lay)
        self.viewer_user.run_as(self._prepare_viewer_web)

    def _own_data_dir(self) -> None:
        """Make the data directory the session's own: root's (when root), with the desktop user's
        folders inside, and the logs (which hold the viewer's secret) private."""
        lay = self.layout
        lay.data.mkdir(parents=True, exist_ok=True)
        if self.user.switch:
            os.chown(lay.data, 0, 0, follow_symlinks=False)
            os.chmod(lay.data, 0o755)
        make_private_dir(lay.logs)
        for folder in lay.user_dirs:
            folder.mkdir(exist_ok=True)
            if not folder.is_dir() or folder.is_symlink():
                raise DesktopError(f"{folder} must be a folder; move it away and start again")
            if self.user.switch:
                os.chown(folder, self.user.uid, self.user.gid, follow_symlinks=False)
        if self.user.switch:
            for folder in (lay.data / "exec", lay.data / "browser", lay.data / "memory"):
                self._reclaim(folder)

    def _reclaim(self, folder: Path) -> None:
        """Give the desktop user the state its servers keep here that root wrote when they ran as
        root (older sessions): plain files and folders only, never through a link, never a file
        with other names (a hard link the user could have made to a file of root's)."""
        for root, dirs, files in os.walk(folder):
            for name in dirs + files:
                st = os.lstat(os.path.join(root, name))
                plain = stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)
                if st.st_uid == 0 and plain:
                    os.chown(os.path.join(root, name), self.user.uid, self.user.gid, follow_symlinks=False)

    def _write_xauthority(self) -> None:
        self.user.run_as(write_xauthority, self.xauthority, self._cookie, self.display_num)
        self.viewer_user.run_as(write_xauthority, self.viewer_dir / "Xauthority", self._cookie,
                                self.display_num)

    def _check_reachable(self) -> None:
        if not self.user.switch:
            return
        probe = subprocess.run(
            ["test", "-x", str(self.layout.data)], **self.user.popen_kwargs(), check=False
        )
        if probe.returncode != 0:
            raise DesktopError(
                f"the desktop user {self.user.name!r} cannot reach the data directory "
                f"{self.layout.data} (a parent directory is not traversable); choose one it can "
                f"reach with --data or CODEDESK_DATA, e.g. /srv/codedesk or /tmp/codedesk"
            )

    def _prepare_viewer_web(self) -> None:
        """The viewer's web root and token file, in its private folder (run as the viewer user)."""
        web = self.viewer_dir / "web"
        web.mkdir()
        for name in ("core", "vendor"):
            (web / name).symlink_to(NOVNC_DIR / name)
        for f in (image_dir() / "viewer").iterdir():
            shutil.copyfile(f, web / f.name)
        tokens = self.viewer_dir / "viewer-tokens"
        fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            # RFB through the input watch (viewer_input), which passes it on to x11vnc's socket
            f.write(f"{self.secret}: unix_socket:{self.viewer_dir / 'input.sock'}\n"
                    f"{self.secret}.resize: 127.0.0.1:{self.ports['resize']}\n"
                    f"{self.secret}.lease: unix_socket:{self.viewer_dir / 'lease.sock'}\n"
                    f"{self.secret}.oversight: unix_socket:{self.viewer_dir / 'oversight.sock'}\n")

    def browser_argv(self, startup_window: bool = False) -> list[str]:
        """Chromium in the session's profile with its DevTools endpoint on loopback."""
        argv = [
            CHROMIUM,
            f"--user-data-dir={self.layout.chrome}",
            f"--remote-debugging-port={self.ports['devtools']}",
            "--remote-debugging-address=127.0.0.1",
            *CHROMIUM_FLAGS,
        ]
        if _small_dev_shm():
            argv.append("--disable-dev-shm-usage")  # Docker's 64 MB /dev/shm crashes renderers
        if not startup_window:
            argv.append("--no-startup-window")
        return argv

    def session_env(self) -> dict[str, str]:
        home = str(self.layout.home)
        return {
            "DISPLAY": f":{self.display_num}",
            "XAUTHORITY": str(self.xauthority),
            "HOME": home,
            "USER": self.user.name,
            "LOGNAME": self.user.name,
            "SHELL": "/bin/bash",
            "PATH": f"{home}/.local/bin:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "XDG_RUNTIME_DIR": str(self.run_dir),
            "XDG_CURRENT_DESKTOP": "XFCE",
            "XDG_SESSION_DESKTOP": "xfce",
            "XDG_SESSION_TYPE": "x11",
            "DESKTOP_SESSION": "xfce",
            "DBUS_SESSION_BUS_ADDRESS": f"unix:path={self.run_dir}/bus",
            "BROWSER": str(self.layout.browser_wrapper),
            # Chromium (and Electron apps) expose their own UI and pages to AT-SPI only when
            # asked to; GTK apps do by themselves. accessibility.tree reads both.
            "ACCESSIBILITY_ENABLED": "1",
            procs.MARKER: self.session_id,
        }

    # ----------------------------------------------------------------- parts
    def _spawn(self, part: Part, pass_fds: tuple[int, ...] = ()) -> None:
        logf = procs.open_log(self.layout.logs / f"{part.name}.log")
        self._logs.append(logf)
        env = part.env or self.env or {
            procs.MARKER: self.session_id, "PATH": "/usr/bin:/bin",
            "HOME": str(self.layout.home), "XDG_RUNTIME_DIR": str(self.run_dir)}
        cwd = self.layout.home if part.user is self.user else self.viewer_dir
        part.proc = subprocess.Popen(
            part.argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
            env=env, cwd=cwd, start_new_session=True, pass_fds=pass_fds,
            **part.user.popen_kwargs(),
        )
        log.info("started %s pid %s", part.name, part.proc.pid)

    def _spawn_and_read_line(self, part: Part, argv_with_fd: Callable[[int], list[str]]) -> str:
        """Spawn `part` with the write end of a pipe, whose number `argv_with_fd` puts in its
        command line, and return the first line it reports there (its readiness)."""
        r, w = os.pipe()
        part.argv = argv_with_fd(w)
        try:
            self._spawn(part, pass_fds=(w,))
        finally:
            os.close(w)
        try:
            return _read_line(r, READY_TIMEOUT)
        finally:
            os.close(r)

    def _xvfb_argv(self, *display: str) -> list[str]:
        w, h = MAX_SIZE  # the framebuffer holds the largest size; RandR picks the visible one
        # No GLX: with it, Xvfb and every GL client (Chromium's GPU process, xfwm4) load Mesa's
        # llvmpipe, ~90 MB of an idle session. Nothing here renders with GL (Chromium draws in
        # software either way; xfwm4 does not composite).
        return ["Xvfb", *display, "-screen", "0", f"{w}x{h}x24", "-nolisten", "tcp",
                "-auth", str(self.xauthority), "-dpi", "96", "-noreset", "+extension", "RANDR",
                "-extension", "GLX"]

    def start_xvfb(self) -> None:
        if self.display_num is None:
            part = Part("xvfb", [], self.user, needs_x=False, relaunch=self._relaunch_xvfb)
            self.parts["xvfb"] = part
            # -displayfd: Xvfb takes the first free display number itself and tells us which.
            data = self._spawn_and_read_line(part, lambda fd: self._xvfb_argv("-displayfd", str(fd)))
            if not data.strip().isdigit():
                raise DesktopError(f"Xvfb did not start (see {self.layout.logs / 'xvfb.log'})")
            self.display_num = int(data.strip())
            self._write_xauthority()
            part.argv = self._xvfb_argv(f":{self.display_num}")
        else:
            self._spawn(self.parts["xvfb"])
        self.env = self.session_env()
        self._connect_screen()

    def _connect_screen(self) -> None:
        os.environ["XAUTHORITY"] = str(self.xauthority)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                if self.sizer:
                    self.sizer.close()
                self.sizer = ScreenSizer(f":{self.display_num}")
                break
            except Exception as exc:
                if time.monotonic() > deadline or not self.parts["xvfb"].running():
                    raise DesktopError(f"cannot connect to Xvfb on :{self.display_num}: {exc}") from exc
                time.sleep(0.05)
        self.size = self.sizer.set_size(*self.size)

    def start_dbus(self) -> None:
        part = self.parts.get("dbus") or Part("dbus", [], self.user, needs_x=False,
                                              relaunch=lambda: asyncio.to_thread(self.start_dbus))
        self.parts["dbus"] = part
        data = self._spawn_and_read_line(part, lambda fd: [
            "dbus-daemon", "--session", "--nofork", "--nopidfile", "--nosyslog",
            f"--address=unix:path={self.run_dir}/bus", f"--print-address={fd}"])
        if not data.strip():
            raise DesktopError(f"dbus-daemon did not start (see {self.layout.logs / 'dbus.log'})")

    def define_parts(self) -> None:
        # x11vnc: no TCP port at all (-rfbport 0), only the socket in the viewer's private folder.
        vnc = ["x11vnc", "-display", f":{self.display_num}", "-auth", str(self.viewer_dir / "Xauthority"),
               "-unixsock", str(self.vnc_socket), "-rfbport", "0", "-rfbportv6", "-1",
               "-forever", "-shared", "-nopw", "-xrandr", "newfbsize", "-noxdamage",
               "-quiet", "-nowf", "-ncache", "0",
               # Its shared-memory segments would belong to another user than Xvfb's: none.
               "-noshm"]
        if self.opts.view_only:
            vnc.append("-viewonly")
        web = ["websockify", "--web", str(self.viewer_dir / "web"),
               "--token-plugin", "TokenFile", "--token-source", str(self.viewer_dir / "viewer-tokens"),
               f"{self.opts.viewer_host}:{self.ports['viewer']}"]
        viewer_env = {procs.MARKER: self.session_id, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                      "HOME": str(self.viewer_dir),
                      "DISPLAY": f":{self.display_num}", "XAUTHORITY": str(self.viewer_dir / "Xauthority")}
        viewer_host = "127.0.0.1" if self.opts.viewer_host in ("0.0.0.0", "") else self.opts.viewer_host
        for part in (
            Part("xfsettingsd", ["xfsettingsd", "--no-daemon", "--replace"], self.user,
                 ready=lambda: _now(self.sizer.selection_owned("_XSETTINGS_S0"))),
            Part("xfwm4", ["xfwm4", "--compositor=off", "--replace"], self.user,
                 ready=lambda: _now(self.sizer.has_window_manager())),
            Part("xfce4-panel", ["xfce4-panel", "--disable-wm-check"], self.user,
                 ready=lambda: _now("Xfce4-panel" in self.sizer.window_classes())),
            Part("xfdesktop", ["xfdesktop", "--disable-wm-check"], self.user,
                 ready=lambda: _now("Xfdesktop" in self.sizer.window_classes())),
            Part("chromium", self.browser_argv(), self.user, restart=False,
                 ready=lambda: procs.http_ok("127.0.0.1", self.ports["devtools"], "/json/version"),
                 ready_timeout=CHROMIUM_READY_TIMEOUT),
            Part("x11vnc", vnc, self.viewer_user, env=viewer_env,
                 ready=lambda: procs.rfb_ok(self.vnc_socket)),
            Part("websockify", web, self.viewer_user, needs_x=False, env=viewer_env,
                 ready=lambda: procs.http_ok(viewer_host, self.ports["viewer"], "/viewer.html")),
        ):
            self.parts[part.name] = part

    async def wait_ready(self, part: Part) -> None:
        deadline = time.monotonic() + part.ready_timeout
        log_path = self.layout.logs / (part.name + ".log")
        while True:
            if not part.running():
                raise DesktopError(f"{part.name} exited during start (see {log_path}){_log_tail(log_path)}")
            try:
                if await part.ready():
                    log.info("%s ready", part.name)
                    return
            except Exception:  # not answering yet
                pass
            if time.monotonic() > deadline:
                raise DesktopError(f"{part.name} did not become ready within {part.ready_timeout:.0f} s "
                                   f"(see {log_path}){_log_tail(log_path)}")
            await asyncio.sleep(0.03)

    # ----------------------------------------------------------------- run
    async def start(self) -> None:
        self.prepare()
        self.start_xvfb()
        self.start_dbus()
        self.define_parts()
        # Chromium is the slowest to answer and needs no window manager (it opens no window),
        # so it starts first; the rest of XFCE follows once the window manager has taken over.
        for name in ("chromium", "xfwm4", "x11vnc", "websockify"):
            self._spawn(self.parts[name])
        self._resize_server = await asyncio.start_server(
            self._serve_resize, "127.0.0.1", self.ports["resize"])
        viewer = self.viewer_user
        viewer_owner = (viewer.uid, viewer.gid) if viewer.switch else None
        self.video = VideoRecorder(self.layout.data / "video", f":{self.display_num}", viewer,
                                   self.parts["x11vnc"].env or {}, self.layout.logs / "ffmpeg.log", lambda: self.size)
        self.oversight = OversightRelay(self.opts.view_only, lambda: self.lease.holder if self.lease else "agent",
                                        self._video_request)
        self.lease = viewer_input.LeaseKeeper(self.layout.data, self.opts.view_only, self.oversight)
        self._viewer_servers = await viewer_input.serve(self.viewer_dir, self.vnc_socket, self.lease, viewer_owner)
        try:
            await self.oversight.serve(self.viewer_dir, oversight_socket(self.layout.data), viewer_owner,
                                       client_uid())
        except (OSError, RuntimeError) as exc:  # the session still serves; nobody watches runs live
            log.warning("the oversight relay did not start (approvals go to the client only): %s", exc)
        waits = [asyncio.ensure_future(self.wait_ready(self.parts[n]))
                 for n in ("chromium", "x11vnc", "websockify")]
        try:
            await self.wait_ready(self.parts["xfwm4"])
            for name in ("xfsettingsd", "xfce4-panel", "xfdesktop"):
                self._spawn(self.parts[name])
            waits += [asyncio.ensure_future(self.wait_ready(self.parts[n]))
                      for n in ("xfsettingsd", "xfce4-panel", "xfdesktop")]
            await asyncio.gather(*waits)
        finally:
            for w in waits:
                w.cancel()
        if os.environ.get(VIDEO_ENV, "").strip().lower() in ("on", "1", "true", "yes"):
            try:
                self.video.start("operator")
            except VideoError as exc:
                log.warning("the screen is not recorded: %s", exc)
        write_session(self.session_info())
        self.write_state()

    def _video_request(self, action: str, segment_seconds: int | None) -> dict:
        """A script's `screen_video` call, through the oversight relay."""
        assert self.video is not None
        if action == "start":
            return self.video.start("script", segment_seconds)
        if action == "stop":
            return self.video.stop("script")
        return self.video.status()

    def session_info(self) -> SessionInfo:
        host = "127.0.0.1" if self.opts.viewer_host in ("0.0.0.0", "") else self.opts.viewer_host
        return SessionInfo(
            data_dir=self.layout.data,
            display=f":{self.display_num}",
            env=self.env,
            devtools_url=f"http://127.0.0.1:{self.ports['devtools']}",
            chromium_command=self.browser_argv(),
            user=self.user.name,
            uid=self.user.uid,
            gid=self.user.gid,
            home=self.layout.home,
            viewer_url=f"http://{host}:{self.ports['viewer']}/viewer.html?token={self.secret}",
            viewer_secret=self.secret,
            # resize_port: the screen-size service on loopback (what the viewer uses); send
            # "WIDTHxHEIGHT\n" lines, each answered with the size set (clamped).
            extra={"session_id": self.session_id, "browser_wrapper": str(self.layout.browser_wrapper),
                   "view_only": self.opts.view_only, "resize_port": self.ports["resize"],
                   # egress: the operator's ranges (the browser server applies them with the
                   # defaults); egress_firewall: "on", or why the kernel rules are missing.
                   "egress": self.opts.egress.to_config(), "egress_firewall": self.firewall,
                   # containment: the control groups exec's commands run in, or mode "rlimit".
                   "containment": self.containment.to_json()},
        )

    def write_state(self) -> None:
        state = {
            "supervisor_pid": os.getpid(),
            "session_id": self.session_id,
            "display": f":{self.display_num}",
            "xauthority": str(self.xauthority),
            "run_dir": str(self.run_dir),
            "viewer_dir": str(self.viewer_dir),
            "vnc_socket": str(self.vnc_socket),
            "screen": {"width": self.size[0], "height": self.size[1]},
            "ports": self.ports,
            "viewer_host": self.opts.viewer_host,
            "parts": {
                p.name: {"pid": p.pid, "running": p.running(), "restarts": p.restarts,
                         "supervised": p.restart, "given_up": p.given_up}
                for p in self.parts.values()
            },
        }
        tmp = self.layout.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, self.layout.state_file)

    async def watch(self) -> None:
        """Restart crashed parts (Chromium excepted) until asked to stop; every 2 s, the screen
        recorder's check."""
        ticks = 0
        while not self.stopping:
            await asyncio.sleep(0.25)
            changed = False
            xvfb = self.parts["xvfb"]
            for part in list(self.parts.values()):
                if self.stopping or part.running() or not part.restart or part.given_up:
                    continue
                if part.needs_x and not xvfb.running():
                    continue
                changed = True
                now = time.monotonic()
                part.crashes = [t for t in part.crashes if now - t < RESTART_WINDOW] + [now]
                if len(part.crashes) > MAX_RESTARTS:
                    log.error("%s crashed %d times in %.0f s; not restarting it",
                              part.name, len(part.crashes), RESTART_WINDOW)
                    part.given_up = True
                    continue
                log.warning("%s exited (%s); restarting", part.name, part.proc.returncode)
                part.restarts += 1
                try:
                    await self._restart(part)
                except Exception:
                    log.exception("restarting %s failed", part.name)
            if changed:
                self.write_state()
            ticks += 1
            if self.video is not None and ticks % 8 == 0 and not self.stopping:
                try:
                    await asyncio.to_thread(self.video.check)
                except Exception:
                    log.exception("the screen recorder's check failed")

    async def _restart(self, part: Part) -> None:
        if part.relaunch is not None:
            await part.relaunch()
        else:
            self._spawn(part)

    async def _relaunch_xvfb(self) -> None:
        procs.remove_stale_x_lock(self.display_num)
        self._spawn(self.parts["xvfb"])
        await asyncio.to_thread(self._connect_screen)

    async def _serve_resize(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Line protocol behind the viewer's `<secret>.resize` token: "WxH\\n" in, "WxH\\n" out."""
        try:
            while line := await reader.readline():
                try:
                    w, h = (int(v) for v in line.decode().strip().lower().split("x"))
                except ValueError:
                    writer.write(b"error: send WIDTHxHEIGHT\n")
                    continue
                if self.sizer is None:
                    writer.write(b"error: no display\n")
                    continue
                try:
                    self.size = self.sizer.set_size(w, h)
                except Exception as exc:
                    log.warning("resize to %sx%s failed: %s", w, h, exc)
                    writer.write(f"error: {exc}\n".encode())
                    continue
                self.write_state()
                writer.write(f"{self.size[0]}x{self.size[1]}\n".encode())
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    # ----------------------------------------------------------------- stop
    def stop(self) -> None:
        """Stop every part (reverse order), whatever else the session started, and clean up."""
        self.stopping = True
        if self._resize_server:
            self._resize_server.close()
        for server in self._viewer_servers:
            server.close()
        if self.oversight is not None:
            self.oversight.close()
        if self.video is not None:
            self.video.close()  # its last segment finished before the screen goes
        order = ["websockify", "x11vnc", "chromium", "xfdesktop", "xfce4-panel", "xfwm4",
                 "xfsettingsd", "dbus", "xvfb"]
        for name in order:
            if name == "chromium" and self.display_num is not None:
                # Chromium may have been restarted by someone else; find it by the session marker.
                procs.stop_chromium(self.layout.chrome,
                                    f"http://127.0.0.1:{self.ports['devtools']}")
            part = self.parts.get(name)
            if part and part.proc:
                procs.terminate(part.proc, grace=3.0)
        # Programs opened from the desktop (terminals, editors, a restarted Chromium).
        procs.kill_marked(self.session_id, self.layout.chrome)
        containment.release(self.containment)  # what exec's commands left, and their groups
        if self.sizer:
            self.sizer.close()
        if self.display_num is not None:
            procs.remove_stale_x_lock(self.display_num)
        for f in self._logs:
            f.close()
        for folder in (self.run_dir, self.viewer_dir):
            shutil.rmtree(folder, ignore_errors=True)
        remove_session(self.layout.data)
        self.layout.state_file.unlink(missing_ok=True)


async def _now(value: bool) -> bool:
    return value


def run(opts: Options, ready_fd: int | None) -> int:
    """The supervisor's main: start, report readiness on `ready_fd`, watch until SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    def report(msg: dict) -> None:
        nonlocal ready_fd
        if ready_fd is not None:
            try:
                os.write(ready_fd, (json.dumps(msg) + "\n").encode())
                os.close(ready_fd)
            except OSError:
                pass
            ready_fd = None

    try:
        sup = Supervisor(opts)
    except DesktopError as exc:
        report({"ok": False, "error": str(exc)})
        return 1
    if not sup.acquire_lock():
        report({"ok": False, "already_running": True})
        return 0

    async def main() -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, stop.set)
        try:
            await sup.start()
        except Exception as exc:
            log.exception("session start failed")
            sup.stop()
            report({"ok": False, "error": str(exc)})
            return 1
        # A runtime that is not root (the container's) starts its servers through this (spawn.py).
        spawn = SpawnService.from_env(sup.user, sup.layout.home)
        try:
            if spawn is not None:
                spawn.start()
        except Exception as exc:
            log.exception("spawn service failed to start")
            sup.stop()
            report({"ok": False, "error": f"the spawn service did not start: {exc}"})
            return 1
        report({"ok": True})
        watcher = asyncio.create_task(sup.watch())
        await stop.wait()
        sup.stopping = True
        watcher.cancel()
        try:
            await watcher
        except asyncio.CancelledError:
            pass
        if spawn is not None:
            spawn.close()
        sup.stop()
        return 0

    return asyncio.run(main())
