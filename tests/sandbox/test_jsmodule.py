"""QuickJS's compiled module on disk: written private, loaded by the next process, refused when
anyone else could have written it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

# A new process each time: the module is made once per process.
_LOAD_AND_RUN = """
from sandbox import _jsmodule, JsEngine
how = _jsmodule.load()
engine = JsEngine(pool_size=1)
import asyncio
async def main():
    async def call_tool(*a): raise RuntimeError("no tools here")
    async def list_tools(*a): return []
    return (await engine.run("6 * 7", call_tool=call_tool, list_tools=list_tools)).value
print(how, asyncio.run(main()))
engine.close()
"""


def _load_in_new_process(cache: Path) -> tuple[str, str]:
    env = {**os.environ, "CODEDESK_WASM_CACHE": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_RUN], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.stderr


def _cwasm(cache: Path) -> Path:
    (found,) = cache.glob("quickjs-[0-9a-f]*.cwasm")  # the module, not its image
    return found


def test_first_process_compiles_and_the_next_loads(tmp_path):
    """The first process compiles QuickJS and writes the module at 0600 in a 0700 folder; the
    next loads it, and runs work the same from either."""
    cache = tmp_path / "cache"
    assert _load_in_new_process(cache)[0] == "compiled 42"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(_cwasm(cache).stat().st_mode) == 0o600
    assert _load_in_new_process(cache)[0] == "loaded 42"


def test_a_module_others_could_write_is_not_loaded(tmp_path):
    """A .cwasm readable or writable by others is native code someone may have changed: it is
    compiled afresh with a warning naming the file, and replaced by a private one."""
    cache = tmp_path / "cache"
    _load_in_new_process(cache)
    cwasm = _cwasm(cache)
    cwasm.chmod(0o644)
    out, err = _load_in_new_process(cache)
    assert out == "compiled 42"
    assert str(cwasm) in err
    assert stat.S_IMODE(cwasm.stat().st_mode) == 0o600
    assert _load_in_new_process(cache)[0] == "loaded 42"


def test_an_open_cache_folder_is_not_used(tmp_path):
    """A cache folder others may write into is not used at all: nothing is written there."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    out, err = _load_in_new_process(cache)
    assert out == "compiled 42"
    assert "0700" in err
    assert list(cache.iterdir()) == []


def test_a_corrupt_module_is_compiled_afresh(tmp_path):
    """A truncated .cwasm (a crash mid-write by an older version, a full disk) is not fatal."""
    cache = tmp_path / "cache"
    _load_in_new_process(cache)
    cwasm = _cwasm(cache)
    cwasm.write_bytes(cwasm.read_bytes()[:1000])
    assert _load_in_new_process(cache)[0] == "compiled 42"
    assert _load_in_new_process(cache)[0] == "loaded 42"


def test_the_interrupt_polls_module_is_kept_the_same_way(tmp_path):
    """The interrupt poll's small module is written private beside QuickJS's; a truncated one, or
    one others could write, is compiled afresh with a warning naming it, and replaced."""
    cache = tmp_path / "cache"
    _load_in_new_process(cache)
    (poll,) = cache.glob("quickjs-poll-*.cwasm")
    assert stat.S_IMODE(poll.stat().st_mode) == 0o600
    whole = poll.read_bytes()
    poll.write_bytes(whole[:1000])
    out, err = _load_in_new_process(cache)
    assert out == "loaded 42"  # QuickJS's own module is untouched
    assert str(poll) in err
    assert poll.read_bytes() == whole
    poll.chmod(0o644)
    out, err = _load_in_new_process(cache)
    assert out == "loaded 42" and str(poll) in err
    assert stat.S_IMODE(poll.stat().st_mode) == 0o600


_GUEST_WRITES_FD = """
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "to-stdout\\n")
  (func (export "write") (param $fd i32) (result i32)
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 10))
    (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8))))
"""

_WRITE_LIKE_QUICKJS_RS = f"""
import wasmtime
from sandbox import _jsmodule
from quickjs_rs import _engine
_jsmodule.load()
wasm = _engine.wasmtime  # what quickjs-rs makes its stores and WASI configs with
store = wasm.Store(_jsmodule.shared.shared_wasmtime_engine())
wasi = wasm.WasiConfig()
wasi.inherit_stdout()
wasi.inherit_stderr()
store.set_wasi(wasi)
linker = wasmtime.Linker(store.engine)
linker.define_wasi()
instance = linker.instantiate(store, wasmtime.Module(store.engine, {_GUEST_WRITES_FD!r}))
write = instance.exports(store)["write"]
write(store, 1)
write(store, 2)
"""


def test_the_js_guest_cannot_write_to_the_processes_stdout(tmp_path):
    """Over the stdio transport the runtime's stdout is the MCP channel: a guest made the way
    quickjs-rs makes one writes nothing there, while its stderr still reaches the log."""
    env = {**os.environ, "CODEDESK_WASM_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", _WRITE_LIKE_QUICKJS_RS], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "to-stdout" in done.stderr
