"""`web.fetch` and `web.fetch_image` against local pages: conversion, paging, redirects under
the egress policy, and the size and time caps."""

from __future__ import annotations

import json
import time

from .conftest import error, ok


def test_fetch_markdown_keeps_headings_links_and_tables(call, pages_server):
    """The point of markdown: a model reads the page's structure, not a flattened blob."""
    page = ok(call("fetch", url=pages_server.url("/web_article.html")))
    assert page["status"] == 200 and page["title"] == "Fruit report"
    assert page["description"] == "Quarterly fruit figures"
    content = page["content"]
    assert "# Fruit report" in content and "## Sales" in content
    assert f"[orchard survey]({pages_server.url('/echo?source=orchard')})" in content  # made absolute
    assert "| Fruit" in content and "| Apples" in content and "| ---" in content
    assert "color: green" not in content and "getElementById" not in content


def test_fetch_does_not_run_scripts(call, pages_server):
    """A plain fetch shows the page as served: what a script would write is not there."""
    content = ok(call("fetch", url=pages_server.url("/web_article.html")))["content"]
    assert "Loading…" in content and "7 plums" not in content


def test_fetch_text_and_html_formats(call, pages_server):
    text = ok(call("fetch", url=pages_server.url("/web_article.html"), format="text"))["content"]
    assert "Fruit report" in text and "#" not in text and "](" not in text
    html = ok(call("fetch", url=pages_server.url("/web_article.html"), format="html"))
    assert "<table>" in html["content"] and html["title"] == "Fruit report"


def test_fetch_pages_with_offset(call, pages_server):
    """A long page comes in slices that join up exactly; next_offset ends at the end."""
    url = pages_server.url("/web_article.html")
    whole = ok(call("fetch", url=url))
    parts, offset = [], 0
    while offset is not None:
        page = ok(call("fetch", url=url, maxChars=50, offset=offset))
        assert page["offset"] == offset and len(page["content"]) <= 50
        assert page["total_chars"] == whole["total_chars"]
        parts.append(page["content"])
        offset = page.get("next_offset")
    assert "".join(parts) == whole["content"] and len(parts) > 2
    past = ok(call("fetch", url=url, offset=10**6))
    assert past["content"] == "" and "next_offset" not in past


def test_fetch_follows_redirects_and_names_them(call, pages_server):
    page = ok(call("fetch", url=pages_server.url("/redirect?to=/web_article.html")))
    assert page["final_url"] == pages_server.url("/web_article.html")
    assert page["redirects"] == [pages_server.url("/web_article.html")]


def test_redirect_to_the_metadata_address_is_refused(call, pages_server):
    """A page cannot launder a request to 169.254.169.254 through a redirect: each hop is checked."""
    message = error(call("fetch", url=pages_server.url("/redirect?to=http://169.254.169.254/latest/meta-data/")),
                    "refused")
    assert "redirected to http://169.254.169.254/latest/meta-data/" in message
    assert "169.254.0.0/16" in message and "--egress-allow" in message


def test_metadata_address_in_any_spelling_is_refused(call):
    for url in ("http://169.254.169.254/", "http://0xa9fea9fe/", "http://2852039166/", "http://[::ffff:169.254.169.254]/"):
        error(call("fetch", url=url, timeout=5), "refused")


def test_only_web_urls_are_fetched(call, pages_server):
    assert "not an http:// or https:// URL" in error(call("fetch", url="file:///etc/passwd"), "invalid_arguments")
    message = error(call("fetch", url=pages_server.url("/redirect?to=file:///etc/passwd")), "invalid_arguments")
    assert "file:///etc/passwd" in message


def test_a_20_mb_page_is_cut_off_with_a_message(call, pages_server):
    """A huge page costs at most the cap, and the answer says it is incomplete and why."""
    started = time.monotonic()
    page = ok(call("fetch", url=pages_server.url("/big?mb=20"), maxChars=1000))
    assert "larger than the 10,485,760-byte cap" in page["cut_off"] and "CODEDESK_WEB_MAX_BYTES" in page["cut_off"]
    assert 9_000_000 < page["total_chars"] < 10_485_760 and page["next_offset"] == 1000
    assert time.monotonic() - started < 20


def test_a_page_that_never_finishes_is_cut_off_at_the_timeout(call, pages_server):
    """A page that trickles forever ends at the call's time cap with what came so far."""
    started = time.monotonic()
    page = ok(call("fetch", url=pages_server.url("/never"), timeout=2))
    elapsed = time.monotonic() - started
    assert 1.9 < elapsed < 6, elapsed
    assert "did not finish within 2 s" in page["cut_off"]
    assert page["title"] == "never" and "still loading" in page["content"]


def test_a_server_that_never_answers_is_a_timeout(call):
    """No byte at all within the cap: a timeout error, not an empty page."""
    import socket

    with socket.socket() as listener:  # accepts connections (the backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        message = error(call("fetch", url=f"http://127.0.0.1:{port}/", timeout=1), "timeout")
    assert "did not answer within 1 s" in message


def test_unreachable_host_is_unavailable(call):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens once closed
    assert "cannot reach" in error(call("fetch", url=f"http://127.0.0.1:{port}/", timeout=5), "unavailable")


def test_an_image_url_is_refused_by_fetch_and_read_by_fetch_image(call, pages_server):
    url = pages_server.url("/web_image.png")
    assert "image/png" in error(call("fetch", url=url), "failed")
    result = call("fetch_image", url=url)
    image = ok(result)
    assert (image["format"], image["width"], image["height"]) == ("PNG", 40, 30)
    assert image["image_index"] == 0 and result.content[1].type == "image"


def test_fetch_image_of_a_page_says_it_is_not_an_image(call, pages_server):
    assert "not an image" in error(call("fetch_image", url=pages_server.url("/web_article.html")), "failed")


def test_unknown_fields_are_refused_by_name(call, pages_server):
    message = error(call("fetch", url=pages_server.url("/"), maxchars=5), "invalid_arguments")
    assert "'maxchars'" in message and "maxChars" in message


def test_search_without_a_provider_says_how_to_configure_one(call):
    result = call("search", query="codedesk")
    error(result, "unavailable")
    hint = result.structured_content["error"]["hint"]
    assert "webSearch" in hint and "CODEDESK_WEB_SEARCH" in hint


def test_search_through_an_http_provider(monkeypatch, tmp_path, pages_server):
    """An operator's HTTP search API: the query is filled in, the hits read from its JSON."""
    from capabilities.web.fetcher import PageFetcher
    from capabilities.web.rendered import Renderer
    from capabilities.web.search import SearchConfig
    from capabilities.web.tooling import WebState

    from .conftest import web_call

    monkeypatch.setenv("CODEDESK_DATA", str(tmp_path))
    monkeypatch.setenv("CODEDESK_WEB_SEARCH", json.dumps({"url": pages_server.url("/web_search.json?q={query}")}))
    call = web_call(WebState(fetcher=PageFetcher(), renderer=Renderer(), search=SearchConfig.from_environment()))
    found = ok(call("search", query="fruit report", limit=1))
    assert found["results"] == [{"title": "Fruit report", "url": "http://example.test/fruit",
                                 "snippet": "Quarterly fruit figures"}]
