"""LibreOffice headless, run one conversion at a time: `OfficeConverter`.

LibreOffice runs each conversion in a fresh process with the converter's own profile directory
(`-env:UserInstallation`), so it never touches a desktop user's LibreOffice and never joins a
running instance. A conversion that outlives its timeout is killed with its whole process
group, its profile is discarded (a killed instance can leave it locked), and the next
conversion starts clean. A conversion whose call is cancelled is stopped the same way at once
(`CallCancelled`), and so is one waiting for its turn when its turn comes.

LibreOffice parses files anyone may have made, so a server running as root does not run it as
root: it runs as the desktop user (else `nobody`), on a copy of the source in the converter's
scratch folder, with an environment of its own (none of the server's variables).

The server's lifespan owns the one converter (in its `Workspace`) and closes it at shutdown.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from capabilities import session
from capabilities.contract import current_cancellation

from .errors import MissingProgram, ProgramFailed, ProgramTimedOut
from .paths import DESKTOP_USER

SOFFICE_ENV = "CODEDESK_SOFFICE_BIN"
TIMEOUT_ENV = "CODEDESK_CONVERT_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 120.0
PDF_CACHE_SIZE = 16
NOT_INSTALLED = "LibreOffice is not installed (no `soffice` found)"
INSTALL_HINT = (
    "install it with `make install` (Debian packages libreoffice-core, libreoffice-writer, "
    f"libreoffice-calc, libreoffice-impress), or set {SOFFICE_ENV} to the soffice program"
)

# LibreOffice's --convert-to filter for each target. CSV: comma, double quote, UTF-8, from the
# first line, text quoted only when needed, cells as shown.
FILTERS = {
    "pdf": "pdf",
    "docx": "docx:MS Word 2007 XML",
    "xlsx": "xlsx:Calc MS Excel 2007 XML",
    "pptx": "pptx:Impress MS PowerPoint 2007 XML",
    "odt": "odt",
    "ods": "ods",
    "odp": "odp",
    "csv": "csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,true",
    "html": "html",
    "txt": "txt:Text (encoded):UTF8",
}

def default_timeout() -> float:
    return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))


@dataclass(frozen=True)
class OfficeUser:
    """The unprivileged user LibreOffice runs as."""

    name: str
    uid: int
    gid: int


def office_user() -> OfficeUser | None:
    """Who LibreOffice runs as: None (this server's own user) unless this server is root; then
    the desktop session's user, else the `desktop` user, else `nobody`."""
    if os.geteuid() != 0:
        return None
    try:
        info = session.read_session()
        if info.uid != 0:
            return OfficeUser(info.user, info.uid, info.gid)
    except session.SessionNotFound:
        pass
    for name in (DESKTOP_USER, "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return OfficeUser(name, entry.pw_uid, entry.pw_gid)
    raise RuntimeError("running as root with neither a 'desktop' nor a 'nobody' user to run LibreOffice as")


class OfficeConverter:
    """Runs LibreOffice conversions one at a time, each with a timeout; owns a scratch folder.

    Office files converted to PDF for rendering are cached by path, size and modification
    time, so rendering several pages of one DOCX converts it once.
    """

    def __init__(self, soffice: str | None = None, user: OfficeUser | None | Literal["auto"] = "auto") -> None:
        """`user`: who LibreOffice runs as; "auto" is `office_user()`, None this process's user."""
        self._soffice = soffice or os.environ.get(SOFFICE_ENV) or shutil.which("soffice")
        self._user = office_user() if user == "auto" else user
        self._lock = threading.Lock()
        self._scratch = Path(tempfile.mkdtemp(prefix="codedesk-office-"))
        self._give(self._scratch)
        self._profile = self._scratch / "profile"
        self._pdf_cache: dict[tuple[str, int, int], Path] = {}  # oldest first
        self._running: subprocess.Popen | None = None
        self._runs = 0

    def close(self) -> None:
        """Stop a running conversion and remove the scratch folder."""
        running = self._running
        if running is not None and running.poll() is None:
            _kill_group(running)
        shutil.rmtree(self._scratch, ignore_errors=True)

    def convert(self, source: Path, to: str, timeout: float | None = None) -> Path:
        """Convert `source` to format `to` into a fresh scratch folder; return the file written.

        Raises:
            MissingProgram: LibreOffice is not installed.
            ProgramFailed: LibreOffice failed or wrote nothing.
            ProgramTimedOut: LibreOffice was killed after `timeout`.
        """
        if not self._soffice or not Path(self._soffice).exists() and not shutil.which(self._soffice):
            raise MissingProgram(NOT_INSTALLED, hint=INSTALL_HINT)
        timeout = default_timeout() if timeout is None else timeout
        cancellation = current_cancellation()
        with self._lock:
            cancellation.check()  # cancelled while it waited for its turn
            self._runs += 1
            outdir = self._scratch / f"out-{self._runs}"
            outdir.mkdir()
            self._give(outdir)
            indir = None
            if self._user is not None:  # the user may not be able to read the original
                indir = self._scratch / f"in-{self._runs}"
                indir.mkdir()
                source = Path(shutil.copyfile(source, indir / source.name))
                self._give(indir)
                self._give(source)
            argv = [
                self._soffice,
                f"-env:UserInstallation={self._profile.as_uri()}",
                "--headless", "--invisible", "--nologo", "--norestore", "--nodefault", "--nolockcheck",
                "--convert-to", FILTERS[to], "--outdir", str(outdir), str(source),
            ]
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True,  # its own process group, so a kill reaches soffice.bin too
                    **self._identity(),
                )
            except OSError as exc:
                if indir is not None:
                    shutil.rmtree(indir, ignore_errors=True)
                raise MissingProgram(f"{NOT_INSTALLED}: {exc}", hint=INSTALL_HINT) from exc
            self._running = proc
            try:
                with cancellation.on_cancel(lambda: _signal_group(proc)):
                    _, stderr = proc.communicate(timeout=timeout)
                if cancellation.cancelled:
                    shutil.rmtree(self._profile, ignore_errors=True)
                    shutil.rmtree(outdir, ignore_errors=True)
                    cancellation.check()
            except subprocess.TimeoutExpired as exc:
                group = proc.pid
                _kill_group(proc)
                # A killed instance may leave its profile locked or half-written: start afresh.
                shutil.rmtree(self._profile, ignore_errors=True)
                shutil.rmtree(outdir, ignore_errors=True)
                raise ProgramTimedOut(
                    f"LibreOffice did not finish converting {source.name!r} to {to} within {timeout:g} s "
                    f"and was stopped (process group {group} killed); nothing was written",
                    hint="try again with a larger timeout_seconds, or check that the file opens",
                    field="timeout_seconds",
                ) from exc
            finally:
                self._running = None
                if indir is not None:
                    shutil.rmtree(indir, ignore_errors=True)
            produced = sorted(outdir.iterdir())
            if proc.returncode != 0 or not produced:
                shutil.rmtree(outdir, ignore_errors=True)
                detail = stderr.decode(errors="replace").strip().splitlines()[-3:]
                raise ProgramFailed(
                    f"LibreOffice could not convert {source.name!r} to {to} (exit code {proc.returncode}"
                    f"{': ' + ' | '.join(detail) if detail else ''})",
                    hint=f"check that the file opens and that {to} suits this kind of document",
                )
            return produced[0]

    def _give(self, path: Path) -> None:
        """Make a scratch file or folder the LibreOffice user's."""
        if self._user is not None:
            os.chown(path, self._user.uid, self._user.gid)

    def _identity(self) -> dict:
        """Popen options running LibreOffice as its user, with an environment of its own."""
        if self._user is None:
            return {}
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "HOME": str(self._scratch),
            "USER": self._user.name,
            "LOGNAME": self._user.name,
        }
        return {"user": self._user.uid, "group": self._user.gid, "extra_groups": [], "env": env}

    def pdf_of(self, source: Path, timeout: float | None = None) -> Path:
        """The PDF to render for `source`: itself when it is a PDF, else its conversion."""
        if source.suffix.lower() == ".pdf":
            return source
        return self.to_pdf(source, timeout)

    def to_pdf(self, source: Path, timeout: float | None = None) -> Path:
        """`source` as a PDF (converted once per version of the file)."""
        stat = source.stat()
        key = (str(source), stat.st_mtime_ns, stat.st_size)
        cached = self._pdf_cache.get(key)
        if cached is not None and cached.exists():
            return cached
        pdf = self.convert(source, "pdf", timeout)
        self._pdf_cache[key] = pdf
        while len(self._pdf_cache) > PDF_CACHE_SIZE:
            oldest = next(iter(self._pdf_cache))
            discard(self._pdf_cache.pop(oldest))
        return pdf


def discard(produced: Path) -> None:
    """Remove a conversion's scratch output once it has been copied or evicted."""
    shutil.rmtree(produced.parent, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    _signal_group(proc)
    proc.communicate()


def _signal_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group `proc` leads, unless it was already reaped; the thread that
    waits for it reaps it."""
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
