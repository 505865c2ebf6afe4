"""browser_execute stops at the first failing step, says which and why, and shows the page."""

from __future__ import annotations

import struct

import pytest

TAB = "failures"


@pytest.fixture(scope="module")
def timed_out(run_pages, pages_server):
    """The failures that wait out the 10 s element timeout, run at once in three tabs."""
    form = {"type": "navigate", "params": {"url": pages_server.url("/browser_form.html")}}
    batches = {
        "missing": [form, {"type": "click", "params": {"selector": "#nope"}},
                    {"type": "evaluate", "params": {"script": "window.__after = true"}}],
        "hidden": [form, {"type": "click", "params": {"selector": "#hidden"}}],
        "option": [form, {"type": "select", "params": {"selector": "#fruits", "values": ["durian"]}}],
    }
    runs = run_pages([{"operations": ops, "tab": f"{TAB}-{name}"} for name, ops in batches.items()])
    return dict(zip(batches, runs))


def test_failing_step_stops_the_batch_with_index_reason_and_screenshot(timed_out, run_page, pages_server):
    """A click on a missing element fails step 2 with a reason a model can act on, step 3 never
    runs, and a screenshot of that moment is attached and pointed at."""
    run = timed_out["missing"]
    assert run.is_error
    assert [r["success"] for r in run.results] == [True, False]
    failed = run.results[1]
    assert failed["step"] == 2 and failed["operation"] == "click"
    assert failed["error"] == "no element matches '#nope' within 10 s; check the selector or wait for the page"
    error = run.raw.structured_content["error"]
    assert (error["kind"], error["step"], error["field"]) == ("not_found", 2, "params.selector")
    assert run.summary.startswith("failed at step 2 of 3 (click) after 1 succeeded")
    assert pages_server.url("/browser_form.html") in run.summary
    assert len(run.images) == 1 and failed["screenshot"]["image_index"] == 0
    assert struct.unpack(">II", run.images[0][16:24]) == (failed["screenshot"]["width"], failed["screenshot"]["height"])
    after = run_page([{"type": "evaluate", "params": {"script": "window.__after === true"}}], tab=f"{TAB}-missing")
    assert after.result(1) is False


def test_hidden_element_is_explained_as_present_but_unusable(timed_out):
    """When the element exists but cannot be clicked, the reason says so (not 'no element')."""
    error = timed_out["hidden"].results[1]["error"]
    assert error.startswith("an element matches '#hidden' but it could not be used within 10 s")
    assert "not visible" in error


def test_script_error_is_reported_with_the_thrown_message(run_page):
    """A throwing evaluate names the JavaScript error."""
    run = run_page([{"type": "evaluate", "params": {"script": "missingFunction()"}}], tab=TAB)
    assert run.is_error
    assert "the script threw ReferenceError: missingFunction is not defined" in run.results[0]["error"]


def test_unknown_key_lists_key_names(run_page):
    """A key Playwright does not know is refused with examples of valid names."""
    run = run_page([{"type": "press", "params": {"key": "Enterr"}}], tab=TAB)
    assert "unknown key 'Enterr'; use Playwright key names such as Enter" in run.results[0]["error"]


def test_unreachable_url_is_explained(run_page, pages_server):
    """A navigation to a port nobody listens on names the network error."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        run = run_page([{"type": "navigate", "params": {"url": f"http://127.0.0.1:{port}/"}}], tab=TAB)
    assert run.is_error
    assert f"could not load http://127.0.0.1:{port}/: ERR_CONNECTION_REFUSED" in run.results[0]["error"]


def test_missing_option_is_explained(timed_out):
    """select with a value the <select> lacks says which values were not found."""
    assert "has no option with value or label 'durian'" in timed_out["option"].results[1]["error"]


def test_invalid_selector_is_explained(run_page):
    """A selector Playwright cannot parse is reported as such, at once."""
    run = run_page([{"type": "click", "params": {"selector": "div[["}}], tab=TAB)
    assert "'div[[' is not a valid selector" in run.results[0]["error"]
