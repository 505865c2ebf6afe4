"""What a tab's page reports by itself: console entries, network requests and dialogs.

`watch(page, events)` subscribes a tab's page once, when the registry opens or finds it; the
`console` and `network` operations read (and clear) what came since the last read. Dialogs
(alert, confirm, prompt, beforeunload) never block a batch: each is answered at once, by the
answer a `dialog` step set for the next one, or else by default (alert and beforeunload
accepted, confirm and prompt dismissed), and the step that raised it reports it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import anyio
from playwright.async_api import ConsoleMessage, Dialog, Page, Request
from playwright.async_api import Error as PlaywrightError

KEEP = 500  # entries kept per tab and kind between reads
SETTLE_S = 1.0  # how long a network read waits for requests in flight


@dataclass(frozen=True)
class DialogAnswer:
    accept: bool
    prompt_text: str | None = None


@dataclass
class TabEvents:
    console: deque = field(default_factory=lambda: deque(maxlen=KEEP))
    network: deque = field(default_factory=lambda: deque(maxlen=KEEP))
    dialogs: list[dict[str, Any]] = field(default_factory=list)  # raised during the current step
    next_dialog: DialogAnswer | None = None
    dropped: dict[str, int] = field(default_factory=lambda: {"console": 0, "network": 0})
    in_flight: set = field(default_factory=set)  # requests started, not yet finished or failed
    _settled: anyio.Event = field(default_factory=anyio.Event)

    async def settle(self, timeout_s: float = SETTLE_S) -> None:
        """Wait (briefly) for requests in flight to finish, so a read right after the page
        reacted to a response also lists that request."""
        with anyio.move_on_after(timeout_s):
            while self.in_flight:
                self._settled = anyio.Event()
                await self._settled.wait()

    def _done(self, request: Any) -> None:
        self.in_flight.discard(request)
        if not self.in_flight:
            self._settled.set()

    def take(self, kind: str) -> dict[str, Any]:
        """The entries of `kind` since the last read, and how many were dropped (over KEEP)."""
        entries = list(getattr(self, kind))
        getattr(self, kind).clear()
        dropped, self.dropped[kind] = self.dropped[kind], 0
        out: dict[str, Any] = {"entries": entries}
        if dropped:
            out["dropped"] = dropped
        return out

    def take_dialogs(self) -> list[dict[str, Any]]:
        dialogs, self.dialogs = self.dialogs, []
        return dialogs

    def _keep(self, kind: str, entry: dict[str, Any]) -> None:
        queue = getattr(self, kind)
        if len(queue) == queue.maxlen:
            self.dropped[kind] += 1
        queue.append(entry)


def watch(page: Page, events: TabEvents) -> None:
    """Collect the page's console, network and dialogs into `events`."""

    def on_console(message: ConsoleMessage) -> None:
        location = message.location or {}
        events._keep("console", {
            "type": message.type, "text": message.text,
            "source": f"{location.get('url', '')}:{location.get('lineNumber', 0)}" if location.get("url") else "",
        })

    def on_page_error(error: PlaywrightError) -> None:
        events._keep("console", {"type": "pageerror", "text": str(error), "source": ""})

    def on_request(request: Request) -> None:
        events.in_flight.add(request)

    async def on_request_done(request: Request) -> None:
        status: int | None = None
        try:
            response = await request.response()
            status = response.status if response is not None else None
        except PlaywrightError:
            pass
        timing = request.timing
        elapsed = timing.get("responseEnd", -1)
        events._keep("network", {
            "method": request.method, "url": request.url, "status": status, "type": request.resource_type,
            "ms": round(elapsed, 1) if elapsed is not None and elapsed >= 0 else None,
        })
        events._done(request)

    def on_request_failed(request: Request) -> None:
        events._keep("network", {
            "method": request.method, "url": request.url, "status": None, "type": request.resource_type,
            "failure": request.failure or "failed",
        })
        events._done(request)

    async def on_dialog(dialog: Dialog) -> None:
        answer = events.next_dialog
        events.next_dialog = None
        if answer is None:
            answer = DialogAnswer(accept=dialog.type in ("alert", "beforeunload"))
        entry: dict[str, Any] = {"type": dialog.type, "message": dialog.message,
                                 "answer": "accepted" if answer.accept else "dismissed"}
        events.dialogs.append(entry)
        try:
            if answer.accept:
                await dialog.accept(answer.prompt_text if answer.prompt_text is not None else dialog.default_value)
            else:
                await dialog.dismiss()
        except PlaywrightError:
            pass  # the page went away with its dialog

    page.on("console", on_console)
    page.on("pageerror", on_page_error)
    page.on("request", on_request)
    page.on("requestfinished", on_request_done)
    page.on("requestfailed", on_request_failed)
    page.on("dialog", on_dialog)
