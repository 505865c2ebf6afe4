"""browser_execute's back, forward and reload: a tab's history, moved through as a person does."""

from __future__ import annotations

TAB = "history"


def nav(url: str) -> dict:
    return {"type": "navigate", "params": {"url": url}}


def test_back_and_forward_move_through_the_tabs_history(run_page, pages_server):
    """back returns to the page before and forward to the one after, across calls too."""
    first, second = pages_server.url("/browser_form.html"), pages_server.url("/browser_tall.html")
    run = run_page([nav(first), nav(second), {"type": "back"}, {"type": "url"}], tab=TAB)
    assert not run.is_error, run.summary
    assert run.result(3) == {"url": first, "title": "browser form", "status": run.result(3)["status"]}
    assert run.result(4)["url"] == first
    again = run_page([{"type": "forward", "params": {"waitUntil": "load"}}], tab=TAB)
    assert not again.is_error, again.summary
    assert again.result(1)["url"] == second and again.body["url"] == second


def test_reload_loads_the_page_again(run_page, pages_server):
    """reload runs the page anew: what a script changed in it is gone."""
    url = pages_server.url("/browser_form.html")
    run = run_page([nav(url), {"type": "evaluate", "params": {"script": "window.marked = 1"}},
                    {"type": "reload"}, {"type": "evaluate", "params": {"script": "window.marked === undefined"}}],
                   tab=TAB)
    assert not run.is_error, run.summary
    assert run.result(3) == {"url": url, "title": "browser form", "status": 200}
    assert run.result(4) is True


def test_back_with_no_page_before_fails_the_step_and_says_so(run_page, pages_server):
    """A step back from the first page must not pass silently: the batch stops there."""
    run = run_page([nav(pages_server.url("/browser_form.html")), {"type": "forward"}, {"type": "url"}],
                   tab="history-edge", close=True)
    assert run.is_error
    error = run.body["error"]
    assert error["step"] == 2 and "no page after this one" in error["message"]
    assert len(run.results) == 2


def test_history_steps_refuse_unknown_params_before_anything_runs(run_page):
    """back/forward/reload take only waitUntil, checked with the whole batch."""
    run = run_page([{"type": "url"}, {"type": "back", "params": {"steps": 2}}], tab=TAB)
    assert run.is_error and run.body["error"]["kind"] == "invalid_arguments"
    assert run.body["error"]["step"] == 2 and run.results == []
