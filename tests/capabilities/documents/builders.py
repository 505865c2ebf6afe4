"""Real documents of every kind the documents tools read, built here with the same libraries
a user's files come from (pymupdf, python-docx, openpyxl, python-pptx, Pillow).
"""

from __future__ import annotations

from pathlib import Path

import docx
import openpyxl
import pptx
import pymupdf
from openpyxl.chart import BarChart, Reference
from openpyxl.drawing.image import Image as SheetImage
from PIL import Image, ImageDraw, ImageFont
from pptx.util import Inches

TABLE_ROWS = [["Region", "Q1", "Q2"], ["North", "120", "135"], ["South", "98", "110"]]
OCR_TEXT = "INVOICE 4721 PAID"
NEEDLE = "zebra"
NEEDLE_PAGES = [3, 17, 29, 44]


def page_text(number: int) -> str:
    return f"This is page {number} of the report."


def text_pdf(path: Path, pages: int = 3) -> Path:
    """A US-letter PDF whose page N says `page_text(N)`."""
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page(width=612, height=792)
        page.insert_text((72, 72), page_text(number), fontsize=12)
        if number in NEEDLE_PAGES:
            page.insert_text((72, 100), f"A {NEEDLE} crossed the road.", fontsize=12)
    doc.save(path)
    doc.close()
    return path


def table_pdf(path: Path) -> Path:
    """One page with a heading and a bordered 3x3 table (`TABLE_ROWS`)."""
    cells = "".join(
        "<tr>" + "".join(f"<td>{value}</td>" for value in row) + "</tr>" for row in TABLE_ROWS
    )
    story = pymupdf.Story(
        html=f"<h1>Quarterly figures</h1><table>{cells}</table>",
        user_css="table {border-collapse: collapse;} td {border: 1px solid black; padding: 4px;}",
    )
    writer = pymupdf.DocumentWriter(str(path))
    mediabox = pymupdf.paper_rect("letter")
    more = True
    while more:
        device = writer.begin_page(mediabox)
        more, _ = story.place(mediabox + (72, 72, -72, -72))
        story.draw(device)
        writer.end_page()
    writer.close()
    return path


def text_image(path: Path, text: str = OCR_TEXT, size: tuple[int, int] = (900, 200)) -> Path:
    """Black text on white, large enough for Tesseract to read reliably."""
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    draw.text((40, 60), text, fill="black", font=ImageFont.load_default(size=64))
    image.save(path)
    return path


def scanned_pdf(path: Path, image: Path) -> Path:
    """A PDF whose only page is a picture of text: no selectable text, like a scan."""
    doc = pymupdf.open()
    page = doc.new_page(width=612, height=792)
    page.insert_image(pymupdf.Rect(36, 72, 576, 192), filename=str(image))
    doc.save(path)
    doc.close()
    return path


def scanned_pages(path: Path, image: Path, pages: int) -> Path:
    """A scan of `pages` pages, each a full-width picture of text: seconds of OCR in all."""
    doc = pymupdf.open()
    for _ in range(pages):
        page = doc.new_page(width=612, height=792)
        for top in range(36, 720, 120):
            page.insert_image(pymupdf.Rect(36, top, 576, top + 110), filename=str(image))
    doc.save(path)
    doc.close()
    return path


def big_csv(path: Path, rows: int = 60_000) -> Path:
    """A spreadsheet as CSV that LibreOffice takes many seconds to lay out as a PDF."""
    with path.open("w", encoding="utf-8") as out:
        for row in range(rows):
            out.write(f"{row},name {row},{row * 3.5},lorem ipsum dolor sit amet,{row % 7},{'x' * 20}\n")
    return path


def encrypted_pdf(path: Path) -> Path:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret")
    doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="owner", user_pw="user")
    doc.close()
    return path


def corrupt_file(path: Path) -> Path:
    path.write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage that is not a PDF\n" * 3)
    return path


def workbook(path: Path, picture: Path) -> Path:
    """Two sheets: 'Sales' (active, merged title A1:C1, data, a picture) and 'Chart' (a bar chart)."""
    book = openpyxl.Workbook()
    sales = book.active
    sales.title = "Sales"
    sales.append(["Quarterly sales", None, None])
    sales.merge_cells("A1:C1")
    sales.append(["Region", "Q1", "Q2"])
    sales.append(["North", 120, 135])
    sales.append(["South", 98.5, 110])
    sales.add_image(SheetImage(str(picture)), "E2")
    chart_sheet = book.create_sheet("Chart")
    chart_sheet.append(["Q", "Value"])
    for quarter, value in (("Q1", 3), ("Q2", 5)):
        chart_sheet.append([quarter, value])
    chart = BarChart()
    chart.add_data(Reference(chart_sheet, min_col=2, min_row=1, max_row=3), titles_from_data=True)
    chart_sheet.add_chart(chart, "D2")
    book.active = 0
    book.save(path)
    return path


def word_document(path: Path) -> Path:
    """A heading, a paragraph, a sub-heading and a 3x3 table (`TABLE_ROWS`)."""
    document = docx.Document()
    document.add_heading("Annual Report", level=1)
    document.add_paragraph("Sales grew in every region this year.")
    document.add_heading("Figures", level=2)
    table = document.add_table(rows=len(TABLE_ROWS), cols=3)
    for r, row in enumerate(TABLE_ROWS):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("End of report.")
    document.save(path)
    return path


def presentation(path: Path) -> Path:
    """Two slides with titles; the second has speaker notes."""
    deck = pptx.Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[0])
    first.shapes.title.text = "Kickoff"
    first.placeholders[1].text = "Project plan for the year"
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Budget"
    box = second.shapes.add_textbox(Inches(1), Inches(2), Inches(4), Inches(1))
    box.text_frame.text = "Total: 42 units"
    second.notes_slide.notes_text_frame.text = "Mention the budget freeze in March."
    deck.save(path)
    return path


def one_of_each(folder: Path) -> Path:
    """One real file of each kind the documents contract's good calls read (`GOOD`)."""
    text_pdf(folder / "report.pdf", pages=3)
    table_pdf(folder / "table.pdf")
    text_image(folder / "invoice.png")
    scanned_pdf(folder / "scanned.pdf", folder / "invoice.png")
    workbook(folder / "sales.xlsx", folder / "invoice.png")
    word_document(folder / "annual.docx")
    presentation(folder / "kickoff.pptx")
    return folder
