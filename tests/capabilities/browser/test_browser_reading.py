"""Reading a page without screenshots: readPage, find, getText, refs in later steps, formInput, tabs."""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, urlsplit

TAB = "reading"


def nav(url: str) -> dict:
    return {"type": "navigate", "params": {"url": url}}


def ref_of(tree: str, pattern: str) -> str:
    """The ref on the (first) line of a readPage/find listing that matches pattern."""
    for line in tree.splitlines():
        if re.search(pattern, line):
            return re.search(r"\[(ref_\d+)\]", line).group(1)
    raise AssertionError(f"no line matches {pattern!r} in:\n{tree}")


def test_read_page_lists_interactive_elements_with_refs(run_page, pages_server):
    """readPage (interactive) lists links and fields named by their labels, each with a ref, and
    leaves out hidden elements and plain text."""
    run = run_page([nav(pages_server.url("/browser_reading.html")), {"type": "readPage"}], tab=TAB)
    assert not run.is_error, run.summary
    page = run.result(2)
    tree = page["tree"]
    assert page["title"] == "Order a basket" and page["truncated"] is False
    assert re.search(r'link "Home" \[ref_\d+\] -> /index.html', tree)
    assert re.search(r'textbox "Full name" \[ref_\d+\] required', tree)
    assert re.search(r'textbox "Email address" \[ref_\d+\]', tree)
    assert re.search(r'combobox "Basket size" \[ref_\d+\] options: \*Small \| Medium \| Large', tree)
    assert re.search(r'checkbox "Gift wrap" \[ref_\d+\] unchecked', tree)
    assert re.search(r'radio "Slow delivery" \[ref_\d+\] checked', tree)
    assert re.search(r'textbox "Note for the courier"', tree)
    assert re.search(r'button "Place order" \[ref_\d+\]', tree)
    assert "Hidden action" not in tree and "heading" not in tree and "Why baskets" not in tree
    assert page["elements"] == len(tree.splitlines())


def test_read_page_all_adds_headings_text_and_landmarks(run_page, pages_server):
    """filter 'all' also lists headings, text and landmarks, nested under their containers."""
    run = run_page([nav(pages_server.url("/browser_reading.html")),
                    {"type": "readPage", "params": {"filter": "all"}}], tab=TAB)
    tree = run.result(2)["tree"]
    assert re.search(r'^- main \[ref_\d+\]$', tree, re.M)
    assert re.search(r'^  - heading "Order a basket" \[ref_\d+\] level=1', tree, re.M)
    assert re.search(r'heading "Why baskets" \[ref_\d+\] level=2', tree)
    assert re.search(r'text "light" \[ref_\d+\]', tree)
    assert re.search(r'^- navigation', tree, re.M) and re.search(r'^- contentinfo "Footer text"', tree, re.M)


def test_read_page_narrows_by_ref_and_depth(run_page, pages_server):
    """ref lists only inside one element; depth stops at a nesting level."""
    run = run_page([nav(pages_server.url("/browser_reading.html")),
                    {"type": "readPage", "params": {"filter": "all"}}], tab=TAB)
    nav_ref = ref_of(run.result(2)["tree"], r"^- navigation")
    inside = run_page([{"type": "readPage", "params": {"ref": nav_ref}}], tab=TAB).result(1)["tree"]
    assert inside.splitlines() == [ln for ln in inside.splitlines() if ln.startswith("- link")]
    assert len(inside.splitlines()) == 2
    shallow = run_page([{"type": "readPage", "params": {"filter": "all", "depth": 1}}], tab=TAB).result(1)["tree"]
    assert all(line.startswith("- ") for line in shallow.splitlines())


def test_form_is_driven_by_refs_alone(run_page, pages_server):
    """Refs from readPage and find fill text, a select (by label), a checkbox and a radio, then
    submit; the result page's text shows what was sent. No screenshot, no selector."""
    run = run_page([nav(pages_server.url("/browser_reading.html")), {"type": "readPage"}], tab=TAB)
    tree = run.result(2)["tree"]
    found = run_page([{"type": "find", "params": {"query": "email"}}], tab=TAB).result(1)
    email = ref_of(found["elements"], r'textbox "Email address"')
    steps = [
        {"type": "formInput", "params": {"ref": ref_of(tree, r'"Full name"'), "value": "Ada Lovelace"}},
        {"type": "type", "params": {"ref": email, "text": "ada@example.com"}},
        {"type": "formInput", "params": {"ref": ref_of(tree, r'"Basket size"'), "value": "Large"}},
        {"type": "formInput", "params": {"ref": ref_of(tree, r'"Gift wrap"'), "value": True}},
        {"type": "formInput", "params": {"ref": ref_of(tree, r'"Fast delivery"'), "value": True}},
        {"type": "formInput", "params": {"ref": ref_of(tree, r'"Note for the courier"'), "value": "ring twice"}},
        {"type": "click", "params": {"ref": ref_of(tree, r'button "Place order"')}},
        {"type": "wait", "params": {"selector": "#q"}},
        {"type": "getText", "params": {}},
    ]
    run = run_page(steps, tab=TAB)
    assert not run.is_error, run.summary
    assert run.images == []
    assert run.result(3)["selected"] == ["l"]
    sent = parse_qs(urlsplit(run.body["url"]).query)
    assert sent == {"customer": ["Ada Lovelace"], "email": ["ada@example.com"], "size": ["l"], "gift": ["yes"],
                    "speed": ["fast"], "note": ["ring twice"]}
    assert "customer=Ada+Lovelace" in run.result(9)["text"]


def test_stale_ref_after_navigation_says_read_the_page_again(run_page, pages_server):
    """A ref from the previous document fails at once (no 10 s wait) and says to read again."""
    run = run_page([nav(pages_server.url("/browser_reading.html")), {"type": "readPage"}], tab=TAB)
    button = ref_of(run.result(2)["tree"], r'button "Place order"')
    started = time.monotonic()
    stale = run_page([nav(pages_server.url("/browser_reading.html")), {"type": "click", "params": {"ref": button}}],
                     tab=TAB)
    assert time.monotonic() - started < 8  # it did not wait out the click timeout
    assert stale.is_error
    error = stale.results[1]["error"]
    assert error.startswith(f"{button} is no longer on the page") and "read the page again" in error


def test_read_page_of_a_huge_page_is_capped_and_says_how_to_narrow(run_page):
    """A 5,000-element page is listed up to the cap, and the result says how to narrow."""
    html = "<title>huge</title>" + "".join(
        f"<section><h3>Part {i}</h3><button>Action {i}</button></section>" for i in range(2500)
    )
    run = run_page([{"type": "setContent", "params": {"html": html}}, {"type": "readPage", "params": {"filter": "all"}}],
                   tab="huge")
    page = run.result(2)
    assert page["truncated"] is True and page["elements"] == 400
    assert len(page["tree"].splitlines()) == 400 and len(page["tree"]) < 40_000
    assert "narrow with depth" in page["note"] and "ref" in page["note"]


def test_get_text_main_content_first_and_markdown(run_page, pages_server):
    """getText puts the main content before navigation and footer; markdown keeps headings,
    links and lists."""
    run = run_page([nav(pages_server.url("/browser_reading.html")), {"type": "getText"},
                    {"type": "getText", "params": {"format": "markdown"}},
                    {"type": "getText", "params": {"format": "html"}}], tab=TAB)
    text = run.result(2)["text"]
    assert text.index("Order a basket") < text.index("Home") and text.index("Why baskets") < text.index("Footer text")
    markdown = run.result(3)["text"]
    assert "# Order a basket" in markdown and "## Why baskets" in markdown
    assert f"[the index]({pages_server.url('/index.html')})" in markdown
    assert "- light" in markdown and "**things**" in markdown
    assert run.result(4)["text"].startswith("<main>")


PAGE_WITH_SOURCE_AROUND_MAIN = """<title>Flights</title>
<style>.fare { color: red } body { font-family: sans-serif }</style>
<script>window.dataLayer = [{"event": "search"}];</script>
<header>Book a flight <span hidden>secret-hidden-attribute</span></header>
<main><h1>Results</h1><p class="fare">Lisbon to Oslo: 120 EUR</p>
  <script>console.log("inside main")</script></main>
<div style="display:none">secret-display-none</div>
<p>Prices include taxes <span style="visibility:hidden">secret-visibility</span></p>
<noscript>secret-noscript</noscript>
<template><p>secret-template</p></template>
<script type="application/json">[{"code": "LIS", "name": "Lisbon"}, {"code": "OSL", "name": "Oslo"}]</script>
<footer>Help and contact</footer>"""


def test_get_text_is_what_a_person_reads(run_page):
    """getText outside <main> returns the page as innerText shows it: no script or style source,
    no hidden elements (a flight search page once gave 9,429 characters of inline JSON for 361
    of text)."""
    run = run_page([{"type": "setContent", "params": {"html": PAGE_WITH_SOURCE_AROUND_MAIN}},
                    {"type": "getText"},
                    {"type": "evaluate", "params": {"script": "document.body.innerText"}}], tab=TAB)
    assert not run.is_error, run.summary
    text, shown = run.result(2)["text"], run.result(3)
    for seen in ("Results", "Lisbon to Oslo: 120 EUR", "Book a flight", "Prices include taxes", "Help and contact"):
        assert seen in text, seen
    for source in ("dataLayer", "LIS", "font-family", "inside main", "secret-"):
        assert source not in text, source
    assert text.index("Results") < text.index("Book a flight") < text.index("Help and contact")
    body_only = text.replace("\n\n---\n\n", "\n")
    assert len(body_only) <= len(shown) + 10, (body_only, shown)


def test_wait_and_select_accept_refs(run_page, pages_server):
    """wait and select take a ref like a selector."""
    run = run_page([nav(pages_server.url("/browser_form.html")), {"type": "readPage"}], tab=TAB)
    tree = run.result(2)["tree"]
    fruits = ref_of(tree, r"listbox")
    run = run_page([{"type": "wait", "params": {"ref": fruits, "ms": 2000}},
                    {"type": "select", "params": {"ref": fruits, "values": ["banana", "Cherry"]}}], tab=TAB)
    assert not run.is_error, run.summary
    assert run.result(1) == {"selector": fruits, "visible": True}
    assert sorted(run.result(2)["selected"]) == ["banana", "cherry"]


def test_form_input_refuses_a_value_of_the_wrong_kind(run_page, pages_server):
    """formInput says what value a field takes when given the wrong kind."""
    run = run_page([nav(pages_server.url("/browser_reading.html")),
                    {"type": "formInput", "params": {"selector": "input[name=gift]", "value": "yes"}}], tab=TAB)
    assert run.is_error
    assert "is a checkbox or radio: give value true or false" in run.results[1]["error"]


def test_tabs_lists_the_named_tabs(run_page, pages_server):
    """tabs lists the named tabs with their URL and title."""
    url = pages_server.url("/browser_reading.html")
    run_page([nav(url)], tab="listed")
    run = run_page([{"type": "tabs"}], tab=TAB)
    tabs = {t["name"]: t for t in run.result(1)["tabs"]}
    assert tabs["listed"] == {"name": "listed", "url": url, "title": "Order a basket"}
    assert TAB in tabs


def test_a_whole_form_by_refs_without_screenshots(run_page, pages_server, browser_desktop):
    """A realistic page done through refs only: fill, upload, answer the confirm, submit, read the
    result text, the console and the network, then download the invoice. No image is attached."""
    from pathlib import Path

    photo = Path(browser_desktop.data_dir) / "shop-photo.txt"
    photo.write_text("a photo")
    url = pages_server.url("/browser_shop.html")
    try:
        tree = run_page([nav(url), {"type": "readPage"}], tab="shop").result(2)["tree"]
        run = run_page([
            {"type": "formInput", "params": {"ref": ref_of(tree, r'"Your name"'), "value": "Ada"}},
            {"type": "formInput", "params": {"ref": ref_of(tree, r'"Size"'), "value": "Large"}},
            {"type": "formInput", "params": {"ref": ref_of(tree, r'"Gift wrap"'), "value": True}},
            {"type": "upload", "params": {"ref": ref_of(tree, r'file "Photo of the place"'), "paths": [str(photo)]}},
            {"type": "dialog", "params": {"action": "accept"}},
            {"type": "click", "params": {"ref": ref_of(tree, r'button "Send order"')}},
            {"type": "wait", "params": {"selector": "text=Order sent"}},
            {"type": "getText"},
            {"type": "console"},
            {"type": "network"},
            {"type": "download", "params": {"ref": ref_of(tree, r'link "Get the invoice"')}},
        ], tab="shop")
    finally:
        photo.unlink()
    assert not run.is_error, run.summary
    assert run.images == []
    assert run.results[5]["dialogs"] == [{"type": "confirm", "message": "Send the order?", "answer": "accepted"}]
    assert "Order sent: who=Ada&size=l&gift=yes&photo=shop-photo.txt" in run.result(8)["text"]
    assert {"type": "log", "text": "order sent 200"} in [{k: e[k] for k in ("type", "text")} for e in run.result(9)["entries"]]
    fetched = [e for e in run.result(10)["entries"] if "/echo?" in e["url"]]
    assert fetched and fetched[0]["status"] == 200 and fetched[0]["type"] == "fetch"
    invoice = Path(run.result(11)["path"])
    try:
        assert invoice.name.startswith("invoice") and invoice.read_text() == "downloaded content\n"
    finally:
        invoice.unlink(missing_ok=True)
