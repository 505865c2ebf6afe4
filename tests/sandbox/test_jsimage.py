"""The pre-initialized QuickJS image (`sandbox._jsimage`): every run's VM starts from it, each
in its own instance sharing nothing with the others, and a damaged or foreign image on disk is
refused and built again."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import subprocess
import sys
import threading
from pathlib import Path

from sandbox import JsEngine, js
from sandbox._wasmcall import EngineError

from .conftest import vm_made_ahead


async def _no_tools(*args):
    raise RuntimeError("no tools here")


async def _no_listing(*args):
    return []


def _run(engine: JsEngine, code: str):
    return asyncio.run(engine.run(code, call_tool=_no_tools, list_tools=_no_listing))


def test_runs_from_the_image_share_no_state() -> None:
    """A global, a changed prototype, Math.random's sequence: nothing a run leaves is seen by
    the next, though both start from the same image."""
    assert js.image_ready()
    with JsEngine(pool_size=0) as engine:
        first = _run(engine, "globalThis.left = 1; Array.prototype.evil = 2; Object.freeze(Object.prototype); "
                             "[Math.random(), Math.random()]")
        second = _run(engine, "[typeof left, [].evil, Object.isFrozen(Object.prototype), Math.random(), Math.random()]")
    assert first.error is None and second.error is None, (first.error, second.error)
    assert second.value[:3] == ["undefined", None, False]
    assert second.value[3:] != first.value
    assert all(0 <= x < 1 for x in first.value + second.value[3:])


def test_math_random_is_uniform_enough() -> None:
    """The reseeded generator: values spread over [0, 1) and never repeat in a short run."""
    with JsEngine(pool_size=0) as engine:
        out = _run(engine, "const xs = Array.from({length: 20000}, Math.random); "
                           "[Math.min(...xs), Math.max(...xs), xs.reduce((a, b) => a + b) / xs.length, new Set(xs).size]")
    low, high, mean, distinct = out.value
    assert 0 <= low < 0.001 and 0.999 < high < 1
    assert 0.49 < mean < 0.51
    assert distinct == 20000


_LOAD_AND_RUN = """
import asyncio, logging
logging.basicConfig(level=logging.WARNING)
from sandbox import JsEngine, js
assert js.image_ready()
async def main():
    async def call_tool(*a): raise RuntimeError("no tools")
    async def list_tools(*a): return []
    return (await engine.run("6 * 7", call_tool=call_tool, list_tools=list_tools)).value
engine = JsEngine(pool_size=0)
print(asyncio.run(main()))
engine.close()
"""


def _in_new_process(cache: Path) -> str:
    env = {**os.environ, "CODEDESK_WASM_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", _LOAD_AND_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "42", done.stderr
    return done.stderr


def _image(cache: Path) -> tuple[Path, Path]:
    (module,) = cache.glob("quickjs-image-*.cwasm")
    return module, module.with_suffix(".json")


def test_a_corrupted_or_foreign_image_is_refused_and_built_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert "not loading the JS image" not in _in_new_process(cache)
    module, sidecar = _image(cache)
    assert "not loading the JS image" not in _in_new_process(cache)  # loaded as written

    data = bytearray(module.read_bytes())
    data[len(data) // 2] ^= 0xFF
    module.write_bytes(bytes(data))
    said = _in_new_process(cache)
    assert "not loading the JS image" in said and "corrupted or replaced" in said
    assert "not loading the JS image" not in _in_new_process(cache)  # built again, then loaded

    sidecar.write_text(sidecar.read_text().replace('"key": "', '"key": "0'))
    said = _in_new_process(cache)
    assert "made from another module or guest API" in said

    module.chmod(0o644)
    said = _in_new_process(cache)
    assert "must be this user's" in said


def test_the_image_loaded_is_the_file_whose_bytes_were_checked(tmp_path: Path) -> None:
    """The image's module is mapped through the descriptor its checked bytes were read from: a
    file put at its path after the check is not what is loaded."""
    from quickjs_rs import _wasmtime as shared

    from sandbox import _jsimage, _jsmodule

    assert js.image_ready()
    folder = _jsmodule.private_cache_dir()
    assert folder is not None
    checked = next(folder.glob("quickjs-image-*.cwasm"))
    copy = tmp_path / checked.name
    copy.write_bytes(checked.read_bytes())
    with copy.open("rb") as file:
        data = file.read()
        copy.unlink()
        copy.write_bytes(b"not a module")  # put at its path after the check
        module = _jsimage._module_of(shared.shared_wasmtime_engine(), file, data)
    assert module.serialize() == data


def test_cache_files_no_process_used_for_a_month_are_removed(tmp_path: Path) -> None:
    """A process marks the module and image it uses as used, and removes the cache's files of
    other keys that no process used for 30 days (an upgrade leaves them behind), and writes
    left half done a day ago; recent files of other keys (another install's), a write under way
    and files not named as the cache names them are left alone."""
    cache = tmp_path / "cache"
    _in_new_process(cache)
    in_use = sorted(cache.iterdir())
    day = 86400
    aged = {
        "quickjs-image-0123456789abcdef.cwasm": 31, "quickjs-image-0123456789abcdef.json": 31,
        "quickjs-0123456789abcdef-wasmtime1.0.0-epochs.cwasm": 31, ".quickjs-abcd.tmp": 2,  # gone
        "quickjs-image-fedcba9876543210.cwasm": 20, ".quickjs-efgh.tmp": 0, "notes.txt": 60,  # kept
    }
    now = time.time()
    for name, days in aged.items():
        (cache / name).write_bytes(b"x")
        (cache / name).chmod(0o600)
        os.utime(cache / name, (now - days * day, now - days * day))
    for path in in_use:  # used 40 days ago, and now
        os.utime(path, (now - 40 * day, now - 40 * day))

    assert "not loading the JS image" not in _in_new_process(cache)
    left = {path.name for path in cache.iterdir()}
    assert left == {path.name for path in in_use} | {"quickjs-image-fedcba9876543210.cwasm", ".quickjs-efgh.tmp",
                                                      "notes.txt"}
    assert all(time.time() - path.stat().st_mtime < 600 for path in in_use)


def test_the_vms_of_ended_runs_are_closed_while_runs_keep_coming() -> None:
    """The VMs of ended runs are closed on the loop between runs, and when the loop has no turn
    for it (these runs never let it run), on the maker's thread `_OVERDUE_SECONDS` after a run
    ended, or once `_ENDED_MAX` wait (each holds a slot): a second of back-to-back runs leaves
    only a few to close, and once the runs stop, none."""

    async def back_to_back() -> tuple[int, int]:
        runs = most = 0
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            result = await engine.run("1", call_tool=_no_tools, list_tools=_no_listing)
            assert result.value == 1
            runs += 1
            most = max(most, len(engine._ended))
        deadline = time.monotonic() + 5
        while engine._ended and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return runs, most

    with JsEngine() as engine:
        runs, most = asyncio.run(back_to_back())
        assert runs > 50
        assert most <= 2 * js._ENDED_MAX, (runs, most)  # piled up for 50 ms, it was dozens
        assert not engine._ended


def test_a_big_vm_is_closed_off_the_loop_and_small_ones_on_it(monkeypatch) -> None:
    """Unmapping a VM that grew past `_CLOSE_HERE_BYTES` takes a while, so it is closed on the
    maker's thread, not on the loop that serves every run; an empty run's VM closes on the loop."""
    closed: list[tuple[int, str]] = []
    close_vm = js._JsRun.close_vm

    def recording(run: js._JsRun) -> None:
        if run.vm is not None:
            closed.append((run.vm.guest.memory_bytes(), threading.current_thread().name))
        close_vm(run)

    monkeypatch.setattr(js._JsRun, "close_vm", recording)

    async def runs() -> None:
        big = await engine.run("const s = 'x'.repeat(24 << 20); s.length", call_tool=_no_tools,
                               list_tools=_no_listing)
        assert big.value == 24 << 20
        await vm_made_ahead(engine)
        assert (await engine.run("1", call_tool=_no_tools, list_tools=_no_listing)).value == 1
        deadline = time.monotonic() + 10
        while len(closed) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    with JsEngine() as engine:
        asyncio.run(runs())
    (big_bytes, big_thread), (small_bytes, small_thread) = sorted(closed[:2], reverse=True)
    assert big_bytes > js._CLOSE_HERE_BYTES >= small_bytes
    assert big_thread.startswith("js-vm-maker")
    assert small_thread == threading.current_thread().name


def test_an_engine_whose_first_vm_cannot_be_made_still_runs_scripts(monkeypatch, caplog) -> None:
    """The first VM is made as the engine is; when that fails, the engine is made all the same,
    says why, and its runs go on (making their own VMs if need be)."""
    made = js._Vm
    refused: list[bool] = []

    def first_refused(*args, **kwargs):
        if not refused:
            refused.append(True)
            raise EngineError("refused for the test")
        return made(*args, **kwargs)

    monkeypatch.setattr(js, "_Vm", first_refused)
    with caplog.at_level(logging.WARNING, logger="sandbox.js"), JsEngine() as engine:
        assert _run(engine, "6 * 7").value == 42
    assert refused and "could not make a JS VM ahead: refused for the test" in caplog.text
