"""PDF tools: read_pdf (text, page selections, tables), OCR, rendering, and their refusals."""

from __future__ import annotations

import base64
import io
import json

import anyio
from PIL import Image

from capabilities.documents.server import call_tool

from . import builders
from .conftest import check_contract, error, ok


def test_read_pdf_returns_the_text_of_a_known_page(call, docs_dir):
    """The text of page 2 comes back under page 2, not another page's."""
    result = call("read_pdf", path=str(docs_dir / "report.pdf"), pages="2")
    data = ok(result)
    assert data["page_count"] == 3
    assert [p["page"] for p in data["pages"]] == [2]
    assert data["pages"][0]["text"].strip() == builders.page_text(2)
    characters = len(data["pages"][0]["text"])
    summary, whole = result.content[0].text.split("\n")
    assert summary == f"read_pdf: report.pdf, page 2 of 3, {characters} characters"
    assert json.loads(whole) == data  # the page's text reaches a client that reads only text


def test_read_pdf_page_selections(call):
    """'all', lists, mixed and open-ended ranges select exactly the pages they name (relative path)."""
    def pages(spec):
        return [p["page"] for p in ok(call("read_pdf", path="long.pdf", pages=spec))["pages"]]

    assert pages("all") == list(range(1, 51))
    assert pages("1-5") == [1, 2, 3, 4, 5]
    assert pages("1,3,7") == [1, 3, 7]
    assert pages("1-3,7") == [1, 2, 3, 7]
    assert pages("48-") == [48, 49, 50]


def test_read_pdf_extracts_table_cells(call, docs_dir):
    """A bordered table's cells come back row by row."""
    data = ok(call("read_pdf", path=str(docs_dir / "table.pdf"), extract_tables=True))
    tables = data["pages"][0]["tables"]
    assert len(tables) == 1
    assert tables[0]["rows"] == builders.TABLE_ROWS
    assert (tables[0]["row_count"], tables[0]["col_count"]) == (3, 3)


def test_read_pdf_leaves_tables_out_unless_asked(call, docs_dir):
    """Table detection costs time; it runs only when extract_tables is true."""
    data = ok(call("read_pdf", path=str(docs_dir / "table.pdf")))
    assert "tables" not in data["pages"][0]
    assert "North" in data["pages"][0]["text"]


def test_read_pdf_of_a_scan_suggests_ocr_pdf(call, docs_dir):
    """A PDF without selectable text says to use ocr_pdf instead of returning silence."""
    data = ok(call("read_pdf", path=str(docs_dir / "scanned.pdf")))
    assert data["pages"][0]["text"].strip() == ""
    assert "ocr_pdf" in data["hint"]


def test_ocr_pdf_reads_a_scanned_page(call, docs_dir):
    """Tesseract reads the picture of text on the scanned page."""
    data = ok(call("ocr_pdf", path=str(docs_dir / "scanned.pdf"), pages="1"))
    assert data["pages"][0]["page"] == 1
    assert builders.OCR_TEXT in " ".join(data["pages"][0]["text"].split())


def test_ocr_image_reads_known_text(call, docs_dir):
    """OCR of an image of known text returns that text."""
    data = ok(call("ocr_image", path=str(docs_dir / "invoice.png")))
    assert builders.OCR_TEXT in " ".join(data["text"].split())


def test_ocr_refuses_an_unknown_language(call, docs_dir):
    """A language without Tesseract data is reported with how to get it."""
    message = error(call("ocr_image", path=str(docs_dir / "invoice.png"), lang="xyz"), kind="invalid_arguments")
    assert "tesseract-ocr-xyz" in message


def test_missing_tesseract_says_how_to_install(call, docs_dir, monkeypatch, tmp_path):
    """Without tesseract on PATH, OCR is `unavailable` with `make install`, not a traceback."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "make install" in error(call("ocr_image", path=str(docs_dir / "invoice.png")), kind="unavailable")


def test_encrypted_pdf_is_refused_clearly(call, docs_dir):
    """A password-protected PDF is named as such rather than read as empty."""
    assert "encrypted" in error(call("read_pdf", path=str(docs_dir / "locked.pdf")), kind="failed")


def test_corrupt_pdf_is_refused_clearly(call, docs_dir):
    """A damaged file is reported as corrupt, with no traceback."""
    message = error(call("read_pdf", path=str(docs_dir / "broken.pdf")))
    assert "corrupt" in message


def test_page_out_of_range_names_the_page_count(call, docs_dir):
    """Asking for page 9 of a 3-page PDF says how many pages there are."""
    result = call("read_pdf", path=str(docs_dir / "report.pdf"), pages="2,9")
    message = error(result, kind="invalid_arguments")
    assert "page 9 is out of range" in message and "3 pages" in message
    assert result.structured_content["error"]["field"] == "pages"
    assert "3 pages" in error(call("render_document_page", path=str(docs_dir / "report.pdf"), page=4))
    assert "3 pages" in error(call("read_pdf", path=str(docs_dir / "report.pdf"), pages="4-"))


def test_malformed_page_selection_is_refused_before_opening(call):
    """A selection like '3-1' or 'first' is refused by the argument check, naming the field."""
    assert "pages" in error(call("read_pdf", path="missing.pdf", pages="3-1"), kind="invalid_arguments")
    assert "pages" in error(call("read_pdf", path="missing.pdf", pages="first"), kind="invalid_arguments")


def _image(result, index=1) -> Image.Image:
    block = result.content[index]
    assert block.type == "image"
    return Image.open(io.BytesIO(base64.b64decode(block.data)))


def test_render_page_dimensions_follow_the_scale(call, docs_dir):
    """A 612x792 pt page renders at 612x792 px at scale 1 and 918x1188 at scale 1.5."""
    result = call("render_document_page", path=str(docs_dir / "report.pdf"), page=2, scale=1.0)
    data = ok(result)
    assert (data["width"], data["height"]) == (612, 792)
    assert _image(result, 1 + data["image_index"]).size == (612, 792)
    assert _image(call("render_document_page", path=str(docs_dir / "report.pdf"), scale=1.5)).size == (918, 1188)


def test_render_page_scales_big_renders_down_to_1568(call, docs_dir):
    """At scale 2 the 1584 px tall page is delivered at 1568 px, as every model accepts."""
    result = call("render_document_page", path=str(docs_dir / "report.pdf"), scale=2.0)
    data = ok(result)
    assert (data["full_width"], data["full_height"]) == (1224, 1584)
    assert data["scaled_down"] is True
    assert max(_image(result).size) == 1568


def test_render_refuses_image_files(call, docs_dir):
    """Images are pointed to read_image rather than rendered as documents."""
    assert "read_image" in error(call("render_document_page", path=str(docs_dir / "invoice.png")),
                                 kind="invalid_arguments")


def test_thumbnails_cover_the_first_pages(call, docs_dir):
    """Thumbnails: one small image per page, at most max_pages, each listed with its image."""
    result = call("render_document_thumbnail", path=str(docs_dir / "long.pdf"), max_pages=3)
    data = ok(result)
    assert [p["page"] for p in data["pages"]] == [1, 2, 3]
    assert len(result.content) == 4
    for page in data["pages"]:
        image = _image(result, 1 + page["image_index"])
        assert max(image.size) == 256 and image.size == (page["width"], page["height"])


def test_pages_as_images_caps_at_max_pages(call, docs_dir):
    """Pages beyond max_pages are dropped and listed, so the context is not flooded."""
    result = call("read_document_pages_as_images", path=str(docs_dir / "long.pdf"), pages="10-", scale=0.5, max_pages=4)
    data = ok(result)
    assert [p["page"] for p in data["pages"]] == [10, 11, 12, 13]
    assert data["dropped_pages"] == list(range(14, 51))
    assert len(result.content) == 1 + 4
    assert _image(result).size == (306, 396)
    assert result.content[0].text.split("\n")[0] == ("read_document_pages_as_images: long.pdf, pages 10-13 of 50; "
                                      "pages 14-50 dropped (over max_pages=4)")


def test_file_overview_of_a_pdf(call, docs_dir):
    """The PDF overview has the page count, page size, text previews and table presence."""
    data = ok(call("get_file_overview", path=str(docs_dir / "table.pdf")))
    assert data["type"] == "pdf" and data["page_count"] == 1
    assert data["has_tables"] is True
    assert data["pages"][0]["width"] == 612.0
    assert "Quarterly figures" in data["pages"][0]["text_preview"]


def test_concurrent_calls_on_one_pdf_agree_with_serial_ones(workspace, docs_dir):
    """Parallel calls (as from Promise.all) run in worker threads and each returns its own page."""
    path = str(docs_dir / "long.pdf")

    async def both():
        results = {}

        async def read(page):
            results[page] = await call_tool(workspace, "read_pdf", {"path": path, "pages": str(page)})

        async with anyio.create_task_group() as group:
            for page in range(1, 21):
                group.start_soon(read, page)
                group.start_soon(call_tool, workspace, "render_document_page", {"path": path, "page": page, "scale": 0.3})
        return results

    results = anyio.run(both)
    for page, result in results.items():
        check_contract("read_pdf", result)
        assert ok(result)["pages"][0]["text"].startswith(builders.page_text(page))
