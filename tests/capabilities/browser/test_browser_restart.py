"""When Chromium is gone (closed by the person, or crashed), the next call brings it back with
its named tabs; a tab the person closed comes back at its last URL."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.parse
import urllib.request

import psutil


def ev(script: str) -> dict:
    return {"type": "evaluate", "params": {"script": script}}


def page_urls(info) -> list[str]:
    with urllib.request.urlopen(info.devtools_url + "/json/list", timeout=10) as response:
        return [t["url"] for t in json.load(response) if t["type"] == "page"]


def endpoint_up(info) -> bool:
    url = urllib.parse.urlsplit(info.devtools_url)
    try:
        with socket.create_connection((url.hostname, url.port), timeout=1):
            return True
    except OSError:
        return False


def test_killed_chromium_is_restarted_with_its_named_tabs(run_page, browser_desktop, browser_kit, pages_server):
    """Kill the session's Chromium between calls: the next call starts it again (as the session's
    user), reopens every named tab at its last URL, then runs its steps."""
    url_a = pages_server.url("/browser_form.html?tab=a")
    url_b = pages_server.url("/browser_tall.html?tab=b")
    assert not run_page([{"type": "navigate", "params": {"url": url_a}}], tab="restore-a").is_error
    assert not run_page([{"type": "navigate", "params": {"url": url_b}}], tab="restore-b").is_error
    info = browser_desktop.info

    pid = browser_kit.chromium_pid(info)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while (psutil.pid_exists(pid) or endpoint_up(info)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not endpoint_up(info), "Chromium's DevTools endpoint still answers after the kill"

    run = run_page([ev("location.href")], tab="restore-a")
    assert not run.is_error, run.summary
    assert run.result(1) == url_a
    assert url_b in page_urls(info)  # the other named tab is back too, before it is used
    new_pid = browser_kit.chromium_pid(info)
    assert new_pid is not None and new_pid != pid
    assert psutil.Process(new_pid).uids().real == info.uid
    assert run_page([ev("location.href")], tab="restore-b").result(1) == url_b


def test_tab_closed_by_the_person_reopens_at_its_last_url(run_page, browser_desktop, pages_server):
    """Closing the tab in Chromium does not lose it: the next call reopens it where it was."""
    url = pages_server.url("/browser_form.html?tab=closed-by-hand")
    assert not run_page([{"type": "navigate", "params": {"url": url}}], tab="by-hand").is_error
    info = browser_desktop.info
    with urllib.request.urlopen(info.devtools_url + "/json/list", timeout=10) as response:
        (target,) = [t for t in json.load(response) if t["url"] == url]
    with urllib.request.urlopen(f"{info.devtools_url}/json/close/{target['id']}", timeout=10):
        pass
    deadline = time.monotonic() + 10
    while url in page_urls(info) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert url not in page_urls(info)
    run = run_page([ev("location.href")], tab="by-hand")
    assert not run.is_error, run.summary
    assert run.result(1) == url
