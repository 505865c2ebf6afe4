"""`web.fetch_rendered` in the real session's Chromium: scripts run, nothing of the person's
profile is used, and the egress policy holds for the page's own requests."""

from __future__ import annotations

import pytest

from capabilities.egress import EgressPolicy
from capabilities.web.fetcher import PageFetcher
from capabilities.web.rendered import Renderer
from capabilities.web.search import SearchConfig
from capabilities.web.tooling import WebState

from .conftest import error, ok, web_call

pytestmark = pytest.mark.desktop


@pytest.fixture
def rendered_call(desktop_session, monkeypatch):
    monkeypatch.setenv("CODEDESK_DATA", str(desktop_session.data_dir))
    info = desktop_session.info
    renderer = Renderer(load_session=lambda: info, policy=lambda: EgressPolicy.from_session(info))
    return web_call(WebState(fetcher=PageFetcher(), renderer=renderer, search=SearchConfig()))


def test_rendered_page_shows_what_its_script_wrote(rendered_call, call, pages_server):
    """The reason for fetch_rendered: content a script builds is there, where fetch sees none."""
    url = pages_server.url("/web_article.html")
    rendered = ok(rendered_call("fetch_rendered", url=url))
    assert "Rendered by JavaScript: 7 plums" in rendered["content"] and "Loading…" not in rendered["content"]
    assert rendered["title"] == "Fruit report" and rendered["status"] == 200
    assert "| Apples" in rendered["content"]
    plain = ok(call("fetch", url=url))
    assert "7 plums" not in plain["content"]


def test_rendered_context_has_no_cookies_of_the_profile(rendered_call, pages_server):
    """Each call is a fresh context: a cookie one page sets is not seen by the next call."""
    set_cookie = "/web_article.html"
    ok(rendered_call("fetch_rendered", url=pages_server.url(set_cookie), waitFor="#app p"))
    page = ok(rendered_call("fetch_rendered", url=pages_server.url("/echo?x=1"), format="html"))
    assert "cookie" not in page["content"].lower()


def test_rendered_redirect_to_the_metadata_address_is_refused(rendered_call, pages_server):
    message = error(rendered_call("fetch_rendered",
                                  url=pages_server.url("/redirect?to=http://169.254.169.254/latest/"), timeout=10),
                    "refused")
    assert "169.254.169.254" in message


def test_rendered_page_that_never_finishes_is_cut_off(rendered_call, pages_server):
    page = ok(rendered_call("fetch_rendered", url=pages_server.url("/never"), timeout=3))
    assert "had not finished loading after 3 s" in page["cut_off"]
    assert "Never finishes" in page["content"]
