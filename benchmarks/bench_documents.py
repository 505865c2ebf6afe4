"""Benchmark the documents server against the same work done directly in this process.

- read_pdf of a 100-page text PDF through the real server over stdio (pages per second), beside
  the same pymupdf calls made directly (open, get_text of every page), and the tool run
  in-process without MCP (validation, roots, structured result).
- render_document_page of one page at scale 2, beside pymupdf's get_pixmap at scale 2 plus a
  PNG encode made directly (the tool also scales the 1584 px page to 1568 px for the model).
- convert_document DOCX -> PDF through the server, beside `soffice --convert-to pdf` run
  directly with a warm profile of its own.

Medians of several runs, the runs of a pair interleaved, because this machine is noisy.

Usage: .venv/bin/python benchmarks/bench_documents.py [--quick] [--pages N]
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import docx
import pymupdf
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from capabilities.documents.libreoffice import OfficeConverter  # noqa: E402
from capabilities.documents.paths import Roots  # noqa: E402
from capabilities.documents.server import call_tool  # noqa: E402
from capabilities.documents.tooling import Workspace  # noqa: E402


def build_pdf(path: Path, pages: int) -> None:
    """A text PDF: each page holds ~40 lines of prose, like a report."""
    doc = pymupdf.open()
    line = "The quarterly figures show steady growth across every region of the company. "
    for number in range(1, pages + 1):
        page = doc.new_page(width=612, height=792)
        page.insert_textbox(pymupdf.Rect(54, 54, 558, 738), f"Page {number}\n" + line * 40, fontsize=10)
    doc.save(path)
    doc.close()


def build_docx(path: Path) -> None:
    document = docx.Document()
    document.add_heading("Benchmark report", level=1)
    for n in range(30):
        document.add_paragraph(f"Paragraph {n}: " + "words that fill a page of a document. " * 8)
    document.save(path)


def direct_read(path: Path) -> int:
    with pymupdf.open(path) as doc:
        return sum(len(page.get_text("text")) for page in doc)


def direct_render(path: Path) -> int:
    with pymupdf.open(path) as doc:
        pixmap = doc[0].get_pixmap(matrix=pymupdf.Matrix(2, 2), alpha=False)
        image = Image.frombytes("RGB", (pixmap.width, pixmap.height), pixmap.samples)
    buffer = io.BytesIO()
    image.save(buffer, "PNG", compress_level=1)
    return len(buffer.getvalue())


def direct_convert(source: Path, outdir: Path, profile: Path) -> None:
    subprocess.run(
        ["soffice", f"-env:UserInstallation={profile.as_uri()}", "--headless", "--norestore",
         "--convert-to", "pdf", "--outdir", str(outdir), str(source)],
        check=True, capture_output=True, timeout=300,
    )


def timed(func, *args) -> float:
    started = time.perf_counter()
    func(*args)
    return time.perf_counter() - started


async def atimed(func, *args) -> float:
    started = time.perf_counter()
    result = await func(*args)
    elapsed = time.perf_counter() - started
    if getattr(result, "is_error", False):
        raise SystemExit(f"tool failed: {result.content[0].text}")
    return elapsed


def report(name: str, ours: list[float], base: list[float], base_name: str, extra: str = "") -> None:
    a, b = statistics.median(ours), statistics.median(base)
    print(f"{name:<34} {a * 1000:9.1f} ms   {base_name:<30} {b * 1000:9.1f} ms   ratio {a / b:5.2f}x {extra}")


async def main(quick: bool, pages: int) -> None:
    runs = 3 if quick else 9
    conversions = 1 if quick else 3
    work = Path(tempfile.mkdtemp(prefix="bench-documents-"))
    try:
        pdf, source = work / "report.pdf", work / "report.docx"
        build_pdf(pdf, pages)
        build_docx(source)
        env = {"CODEDESK_DATA": str(work), "CODEDESK_DOCUMENT_ROOTS": str(work)}
        params = StdioServerParameters(command=sys.executable, args=["-m", "capabilities.documents"], env=env, cwd=str(REPO))
        converter = OfficeConverter()
        workspace = Workspace(office=converter, fixed_roots=Roots((work,)))
        try:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                call = session.call_tool
                await call("read_pdf", {"path": str(pdf), "pages": "1"})  # warm up

                ours, inproc, base = [], [], []
                for _ in range(runs):
                    ours.append(await atimed(call, "read_pdf", {"path": str(pdf)}))
                    inproc.append(await atimed(call_tool, workspace, "read_pdf", {"path": str(pdf)}))
                    base.append(timed(direct_read, pdf))
                rate = pages / statistics.median(ours)
                report(f"read_pdf {pages} pages (stdio)", ours, base, "pymupdf get_text direct", f"({rate:.0f} pages/s)")
                report(f"read_pdf {pages} pages (in-process)", inproc, base, "pymupdf get_text direct")

                ours, base = [], []
                for _ in range(runs):
                    ours.append(await atimed(call, "render_document_page", {"path": str(pdf), "page": 1, "scale": 2.0}))
                    base.append(timed(direct_render, pdf))
                report("render_document_page scale 2", ours, base, "get_pixmap x2 + PNG direct")

                ours, base = [], []
                profile = work / "direct-profile"
                direct_convert(source, work / "warm", profile)  # both sides start with a warm profile
                await call("convert_document", {"path": str(source), "to": "odt", "outdir": str(work)})
                for n in range(conversions):
                    out = work / f"run-{n}"
                    out.mkdir()
                    ours.append(await atimed(call, "convert_document", {"path": str(source), "to": "pdf", "outdir": str(out)}))
                    base.append(timed(direct_convert, source, work / f"direct-{n}", profile))
                report("convert_document docx -> pdf", ours, base, "soffice --convert-to direct")
        finally:
            converter.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, for a smoke test")
    parser.add_argument("--pages", type=int, default=100, help="pages of the text PDF (default 100)")
    options = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    anyio.run(main, options.quick, options.pages)
