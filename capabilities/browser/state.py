"""The browser server's state: one object, created by the server's lifespan and closed at
shutdown, that every tool call is handed.

- `tabs`: the `TabRegistry`, the one Playwright connection to the session's Chromium and its
  named tabs (`browser_execute`);
- `desktop`: the `DesktopController`, the one connection to the session's X display and the
  turn every `desktop_execute` call waits for; it reads Chromium's pages (screen.marks)
  through `tabs`' connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from .desktop_tool import DesktopController
from .tabs import TabRegistry


@dataclass
class BrowserState:
    tabs: TabRegistry = field(default_factory=TabRegistry)
    desktop: DesktopController = field(init=False)

    def __post_init__(self) -> None:
        self.desktop = DesktopController(pages=self.tabs)

    async def aclose(self) -> None:
        """Disconnect from Chromium (which keeps running) and from the display."""
        try:
            await self.tabs.aclose()
        finally:
            await anyio.to_thread.run_sync(self.desktop.close)
