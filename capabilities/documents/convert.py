"""Conversions with LibreOffice headless (`OfficeConverter`) and the `convert_document` tool.

LibreOffice runs one conversion at a time, each in a fresh process with the converter's own
profile directory (`-env:UserInstallation`), so it never touches a desktop user's LibreOffice
and never joins a running instance. A conversion that outlives its timeout is killed with its
whole process group, its profile is discarded (a killed instance can leave it locked), and the
next conversion starts clean.

LibreOffice parses files anyone may have made, so a server running as root does not run it as
root: it runs as the desktop user (else `nobody`), on a copy of the source in the converter's
scratch folder, with an environment of its own (none of the server's variables).
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

from pydantic import Field

from capabilities import session

from . import pagespec
from .errors import BadDocument, ConversionFailed, MissingProgram
from .paths import DESKTOP_USER, atomic_output
from .pdf import open_pdf, render_page
from .results import ToolOutput
from .tooling import Args, ToolSpec, Workspace

SOFFICE_ENV = "CODEDESK_SOFFICE_BIN"
TIMEOUT_ENV = "CODEDESK_CONVERT_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 120.0
PDF_CACHE_SIZE = 16
INSTALL_HINT = (
    "LibreOffice is not installed (no `soffice` found); install it with `make install` (Debian "
    "packages libreoffice-core, libreoffice-writer, libreoffice-calc, libreoffice-impress), or "
    f"set {SOFFICE_ENV} to the soffice program"
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

TEXT_SOURCES = {".docx", ".doc", ".odt", ".rtf", ".txt", ".html", ".htm", ".docm", ".dotx", ".fodt"}
SHEET_SOURCES = {".xlsx", ".xls", ".ods", ".csv", ".xlsm", ".fods"}
SLIDE_SOURCES = {".pptx", ".ppt", ".odp", ".pps", ".ppsx", ".fodp"}
TARGETS_BY_FAMILY = {
    "text document": ({"pdf", "docx", "odt", "html", "txt"}, TEXT_SOURCES),
    "spreadsheet": ({"pdf", "xlsx", "ods", "csv", "html"}, SHEET_SOURCES),
    "presentation": ({"pdf", "pptx", "odp", "html"}, SLIDE_SOURCES),
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
            ConversionFailed: LibreOffice failed, wrote nothing, or was killed after `timeout`.
        """
        if not self._soffice or not Path(self._soffice).exists() and not shutil.which(self._soffice):
            raise MissingProgram(INSTALL_HINT)
        timeout = default_timeout() if timeout is None else timeout
        with self._lock:
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
                raise MissingProgram(f"{INSTALL_HINT} ({exc})") from exc
            self._running = proc
            try:
                _, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                group = proc.pid
                _kill_group(proc)
                # A killed instance may leave its profile locked or half-written: start afresh.
                shutil.rmtree(self._profile, ignore_errors=True)
                shutil.rmtree(outdir, ignore_errors=True)
                raise ConversionFailed(
                    f"LibreOffice did not finish converting {source.name!r} to {to} within {timeout:g} s "
                    f"and was stopped (process group {group} killed); nothing was written. Try again "
                    f"with a larger timeout_seconds, or check that the file opens"
                ) from exc
            finally:
                self._running = None
                if indir is not None:
                    shutil.rmtree(indir, ignore_errors=True)
            produced = sorted(outdir.iterdir())
            if proc.returncode != 0 or not produced:
                shutil.rmtree(outdir, ignore_errors=True)
                detail = stderr.decode(errors="replace").strip().splitlines()[-3:]
                raise ConversionFailed(
                    f"LibreOffice could not convert {source.name!r} to {to} (exit code {proc.returncode}"
                    f"{': ' + ' | '.join(detail) if detail else ''}); check that the file opens and "
                    f"that {to} suits this kind of document"
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
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def as_pdf(ws: Workspace, path: Path) -> Path:
    """The PDF to render for `path`: itself when it is a PDF, else its LibreOffice conversion."""
    if path.suffix.lower() == ".pdf":
        return path
    return ws.office.to_pdf(path)


def _family_check(source: Path, to: str) -> None:
    suffix = source.suffix.lower()
    if suffix == ".pdf":
        if to not in ("png", "jpg"):
            raise BadDocument(
                f"a PDF can only be converted to png or jpg (one image per page), not {to}; "
                f"to read its text use read_pdf"
            )
        return
    if to in ("png", "jpg"):
        return
    for family, (targets, suffixes) in TARGETS_BY_FAMILY.items():
        if suffix in suffixes and to not in targets:
            raise BadDocument(
                f"a {family} ({suffix}) cannot be converted to {to}; choose one of "
                f"{', '.join(sorted(targets | {'png', 'jpg'}))}"
            )


class ConvertDocumentArgs(Args):
    path: str
    to: Literal["pdf", "docx", "xlsx", "pptx", "odt", "ods", "odp", "csv", "html", "txt", "png", "jpg"]
    outdir: str | None = None
    page: pagespec.PageSpec = "all"
    overwrite: bool = False
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=3600,
        description=f"Seconds before LibreOffice is stopped (default ${TIMEOUT_ENV} or 120).",
    )


def convert_document(ws: Workspace, args: ConvertDocumentArgs) -> ToolOutput:
    source = ws.roots.input_file(args.path)
    outdir = ws.roots.output_dir(args.outdir) if args.outdir else source.parent
    _family_check(source, args.to)
    if args.to not in ("png", "jpg"):
        if args.page.strip().lower() != "all":
            raise BadDocument(f"page selects pages only for png / jpg; leave it 'all' for {args.to}")
        target = outdir / f"{source.stem}.{args.to}"
        _check_target(source, target, args.overwrite)
        produced = ws.office.convert(source, args.to, args.timeout_seconds)
        try:
            with atomic_output(target) as tmp:
                shutil.copyfile(produced, tmp)
        finally:
            discard(produced)
        pages = None
        if args.to == "pdf":
            with open_pdf(target) as doc:
                pages = doc.page_count
        return ToolOutput(data={"output_files": [str(target)], "pages": pages, "engine": "libreoffice"})

    engine = "pymupdf" if source.suffix.lower() == ".pdf" else "libreoffice+pymupdf"
    if source.suffix.lower() == ".pdf":
        pdf = source
    else:
        pdf = ws.office.to_pdf(source, args.timeout_seconds)
    with open_pdf(pdf) as doc:
        pages = pagespec.select_pages(args.page, doc.page_count)
        targets = [outdir / f"{source.stem}-p{n}.{args.to}" for n in pages]
        for target in targets:
            _check_target(source, target, args.overwrite)
        for number, target in zip(pages, targets):
            image = render_page(doc, number, 2.0)
            with atomic_output(target) as tmp:
                image.save(tmp, "PNG" if args.to == "png" else "JPEG", quality=90)
    return ToolOutput(data={"output_files": [str(t) for t in targets], "pages": pages, "engine": engine})


def _check_target(source: Path, target: Path, overwrite: bool) -> None:
    if target == source:
        raise BadDocument(
            f"the output {str(target)!r} would replace the source itself; give another outdir"
        )
    if target.exists() and not overwrite:
        raise BadDocument(
            f"{str(target)!r} already exists and was left as it is; pass overwrite=true to replace "
            f"it, or give another outdir"
        )


TOOLS = [
    ToolSpec(
        name="convert_document",
        description=(
            "Convert a document to another format and save the result as a file.\n\n"
            "Converts Office and OpenDocument files (DOCX, XLSX, PPTX, DOC, XLS, PPT, ODT, ODS, ODP, "
            "RTF and similar) with LibreOffice headless, and writes the output to disk. It does NOT "
            "show the result to the model: it returns the paths of the files it wrote. To look at "
            "pages, use read_document_pages_as_images or render_document_page instead.\n\n"
            "`to` is one of: pdf, docx, xlsx, pptx, odt, ods, odp, csv, html, txt, png, jpg.\n"
            "- png / jpg write one image per page, named <name>-p<N>.png (rendered at scale 2). The "
            "document is converted to PDF first, then each page is rendered. Choose pages with `page` "
            "('all', '1-3' or '2,5', 1-indexed). A PDF source can only be converted to png or jpg.\n"
            "- csv exports only the first sheet of a spreadsheet.\n"
            "- Other targets write one file, <name>.<to>.\n\n"
            "Output goes next to the source file unless `outdir` names an existing directory (inside "
            "the document roots). An existing output file is never replaced unless overwrite=true. "
            "Conversions run one at a time; each is stopped after timeout_seconds (default 120).\n\n"
            "Returns:\n"
            "    JSON with output_files (absolute paths), pages (pages written for png / jpg, the page "
            "count for pdf, otherwise null) and engine."
        ),
        args=ConvertDocumentArgs,
        run=convert_document,
    ),
]
