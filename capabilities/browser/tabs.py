"""Named tabs of the desktop's own Chromium, reached over its DevTools endpoint.

`TabRegistry` holds the one Playwright connection of the server and the named tabs:
- a tab is created on first use (the first tab opens Chromium's window, maximised) and
  found again by later calls, also after a server restart: `<data>/browser/tabs.json`
  maps each name to its DevTools target id and last URL;
- calls on one tab run one at a time, in arrival order; different tabs run concurrently;
- when Chromium is gone (closed by the person, or crashed) the next call starts it again
  with the session's `chromium_command`, as the desktop user, and reopens the named tabs
  at their last URLs before running.

Errors: `BrowserUnavailable` (an `errors.Unavailable`) when Chromium cannot be reached or
started; its message says what to check.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import anyio
from playwright.async_api import Browser, BrowserContext, Page, Playwright, async_playwright
from playwright.async_api import Error as PlaywrightError

from capabilities.egress import EgressConfigError, EgressPolicy, EgressRefused
from capabilities.session import SessionInfo, SessionNotFound, read_session

from .desktop_env import desktop_env
from .errors import Unavailable
from .page_egress import check_url
from .page_events import TabEvents, watch
from .page_files import Downloads

CHROMIUM_START_TIMEOUT_S = 20.0
RESTORE_TIMEOUT_MS = 45_000
CLOSE_WAIT_S = 10.0
"""How long closing a tab waits for Chromium to confirm: Chromium accepts a close that races a
navigation and may then never report the target gone, and Playwright waits for that report."""


class BrowserUnavailable(Unavailable):
    """Chromium's DevTools endpoint cannot be reached, and starting Chromium did not help."""


@dataclass
class NamedTab:
    """One named tab: its page (None until opened, or after Chromium went away), its queue
    (a lock taken in arrival order) and what is remembered of it across restarts."""

    name: str
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    page: Page | None = None
    target_id: str = ""
    url: str = "about:blank"
    events: TabEvents = field(default_factory=TabEvents)


class TabRegistry:
    """The server's connection to the session's Chromium and its named tabs.

    Created once per server; connects lazily on the first call (`use`).
    """

    def __init__(self, load_session: Callable[[], SessionInfo] = read_session) -> None:
        self._load_session = load_session
        self._session: SessionInfo | None = None
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._connect_lock = anyio.Lock()
        # Chromium renders only the front tab of a window; a background tab's screenshot
        # takes seconds. Screenshots bring their tab to front, one at a time.
        self._screen_lock = anyio.Lock()
        self._tabs: dict[str, NamedTab] = {}
        self._downloads: Downloads | None = None
        self._loaded_state = False

    # ---- public

    @asynccontextmanager
    async def use(self, name: str) -> AsyncIterator[NamedTab]:
        """Hold the named tab for one call: waits for earlier calls on it, makes sure Chromium
        and the tab's page exist, and remembers the tab's URL afterwards."""
        tab = self._tabs.get(name)
        if tab is None:
            tab = self._tabs[name] = NamedTab(name)
        async with tab.lock:
            await self._ready(tab)
            try:
                yield tab
            finally:
                if tab.page is not None and not tab.page.is_closed() and tab.page.url != tab.url:
                    tab.url = tab.page.url
                    self._save_state()

    async def screenshot(
        self, tab: NamedTab, *, full_page: bool = False, timeout_ms: float | None = None, clip: dict | None = None
    ) -> bytes:
        """A PNG of the tab's page (or of the clip region), taken with the tab in front."""
        page = tab.page
        assert page is not None
        async with self._screen_lock:
            await page.bring_to_front()
            return await page.screenshot(full_page=full_page, type="png", timeout=timeout_ms, clip=clip)

    async def downloads(self) -> Downloads:
        """The downloads watcher of the current connection."""
        await self._context()
        assert self._downloads is not None
        return self._downloads

    @property
    def session(self) -> SessionInfo:
        """The session's facts (read on first use, again on each reconnect)."""
        if self._session is None:
            self._session = self._load_session_or_explain()
        return self._session

    async def describe(self) -> list[dict[str, str]]:
        """The named tabs: name, URL and title (title "" for a tab not open now)."""
        described = []
        for tab in list(self._tabs.values()):
            page = tab.page
            open_now = page is not None and not page.is_closed()
            if not open_now and tab.url == "about:blank" and not tab.target_id:
                continue  # closed, or never opened
            title = ""
            if open_now:
                try:
                    title = await page.title()
                except PlaywrightError:
                    open_now = False
            described.append({"name": tab.name, "url": page.url if open_now else tab.url, "title": title})
        return described

    async def open_pages(self) -> list[Page]:
        """Every page open in the session's Chromium, the person's own tabs too, connecting if
        needed; [] when Chromium is not running (it is not started for this)."""
        if self._browser is None or not self._browser.is_connected():
            self._session = self._load_session_or_explain()
            if not await self._endpoint_up():
                return []
        return list((await self._context()).pages)

    async def close(self, tab: NamedTab) -> None:
        """Close the tab's page and forget where it was (call inside `use`); a later call with
        the same name starts a fresh tab."""
        page, tab.page = tab.page, None
        tab.target_id, tab.url = "", "about:blank"
        self._save_state()
        if page is not None and not page.is_closed():
            with anyio.move_on_after(CLOSE_WAIT_S):
                try:
                    await page.close()
                except PlaywrightError:
                    pass  # Chromium went away meanwhile: the tab is closed either way

    async def start_driver(self) -> None:
        """Start Playwright's driver (about a second) ahead of the first call. It does not
        touch Chromium: connecting is left to the first call, so the person's own browsing
        is not handled by this server before then."""
        async with self._connect_lock:
            if self._playwright is None:
                self._playwright = await async_playwright().start()

    async def aclose(self) -> None:
        """Disconnect from Chromium (which keeps running) and stop Playwright's driver."""
        if self._playwright is not None:
            await self._playwright.stop()
            self._playwright = None
            self._browser = None

    async def _ready(self, tab: NamedTab) -> None:
        """Make sure Chromium is connected and the tab's page is open and in front."""
        for attempt in (1, 2):
            context = await self._context()
            try:
                if tab.page is None or tab.page.is_closed():
                    await self._open(context, tab)
                else:
                    # The people watching see the tab being worked on, and a background
                    # tab renders (and so screenshots) slowly.
                    await tab.page.bring_to_front()
                return
            except PlaywrightError:
                # Chromium went away between the check and the use: connect again, once.
                if attempt == 2:
                    raise
                tab.page = None

    # ---- connection

    async def _context(self) -> BrowserContext:
        async with self._connect_lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser.contexts[0]
            self._session = self._load_session_or_explain()
            self._load_state()
            if self._playwright is None:
                self._playwright = await async_playwright().start()
            restarted = False
            if not await self._endpoint_up():
                await self._start_chromium()
                restarted = True
            try:
                self._browser = await self._playwright.chromium.connect_over_cdp(
                    self._session.devtools_url, timeout=CHROMIUM_START_TIMEOUT_S * 1000
                )
            except PlaywrightError as exc:
                raise BrowserUnavailable(
                    f"cannot connect to Chromium at {self._session.devtools_url}: {exc.message}; "
                    "check the desktop session with `codedesk desktop status`"
                ) from exc
            context = self._browser.contexts[0]
            # Playwright points Chromium's downloads at its own folder, which Chromium (the
            # desktop user) cannot write: downloads, the person's too, go to the session's.
            self._downloads = Downloads(await self._browser.new_browser_cdp_session(), self._session)
            await self._downloads.start()
            for tab in self._tabs.values():
                tab.page = None
            await self._bind_open_pages(context)
            if restarted:
                await self._restore(context)
            return context

    def _load_session_or_explain(self) -> SessionInfo:
        try:
            return self._load_session()
        except SessionNotFound as exc:
            raise BrowserUnavailable(str(exc)) from exc

    async def _endpoint_up(self) -> bool:
        """Whether something accepts connections at the DevTools endpoint (Chromium opens the
        port once it is ready for DevTools clients)."""
        assert self._session is not None
        url = urlsplit(self._session.devtools_url)
        try:
            with anyio.fail_after(2):
                stream = await anyio.connect_tcp(url.hostname or "127.0.0.1", url.port or 80)
        except (OSError, TimeoutError):
            return False
        await stream.aclose()
        return True

    async def _start_chromium(self) -> None:
        """Start Chromium again in the session's profile, as the desktop user, and wait for
        its DevTools endpoint."""
        info = self._session
        assert info is not None
        if not info.chromium_command:
            raise BrowserUnavailable(
                "Chromium is not running and the session has no chromium_command to start it; "
                "restart the session with `codedesk desktop up`"
            )
        as_user = {}
        if os.geteuid() == 0 and info.uid != 0:
            as_user = {"user": info.uid, "group": info.gid, "extra_groups": []}
        try:
            # `setsid -f` forks Chromium off and returns: it is not a child of this server,
            # so stopping the server (which may kill its process tree) leaves it running.
            await anyio.to_thread.run_sync(partial(
                subprocess.run,
                ["setsid", "-f", *info.chromium_command],
                env=desktop_env(info),  # never this server's own (it may hold the runtime's token)
                cwd=str(info.home) if Path(info.home).is_dir() else None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
                check=True,
                **as_user,
            ))
        except (OSError, subprocess.SubprocessError) as exc:
            raise BrowserUnavailable(f"cannot start Chromium ({info.chromium_command[0]}): {exc}") from exc
        deadline = time.monotonic() + CHROMIUM_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if await self._endpoint_up():
                return
            await anyio.sleep(0.1)
        raise BrowserUnavailable(
            f"Chromium was started again but its DevTools endpoint {info.devtools_url} did not answer "
            f"within {CHROMIUM_START_TIMEOUT_S:.0f} s; is another Chromium using the profile "
            f"{info.chrome_profile}?"
        )

    # ---- tabs

    async def _open(self, context: BrowserContext, tab: NamedTab) -> None:
        """Open the tab's page (at its last URL when it had one), or find it when another
        server process of the session opened it meanwhile."""
        entry = self._read_saved().get(tab.name, {})
        other = str(entry.get("target", ""))
        if other and other != tab.target_id:
            for page in context.pages:
                if await _target_id(page) == other:
                    tab.page, tab.target_id, tab.url = page, other, str(entry.get("url", tab.url))
                    watch(page, tab.events)
                    await page.bring_to_front()
                    return
        first_window = not context.pages
        page = await context.new_page()
        tab.page = page
        watch(page, tab.events)
        tab.target_id = await _target_id(page)
        if first_window:
            await self._maximise(page)
        self._save_state()
        if tab.url and tab.url != "about:blank" and await self._may_open(tab.url):
            try:
                await page.goto(tab.url, wait_until="domcontentloaded", timeout=RESTORE_TIMEOUT_MS)
            except PlaywrightError:
                pass  # the page may be gone; the call's own steps say what they find

    async def _may_open(self, url: str) -> bool:
        """Whether the session's egress policy lets a tab be reopened at `url` (a page may have
        navigated itself somewhere `navigate` would refuse)."""
        assert self._session is not None
        try:
            await check_url(EgressPolicy.from_session(self._session), url)
        except (EgressRefused, EgressConfigError, TimeoutError):
            return False
        return True

    async def _maximise(self, page: Page) -> None:
        assert self._browser is not None
        cdp = await self._browser.new_browser_cdp_session()
        try:
            window = await cdp.send("Browser.getWindowForTarget", {"targetId": await _target_id(page)})
            if window["bounds"].get("windowState") == "normal":
                await cdp.send(
                    "Browser.setWindowBounds",
                    {"windowId": window["windowId"], "bounds": {"windowState": "maximized"}},
                )
        finally:
            await cdp.detach()

    async def _bind_open_pages(self, context: BrowserContext) -> None:
        """After (re)connecting, find the named tabs among Chromium's open pages."""
        wanted = {tab.target_id: tab for tab in self._tabs.values() if tab.target_id}
        if not wanted:
            return
        for page in context.pages:
            tab = wanted.get(await _target_id(page))
            if tab is not None:
                tab.page = page
                watch(page, tab.events)

    async def _restore(self, context: BrowserContext) -> None:
        """Chromium was started again: reopen every named tab at its last URL."""
        for tab in list(self._tabs.values()):
            if tab.page is None and (tab.target_id or tab.url != "about:blank"):
                await self._open(context, tab)

    # ---- remembered state: <data>/browser/tabs.json

    def _state_path(self) -> Path:
        assert self._session is not None
        return self._session.data_dir / "browser" / "tabs.json"

    def _read_saved(self) -> dict[str, dict]:
        try:
            saved = json.loads(self._state_path().read_text())
        except (OSError, ValueError):
            return {}
        tabs = saved.get("tabs", {}) if isinstance(saved, dict) else {}
        return {str(k): v for k, v in tabs.items() if isinstance(v, dict)}

    def _load_state(self) -> None:
        if self._loaded_state:
            return
        self._loaded_state = True
        for name, entry in self._read_saved().items():
            tab = self._tabs.setdefault(name, NamedTab(name))
            tab.target_id = str(entry.get("target", ""))
            tab.url = str(entry.get("url", "about:blank"))

    def _save_state(self) -> None:
        """Write this server's tabs into tabs.json, keeping the entries of names it does not
        know (another server process may share the session)."""
        if self._session is None:
            return
        path = self._state_path()
        tabs = self._read_saved()
        for tab in self._tabs.values():
            if tab.target_id or tab.url != "about:blank":
                tabs[tab.name] = {"target": tab.target_id, "url": tab.url}
            else:
                tabs.pop(tab.name, None)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"tabs": tabs}, indent=1))
            os.replace(tmp, path)
        except OSError:
            pass  # remembering tabs is a convenience; the call itself must not fail for it


async def _target_id(page: Page) -> str:
    """The DevTools target id of a page (stable while Chromium runs)."""
    cdp = await page.context.new_cdp_session(page)
    try:
        info = await cdp.send("Target.getTargetInfo")
    finally:
        await cdp.detach()
    return info["targetInfo"]["targetId"]
