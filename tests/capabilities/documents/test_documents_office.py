"""Office tools read directly: read_excel, read_word, read_powerpoint and their overviews."""

from __future__ import annotations

from . import builders
from .conftest import copy_into, error, ok


def test_read_excel_reads_the_active_sheet_with_merged_ranges(call, docs_dir):
    """Cells come back as strings, the first row as headers, merged ranges listed, a picture noticed."""
    data = ok(call("read_excel", path=str(docs_dir / "sales.xlsx")))
    assert data["sheet"] == "Sales" and data["sheets"] == ["Sales", "Chart"]
    assert data["headers"] == ["Quarterly sales", "", ""]
    assert data["rows"] == [["Region", "Q1", "Q2"], ["North", "120", "135"], ["South", "98.5", "110"]]
    assert data["merged_ranges"] == ["A1:C1"]
    assert data["has_images"] is True and data["has_charts"] is False


def test_read_excel_sheet_and_range(call, docs_dir):
    """A named sheet and a cell range narrow what is read; a chart on that sheet is noticed."""
    data = ok(call("read_excel", path=str(docs_dir / "sales.xlsx"), sheet="Chart", range="A2:B3"))
    assert data["sheet"] == "Chart" and data["range"] == "A2:B3"
    assert data["headers"] == ["Q1", "3"] and data["rows"] == [["Q2", "5"]]
    assert data["has_charts"] is True and data["has_images"] is False


def test_read_excel_refuses_unknown_sheet_and_bad_range(call, docs_dir):
    """A missing sheet lists the real ones; a malformed range shows the expected form."""
    assert "'Sales'" in error(call("read_excel", path=str(docs_dir / "sales.xlsx"), sheet="Nope"), kind="not_found")
    assert "A1:D10" in error(call("read_excel", path=str(docs_dir / "sales.xlsx"), range="banana"),
                             kind="invalid_arguments")


def test_read_excel_refuses_a_corrupt_workbook(call, docs_dir, scratch):
    """A file that is not a workbook is reported as corrupt."""
    broken = scratch / "broken.xlsx"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    assert "corrupt" in error(call("read_excel", path=str(broken)), kind="failed")


def test_old_binary_formats_say_how_to_convert(call, scratch):
    """A .doc file is met with the conversion that makes it readable."""
    old = scratch / "memo.doc"
    old.write_bytes(b"\xd0\xcf\x11\xe0 old word")
    assert "convert_document" in error(call("read_word", path=str(old)), kind="invalid_arguments")


def test_read_word_headings_text_and_table_cells(call, docs_dir):
    """Headings with levels, paragraphs in order and the table's cells."""
    data = ok(call("read_word", path=str(docs_dir / "annual.docx")))
    assert data["headings"] == [{"level": 1, "text": "Annual Report"}, {"level": 2, "text": "Figures"}]
    assert data["tables"][0]["rows"] == builders.TABLE_ROWS
    assert data["text"].splitlines()[:3] == ["# Annual Report", "Sales grew in every region this year.", "## Figures"]
    assert "| North | 120 | 135 |" in data["text"]
    assert data["text"].endswith("End of report.")
    assert data["table_count"] == 1


def test_read_powerpoint_slides_and_notes(call, docs_dir):
    """Each slide's title, texts and speaker notes."""
    data = ok(call("read_powerpoint", path=str(docs_dir / "kickoff.pptx")))
    assert data["slide_count"] == 2
    first, second = data["slides"]
    assert first["title"] == "Kickoff" and "Project plan for the year" in first["texts"]
    assert first["notes"] == ""
    assert second["title"] == "Budget" and "Total: 42 units" in second["texts"]
    assert second["notes"] == "Mention the budget freeze in March."


def test_read_powerpoint_refuses_a_corrupt_file(call, scratch, docs_dir):
    """A truncated presentation is reported as corrupt, not as a crash."""
    source = copy_into(scratch, docs_dir / "kickoff.pptx")
    source.write_bytes(source.read_bytes()[:500])
    assert "corrupt" in error(call("read_powerpoint", path=str(source)))


def test_overviews_of_office_files(call, docs_dir):
    """Overviews: sheet sizes and headers, Word headings and counts, slide titles and notes."""
    sheet = ok(call("get_file_overview", path=str(docs_dir / "sales.xlsx")))
    assert sheet["type"] == "excel" and sheet["sheet_names"] == ["Sales", "Chart"]
    assert sheet["sheets"][0]["rows"] == 4 and sheet["sheets"][0]["columns"] == 3
    word = ok(call("get_file_overview", path=str(docs_dir / "annual.docx")))
    assert word["table_count"] == 1 and word["headings"][0]["text"] == "Annual Report"
    slides = ok(call("get_file_overview", path=str(docs_dir / "kickoff.pptx")))
    assert [s["title"] for s in slides["slides"]] == ["Kickoff", "Budget"]
    assert slides["slides_with_notes"] == 1


def test_overview_of_a_text_file(call, scratch):
    """Any other file is summarised as text: line count, first and last lines."""
    notes = scratch / "notes.log"
    notes.write_text("\n".join(f"line {n}" for n in range(1, 21)) + "\n")
    data = ok(call("get_file_overview", path=str(notes)))
    assert data["type"] == "text" and data["line_count"] == 20
    assert data["first_lines"][0] == "line 1" and data["last_lines"][-1] == "line 20"
