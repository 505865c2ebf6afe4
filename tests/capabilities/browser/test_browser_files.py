"""upload attaches files from the session's own folders only; download saves into its Downloads."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

TAB = "files"


def nav(url: str) -> dict:
    return {"type": "navigate", "params": {"url": url}}


def test_upload_attaches_a_file_from_the_data_dir(run_page, pages_server, browser_desktop):
    """A file under the session's data directory reaches the page's file input, content and all."""
    path = Path(browser_desktop.data_dir) / f"upload-{uuid.uuid4().hex[:6]}.txt"
    path.write_text("hello upload")
    try:
        run = run_page([nav(pages_server.url("/browser_files.html")),
                        {"type": "upload", "params": {"selector": "#file", "paths": [str(path)]}},
                        {"type": "evaluate", "params": {"script": "readFiles()"}}], tab=TAB)
    finally:
        path.unlink()
    assert not run.is_error, run.summary
    assert run.result(2) == {"uploaded": [path.name]}
    assert run.result(3) == [{"name": path.name, "text": "hello upload"}]


def test_upload_from_outside_the_allowed_folders_is_refused_before_anything_runs(run_page, pages_server):
    """A path outside the data directory and home is refused, and step 1 has no effect."""
    run_page([{"type": "setContent", "params": {"html": "<p>clean</p>"}}], tab=TAB)
    run = run_page([{"type": "evaluate", "params": {"script": "window.__ran = true"}},
                    {"type": "upload", "params": {"selector": "#file", "paths": ["/etc/passwd"]}}], tab=TAB)
    assert run.is_error and run.results == []
    assert "step 2 (upload): '/etc/passwd' is outside the files a page may receive" in run.summary
    after = run_page([{"type": "evaluate", "params": {"script": "window.__ran === true"}}], tab=TAB)
    assert after.result(1) is False


def test_download_is_saved_in_the_session_downloads(run_page, pages_server, browser_desktop):
    """download clicks, waits, and saves the file in <data>/chrome/Downloads as the desktop user."""
    run = run_page([nav(pages_server.url("/browser_files.html")),
                    {"type": "download", "params": {"selector": "#get"}}], tab=TAB)
    assert not run.is_error, run.summary
    saved = run.result(2)
    path = Path(saved["path"])
    try:
        assert path.parent == Path(browser_desktop.info.downloads_dir)
        assert saved["suggested_name"] == "report.txt" and path.name.startswith("report")
        assert path.read_text() == "downloaded content\n" and saved["size"] == path.stat().st_size
        if os.geteuid() == 0:
            assert path.stat().st_uid == browser_desktop.info.uid
    finally:
        path.unlink(missing_ok=True)
