"""The runtime's backstop around an engine's run (`Runtime._execute`): an engine that does not
answer within the run's timeout and a grace gets a timeout error; one that fails gets an
internal error that names the failure. Neither takes the runtime down: the next run works."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime import server
from runtime.server import Runtime

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the runtime's


class _Stuck:
    async def run(self, code: str, **_: Any) -> Any:
        await asyncio.sleep(3600)


class _Failing:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def run(self, code: str, **_: Any) -> Any:
        raise self.exc


async def test_an_engine_that_never_answers_or_fails_gets_a_clear_error_and_the_next_run_works(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "TIMEOUT_GRACE_SECONDS", 0.2)
    async with Runtime({}, listing_cache=tmp_path / "t.json") as runtime:
        real = runtime.engine

        def engine_is(engine: Any) -> None:
            async def the_engine(language: str) -> Any:
                return engine
            monkeypatch.setattr(runtime, "engine", the_engine)

        engine_is(_Stuck())
        stuck = await asyncio.wait_for(runtime.run("js", {"code": "1", "timeout_seconds": 0.1}), 10)
        assert stuck.is_error
        assert stuck.content[0].text == "Error: timeout error: the run exceeded timeout_seconds=0.1"

        engine_is(_Failing(RuntimeError("boom")))
        failed = await runtime.run("js", {"code": "1"})
        assert failed.is_error
        assert failed.content[0].text == "Error: internal error in the sandbox: RuntimeError: boom"

        # the engine's own TimeoutError is its failure, not the run's timeout
        engine_is(_Failing(TimeoutError("a socket of its own timed out")))
        own = await runtime.run("js", {"code": "1", "timeout_seconds": 30})
        assert own.content[0].text == ("Error: internal error in the sandbox: "
                                       "TimeoutError: a socket of its own timed out")

        monkeypatch.setattr(runtime, "engine", real)
        again = await runtime.run("js", {"code": "6 * 7"})
        assert not again.is_error
        assert again.content[0].text == "42"
