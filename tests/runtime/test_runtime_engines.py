"""The process's engines (`runtime.engines`): made once on a thread of their own, awaited by
every caller without blocking the loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from runtime import engines


@pytest.fixture
def slow_engine(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Engines of a language made only once the event returned is set."""
    release = threading.Event()

    def create(language: str) -> str:
        release.wait(10)
        return f"{language} engine"

    monkeypatch.setattr(engines, "_create", create)
    monkeypatch.setattr(engines, "_engines", {})
    return release


def test_a_caller_cancelled_while_the_engine_is_made_leaves_it_to_the_next(slow_engine: threading.Event) -> None:
    """A run cancelled while it waits for the engine stops waiting at once; the engine is still
    made, once, and the next run gets it."""

    async def main() -> tuple[bool, str, str]:
        first = asyncio.create_task(engines.engine("js"))
        await asyncio.sleep(0.05)
        first.cancel()
        try:
            await asyncio.wait_for(first, 1)  # not held until the engine is made
        except asyncio.CancelledError:
            pass
        slow_engine.set()
        second = await asyncio.wait_for(engines.engine("js"), 10)
        return first.cancelled(), second, await engines.engine("js")

    cancelled, second, third = asyncio.run(main())
    assert cancelled
    assert second == third == "js engine"
