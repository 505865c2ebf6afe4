"""Files in and out of pages: `upload` attaches files to a file input, `download` saves what a
click downloads into the session's Downloads folder (`Downloads`).

Uploads read only from the session's data directory or the desktop user's home (after following
links); `refuse_uploads` checks a whole request before anything runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from playwright.async_api import CDPSession, Page

from capabilities.session import SessionInfo

from . import page_ops as ops
from .errors import BrowserError, NotFound, Refused, TimedOut
from .page_reading import shown, target
from .page_results import DownloadResult, UploadResult

DOWNLOAD_TIMEOUT_MS = 45_000


def upload_roots(info: SessionInfo) -> list[Path]:
    return [Path(info.data_dir).resolve(), Path(info.home).resolve()]


def refuse_uploads(operations: list[Any], info: SessionInfo) -> BrowserError | None:
    """Why the request's uploads cannot run (`Refused`: a path outside the roots; `NotFound`:
    no such file), every problem named, or None."""
    roots = upload_roots(info)
    problems = []
    first: tuple[type[BrowserError], int, str] | None = None
    for number, op in enumerate(operations, start=1):
        if not isinstance(op, ops.Upload):
            continue
        for index, raw in enumerate(op.params.paths):
            path = Path(raw).expanduser()
            resolved = path.resolve()
            if not any(resolved.is_relative_to(root) for root in roots):
                problems.append(
                    f"step {number} (upload): {raw!r} is outside the files a page may receive; "
                    f"use a file under {roots[0]} or {roots[1]}"
                )
                first = first or (Refused, number, f"params.paths.{index}")
            elif not resolved.is_file():
                problems.append(f"step {number} (upload): no file at {raw!r}")
                first = first or (NotFound, number, f"params.paths.{index}")
    if first is None:
        return None
    kind, step, field = first
    return kind("; ".join(problems), step=step, field=field,
                hint="only files in the session's data directory or the desktop user's home can be uploaded")


async def upload(page: Page, p: ops.UploadParams) -> UploadResult:
    files = [str(Path(raw).expanduser().resolve()) for raw in p.paths]
    await page.set_input_files(target(p), files, timeout=ops.CLICK_TIMEOUT_MS)
    return UploadResult(uploaded=[Path(f).name for f in files])


class Downloads:
    """Chromium's downloads, saved straight into the session's Downloads folder.

    Chromium runs as the desktop user and cannot write where Playwright keeps its own download
    artifacts, so the browser is told (over one browser-level DevTools session) to save into
    `<data>/chrome/Downloads`, as it would for the person, and to report progress. One download
    step at a time.
    """

    def __init__(self, cdp: CDPSession, info: SessionInfo) -> None:
        self._cdp = cdp
        self._info = info
        self.folder = Path(info.downloads_dir)
        self._lock = anyio.Lock()
        self._begun: list[dict[str, Any]] = []
        self._finished: dict[str, dict[str, Any]] = {}
        self._changed = anyio.Event()

    async def start(self) -> None:
        if not self.folder.is_dir():
            self.folder.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0 and self._info.uid != 0:
                os.chown(self.folder, self._info.uid, self._info.gid)
        self._cdp.on("Browser.downloadWillBegin", self._on_begin)
        self._cdp.on("Browser.downloadProgress", self._on_progress)
        await self._cdp.send("Browser.setDownloadBehavior", {
            "behavior": "allow", "downloadPath": str(self.folder), "eventsEnabled": True,
        })

    def _on_begin(self, params: dict[str, Any]) -> None:
        self._begun.append(params)
        self._changed.set()

    def _on_progress(self, params: dict[str, Any]) -> None:
        if params.get("state") in ("completed", "canceled"):
            self._finished[params["guid"]] = params
            self._changed.set()

    async def _next(self, predicate) -> Any:
        while (found := predicate()) is None:
            self._changed = anyio.Event()
            await self._changed.wait()
        return found

    async def fetch(self, page: Page, p: ops.DownloadParams) -> DownloadResult:
        """Click the element and wait for the download it starts; returns where it was saved."""
        async with self._lock:
            self._begun.clear()
            await page.click(target(p), timeout=ops.CLICK_TIMEOUT_MS)
            try:
                with anyio.fail_after(DOWNLOAD_TIMEOUT_MS / 1000):
                    begun = await self._next(lambda: self._begun[0] if self._begun else None)
                    done = await self._next(lambda: self._finished.pop(begun["guid"], None))
            except TimeoutError:
                raise TimedOut(
                    f"no download finished within {DOWNLOAD_TIMEOUT_MS // 1000} s of clicking "
                    f"{shown(p)!r}; check that it is a download link (readPage shows its href)"
                ) from None
        if done["state"] != "completed":
            raise BrowserError(f"the download of {begun['url']} was canceled")
        # Chromium picks the final name ("report (1).txt" when "report.txt" exists).
        path = Path(done.get("filePath") or self.folder / (begun.get("suggestedFilename") or "download"))
        return DownloadResult(path=str(path), size=path.stat().st_size,
                              suggested_name=begun.get("suggestedFilename", ""), url=begun["url"])
