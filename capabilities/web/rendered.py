"""`fetch_rendered`: a page loaded by the session's Chromium in a throwaway context, for pages
that build themselves with scripts.

Each call opens a new browser context over CDP (Playwright's `new_context` on the session's
Chromium: Chromium's own incognito-like context, with no cookies, storage or history of the
person's profile and none kept after), loads the page there, reads its DOM as HTML, and closes
the context. Every request the page makes is checked against the session's egress policy and
a refused one is aborted; a navigation that was refused fails the call, naming the address.
The session's firewall stands behind this (Chromium runs as the desktop user).

The connection to Chromium is made on first use and kept; this server never starts Chromium
(the browser server does, and the session does at start).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from playwright.async_api import Browser, Playwright, Request, Route, async_playwright
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from capabilities.egress import EgressPolicy, EgressRefused, check_url_async
from capabilities.session import SessionInfo, SessionNotFound, read_session

from .errors import InvalidUrl, Refused, TimedOut, Unreachable
from .fetcher import max_bytes, session_policy


@dataclass
class RenderedPage:
    """What Chromium showed: the DOM as HTML once loaded (or when the time ran out)."""

    final_url: str
    status: int
    html: str
    redirects: list[str] = field(default_factory=list)
    cut_off: str | None = None


class Renderer:
    """One Playwright connection to the session's Chromium; a throwaway context per page."""

    def __init__(self, load_session: Callable[[], SessionInfo] = read_session,
                 policy: Callable[[], EgressPolicy] = session_policy) -> None:
        self._load_session = load_session
        self._policy = policy
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._lock = anyio.Lock()

    async def aclose(self) -> None:
        """Disconnect (Chromium keeps running) and stop Playwright's driver."""
        if self._playwright is not None:
            await self._playwright.stop()
            self._playwright = self._browser = None

    async def render(self, url: str, *, timeout: float, wait_until: str, wait_for: str | None) -> RenderedPage:
        """Load `url` in a fresh context and return its DOM.

        Raises:
            InvalidUrl, Refused, Unreachable (Chromium not reachable, page failed), TimedOut.
        """
        if not url.lower().startswith(("http://", "https://")):
            raise InvalidUrl(f"{url} is not an http:// or https:// URL; only web pages are rendered")
        policy = self._policy()
        try:
            await check_url_async(policy, url)
        except EgressRefused as exc:
            raise Refused(f"{url} is not rendered: {exc}") from exc
        except TimeoutError as exc:
            raise TimedOut(f"the host of {url} did not resolve in time to be checked against the egress policy") from exc
        browser = await self._connect()
        refused: list[str] = []

        async def guard(route: Route, request: Request) -> None:
            try:
                await check_url_async(policy, request.url)
            except (EgressRefused, TimeoutError) as exc:
                refused.append(f"{request.url}: {exc}")
                await route.abort("blockedbyclient")
                return
            await route.continue_()

        try:
            context = await browser.new_context()
        except PlaywrightError as exc:
            raise Unreachable(f"cannot open a browser context in the session's Chromium ({exc.message})") from exc
        try:
            await context.route("**/*", guard)
            page = await context.new_page()
            failed: list[str] = []
            page.on("requestfailed", lambda request: failed.append(request.url))
            cut_off = None
            status = 0
            try:
                response = await page.goto(url, wait_until=wait_until, timeout=timeout * 1000)
                status = response.status if response is not None else 0
                if wait_for:
                    await page.wait_for_selector(wait_for, timeout=timeout * 1000)
            except PlaywrightTimeout:
                cut_off = (f"the page had not finished loading after {timeout:g} s: the content is what it showed "
                           "then (call again with a larger timeout, or a waitFor selector)")
            except PlaywrightError as exc:
                # A redirect hop is not routed through `guard`: the firewall stops it, and here
                # the failed hops say why.
                await _refuse_any(policy, url, failed, refused)
                raise Unreachable(f"Chromium could not load {url}: {exc.message.splitlines()[0]}",
                                  hint="check the URL; the host may be down or the name wrong") from exc
            html = await page.content()
            chain = _redirects(page.main_frame.url, response if cut_off is None else None)
            # Where no firewall stands behind this check, a hop to a refused address may have
            # loaded: what it showed is never returned.
            await _refuse_any(policy, url, [*chain, page.main_frame.url], [])  # a blocked image is no failure
            limit = max_bytes()
            if len(html.encode("utf-8", "surrogatepass")) > limit:
                html = html.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")
                cut_off = (f"the rendered page is larger than the {limit:,}-byte cap (CODEDESK_WEB_MAX_BYTES): the "
                           f"content is its first {limit:,} bytes")
            return RenderedPage(final_url=page.main_frame.url, status=status, html=html, redirects=chain,
                                cut_off=cut_off)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await context.close()
                except PlaywrightError:
                    pass  # Chromium went away: the context went with it

    async def _connect(self) -> Browser:
        async with self._lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            try:
                info = self._load_session()
            except SessionNotFound as exc:
                raise Unreachable(f"no desktop session to render pages in: {exc}") from exc
            if self._playwright is None:
                self._playwright = await async_playwright().start()
            try:
                self._browser = await self._playwright.chromium.connect_over_cdp(info.devtools_url, timeout=10_000)
            except PlaywrightError as exc:
                raise Unreachable(
                    f"cannot connect to the session's Chromium at {info.devtools_url} ({exc.message.splitlines()[0]})",
                    hint="a browser_execute call starts Chromium again; then call fetch_rendered again") from exc
            return self._browser


async def _refuse_any(policy: EgressPolicy, url: str, visited: list[str], refused: list[str]) -> None:
    """Raise `Refused` for the first request `guard` refused, else for the first of `visited`
    (URLs the page went to) that the egress policy refuses."""
    if refused:
        raise Refused(f"{url} was not rendered: the page went to a refused address: {refused[0]}",
                      hint="the session's egress policy decides which addresses pages may reach")
    for hop in visited:
        try:
            await check_url_async(policy, hop)
        except EgressRefused as exc:
            raise Refused(f"{url} was not rendered: it went to {hop}, which is refused: {exc}",
                          hint="the session's egress policy decides which addresses pages may reach") from exc
        except TimeoutError:
            continue


def _redirects(final_url: str, response) -> list[str]:
    """The URLs the navigation was redirected through, then the final one (none: no redirect)."""
    if response is None:
        return []
    hops = []
    request = response.request.redirected_from
    while request is not None:
        hops.append(request.url)
        request = request.redirected_from
    return [*reversed(hops[:-1]), final_url] if hops else []
