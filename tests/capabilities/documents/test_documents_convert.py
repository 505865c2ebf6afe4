"""LibreOffice conversions and Office rendering: outputs, refusals, and a hung conversion.

LibreOffice takes seconds per start here, so the number of real conversions is kept small.
"""

from __future__ import annotations

import base64
import io
import os
import re
import stat
import time

import anyio
import psutil
import pytest
from PIL import Image

from capabilities.documents.libreoffice import OfficeConverter, discard, office_user
from capabilities.documents.paths import Roots
from capabilities.documents.server import call_tool
from capabilities.documents.tooling import Workspace

from .conftest import check_contract, copy_into, error, ok


def convert(ws: Workspace, arguments: dict):
    """convert_document on a workspace of the test's own, its contract checked."""
    result = anyio.run(call_tool, ws, "convert_document", arguments)
    check_contract("convert_document", result)
    return result


def test_docx_to_pdf_writes_next_to_the_source(call, docs_dir, scratch):
    """The PDF lands beside the DOCX, its page count is reported and its text is the document's."""
    source = copy_into(scratch, docs_dir / "annual.docx")
    data = ok(call("convert_document", path=str(source), to="pdf"))
    assert data["output_files"] == [str(scratch / "annual.pdf")]
    assert data["page_count"] == 1 and data["engine"] == "libreoffice" and "pages" not in data
    text = ok(call("read_pdf", path=data["output_files"][0]))["pages"][0]["text"]
    assert "Annual Report" in text and "North" in text

    before = (scratch / "annual.pdf").stat().st_mtime_ns
    message = error(call("convert_document", path=str(source), to="pdf"), kind="refused")
    assert "already exists" in message and "overwrite=true" in message
    assert (scratch / "annual.pdf").stat().st_mtime_ns == before


def test_xlsx_to_csv_exports_the_first_sheet(call, docs_dir, scratch):
    """CSV of a workbook holds the first sheet's rows, written into the given outdir."""
    data = ok(call("convert_document", path=str(docs_dir / "sales.xlsx"), to="csv", outdir=str(scratch)))
    assert data["output_files"] == [str(scratch / "sales.csv")]
    lines = (scratch / "sales.csv").read_text().splitlines()
    assert lines == ["Quarterly sales,,", "Region,Q1,Q2", "North,120,135", "South,98.5,110"]


def test_render_a_docx_page_and_convert_it_to_png(call, docs_dir, scratch):
    """A DOCX page renders at its paper size; converting it to png reuses the same PDF."""
    result = call("render_document_page", path=str(docs_dir / "annual.docx"), page=1, scale=1.0)
    data = ok(result)
    assert data["page_count"] == 1
    assert (data["width"], data["height"]) in ((612, 792), (595, 842))  # Letter or A4
    image = Image.open(io.BytesIO(base64.b64decode(result.content[1].data)))
    assert image.size == (data["width"], data["height"])

    started = time.monotonic()
    png = ok(call("convert_document", path=str(docs_dir / "annual.docx"), to="png", outdir=str(scratch)))
    assert time.monotonic() - started < 60
    assert png["output_files"] == [str(scratch / "annual-p1.png")] and png["pages"] == [1]
    assert "page_count" not in png
    with Image.open(scratch / "annual-p1.png") as page:
        assert page.size == (data["width"] * 2, data["height"] * 2)


def test_presentation_pages_as_images(call, docs_dir):
    """Each slide of a PPTX comes back as a landscape image."""
    result = call("read_document_pages_as_images", path=str(docs_dir / "kickoff.pptx"), scale=0.5)
    data = ok(result)
    assert [p["page"] for p in data["pages"]] == [1, 2]
    assert all(p["width"] > p["height"] for p in data["pages"])
    assert len(result.content) == 3


def test_pdf_to_png_overwrites_only_when_asked(call, docs_dir, scratch):
    """A PDF's pages become images; a second run is refused unless overwrite is true."""
    source = copy_into(scratch, docs_dir / "report.pdf")
    data = ok(call("convert_document", path=str(source), to="jpg", page="2,3"))
    assert data["output_files"] == [str(scratch / "report-p2.jpg"), str(scratch / "report-p3.jpg")]
    assert data["engine"] == "pymupdf"
    assert "already exists" in error(call("convert_document", path=str(source), to="jpg", page="2"))
    again = ok(call("convert_document", path=str(source), to="jpg", page="2", overwrite=True))
    assert again["output_files"] == [str(scratch / "report-p2.jpg")]


def test_conversions_that_cannot_work_are_refused_up_front(call, docs_dir):
    """PDF to DOCX, a spreadsheet to DOCX, pages for a non-image target, and an unknown format."""
    assert "only be converted to png or jpg" in error(
        call("convert_document", path=str(docs_dir / "report.pdf"), to="docx"), kind="invalid_arguments")
    assert "spreadsheet" in error(call("convert_document", path=str(docs_dir / "sales.xlsx"), to="docx"),
                                  kind="invalid_arguments")
    assert "png / jpg" in error(call("convert_document", path=str(docs_dir / "annual.docx"), to="pdf", page="1"),
                                kind="invalid_arguments")
    message = error(call("convert_document", path=str(docs_dir / "annual.docx"), to="rtf"), kind="invalid_arguments")
    assert "to" in message and "'pdf'" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="the switch of user is made by a root server only")
def test_a_root_server_runs_libreoffice_as_the_unprivileged_user(office, call, docs_dir, scratch):
    """LibreOffice parses untrusted files: run by a root server, it runs as the desktop user
    (its output is theirs), on a copy of the source, so even a file only root may read converts."""
    user = office_user()
    assert user is not None and user.uid != 0
    produced = office.convert(docs_dir / "annual.docx", "odt")
    try:
        assert produced.stat().st_uid == user.uid
    finally:
        discard(produced)
    private = copy_into(scratch, docs_dir / "annual.docx")
    private.chmod(0o600)
    os.chown(private, 0, 0)
    data = ok(call("convert_document", path=str(private), to="odt"))
    assert data["output_files"] == [str(scratch / "annual.odt")]
    assert (scratch / "annual.odt").stat().st_size > 0


def test_missing_libreoffice_says_how_to_install(docs_dir, scratch):
    """Without soffice, the error is `unavailable` and its hint names `make install`."""
    converter = OfficeConverter(soffice="/nonexistent/soffice")
    try:
        ws = Workspace(office=converter, fixed_roots=Roots((docs_dir,)))
        result = convert(ws, {"path": str(docs_dir / "annual.docx"), "to": "odt", "outdir": str(scratch)})
        error(result, kind="unavailable")
        assert "make install" in result.structured_content["error"]["hint"]
    finally:
        converter.close()


HANG_ONCE = """#!/bin/sh
# The first conversion hangs (ignoring SIGTERM, with a child of its own); later ones are real.
if [ ! -e "$0.hung" ]; then
  touch "$0.hung"
  trap '' TERM
  sleep 300 &
  echo $! > "$0.child"
  wait
fi
exec {soffice} "$@"
"""


@pytest.fixture
def hang_once_soffice(tmp_path):
    script = tmp_path / "soffice"
    script.write_text(HANG_ONCE.format(soffice="/usr/bin/soffice"))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_hung_conversion_is_killed_and_the_next_one_works(hang_once_soffice, docs_dir, scratch):
    """A conversion past its timeout is a `timeout` error, killed with its whole process group;
    the next succeeds."""
    # The script lives in a folder only this process may enter: run it as ourselves.
    converter = OfficeConverter(soffice=str(hang_once_soffice), user=None)
    ws = Workspace(office=converter, fixed_roots=Roots((docs_dir,)))
    args = {"path": str(docs_dir / "annual.docx"), "to": "odt", "outdir": str(scratch)}
    try:
        started = time.monotonic()
        message = error(convert(ws, {**args, "timeout_seconds": 2}), kind="timeout")
        assert time.monotonic() - started < 30
        assert "within 2 s" in message and "nothing was written" in message
        group = int(re.search(r"process group (\d+) killed", message).group(1))
        child = int((hang_once_soffice.parent / "soffice.child").read_text())
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the hung conversion's child survived"
        assert not any(_alive(p.pid) for p in psutil.process_iter() if _pgid(p.pid) == group)
        assert list(scratch.iterdir()) == []

        data = ok(convert(ws, args))
        assert data["output_files"] == [str(scratch / "annual.odt")]
        assert (scratch / "annual.odt").stat().st_size > 0
    finally:
        converter.close()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


LOGGING_SOFFICE = """#!/bin/sh
# Real LibreOffice, with each run's start, end and arguments logged.
echo "start $$ $*" >> "$0.log"
{soffice} "$@"
status=$?
echo "end $$" >> "$0.log"
exit $status
"""


def test_conversions_run_one_at_a_time_with_their_own_profile(tmp_path, docs_dir, scratch):
    """Two conversions asked for at once run one after the other, with the converter's own profile."""
    script = tmp_path / "soffice"
    script.write_text(LOGGING_SOFFICE.format(soffice="/usr/bin/soffice"))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    converter = OfficeConverter(soffice=str(script), user=None)  # as above
    ws = Workspace(office=converter, fixed_roots=Roots((docs_dir,)))

    async def both():
        results = []

        async def convert(source, to):
            results.append(await call_tool(ws, "convert_document", {"path": str(source), "to": to, "outdir": str(scratch)}))

        async with anyio.create_task_group() as group:
            group.start_soon(convert, docs_dir / "annual.docx", "odt")
            group.start_soon(convert, docs_dir / "sales.xlsx", "ods")
        return results

    try:
        for result in anyio.run(both):
            check_contract("convert_document", result)
            ok(result)
    finally:
        converter.close()
    events = [line.split(" ", 2) for line in (tmp_path / "soffice.log").read_text().splitlines()]
    assert [e[0] for e in events] == ["start", "end", "start", "end"]
    assert events[0][1] == events[1][1] and events[2][1] == events[3][1]
    profiles = {re.search(r"-env:UserInstallation=(\S+)", e[2]).group(1) for e in events if e[0] == "start"}
    assert len(profiles) == 1 and "codedesk-office-" in profiles.pop()
    assert sorted(p.name for p in scratch.iterdir()) == ["annual.odt", "sales.ods"]
