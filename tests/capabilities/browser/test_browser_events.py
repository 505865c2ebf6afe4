"""A tab's console, network and dialogs: read since the last read; dialogs never block a batch."""

from __future__ import annotations

TAB = "events"


def nav(url: str) -> dict:
    return {"type": "navigate", "params": {"url": url}}


def click(selector: str) -> dict:
    return {"type": "click", "params": {"selector": selector}}


OUT = {"type": "evaluate", "params": {"script": "document.querySelector('#out').textContent"}}


def test_console_entries_since_the_last_read(run_page, pages_server):
    """console lists what the page logged (with its level) since the previous console step."""
    run = run_page([nav(pages_server.url("/browser_events.html")), {"type": "console"}, click("#log"),
                    {"type": "console"}, {"type": "console"}], tab=TAB)
    assert not run.is_error, run.summary
    # (the browser may log its own lines too, such as a missing favicon)
    entries = [(e["type"], e["text"]) for e in run.result(4)["entries"] if "favicon" not in e["text"]
               and not e["text"].startswith("Failed to load resource")]
    assert entries == [("log", "clicked 42"), ("warning", "careful")]
    assert not [e for e in run.result(5)["entries"] if e["type"] in ("log", "warning")]  # read once only


def test_network_lists_requests_with_status_and_type(run_page, pages_server):
    """network lists the page load and a fetch the page made, with method, status and type."""
    url = pages_server.url("/browser_events.html")
    run = run_page([{"type": "network"}, nav(url), click("#fetch"), {"type": "wait", "params": {"selector": "text=fetched"}},
                    {"type": "network"}], tab=TAB)
    assert not run.is_error, run.summary
    entries = run.result(5)["entries"]
    by_url = {e["url"]: e for e in entries}
    assert by_url[url]["status"] == 200 and by_url[url]["type"] == "document" and by_url[url]["method"] == "GET"
    fetched = by_url[pages_server.url("/echo?from=fetch")]
    assert fetched["status"] == 200 and fetched["type"] == "fetch"
    assert fetched.get("ms") is None or fetched["ms"] >= 0


def test_dialogs_are_answered_and_reported(run_page, pages_server):
    """A confirm is dismissed by default, accepted after dialog {accept}; a prompt gets the given
    text; each step lists the dialogs it raised; none blocks the batch."""
    run = run_page([
        nav(pages_server.url("/browser_events.html")),
        click("#ask"), OUT,
        {"type": "dialog", "params": {"action": "accept"}}, click("#ask"), OUT,
        {"type": "dialog", "params": {"action": "accept", "promptText": "Ada"}}, click("#name"), OUT,
        {"type": "evaluate", "params": {"script": "alert('hello'); 5"}},
    ], tab=TAB)
    assert not run.is_error, run.summary
    assert run.results[1]["dialogs"] == [{"type": "confirm", "message": "Delete it?", "answer": "dismissed"}]
    assert run.result(3) == "no"
    assert run.results[4]["dialogs"][0]["answer"] == "accepted" and run.result(6) == "yes"
    assert run.results[7]["dialogs"][0]["type"] == "prompt" and run.result(9) == "Ada"
    assert run.result(10) == 5
    assert run.results[9]["dialogs"] == [{"type": "alert", "message": "hello", "answer": "accepted"}]
    assert "dialogs" not in run.results[2]
