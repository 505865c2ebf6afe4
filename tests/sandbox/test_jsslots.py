"""JS VMs from wasmtime's pooling allocator (`sandbox._jsmodule._pooled`): a VM's memory is a
slot that VMs before it used. It starts as the image all the same, nothing of theirs left; its
pages are already its own (no copy-on-write fault on its run's way); and past the slots a process
holds, a VM is refused with a clear error until others close."""

from __future__ import annotations

import asyncio
import ctypes
import struct
import subprocess
import sys

import pytest
import wasmtime

from sandbox import JsEngine, js
from sandbox._jsmodule import MAX_VMS, TOO_MANY_VMS

_PAGE = 4096
_GROW_PAGES = 64  # wasm pages (64 KiB): 4 MiB, past the bytes a slot keeps


def _vm() -> js._Vm:
    return js._Vm(js._DEFAULT_HEAP_MB)


def _memory(vm: js._Vm, start: int = 0, end: int | None = None) -> bytes:
    guest = vm.guest
    end = guest.memory_bytes() if end is None else end
    return ctypes.string_at(guest._memory_address() + start, end - start)


def _own_pages(vm: js._Vm) -> set[int]:
    """The pages of the VM's memory that are present and its own (not the image's, shared),
    from the kernel's page map."""
    guest = vm.guest
    first, count = guest._memory_address() // _PAGE, guest.memory_bytes() // _PAGE
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = pagemap.read(count * 8)
    return {i for i, (entry,) in enumerate(struct.iter_unpack("<Q", entries))
            if entry >> 63 and not (entry >> 61) & 1}


def _scribbled(count: int) -> set[int]:
    """Make `count` VMs at once, grow each one's memory past what its slot keeps, write 0xA5 over
    all of it, and close them: the addresses of their memories."""
    vms = [_vm() for _ in range(count)]
    addresses = set()
    for vm in vms:
        guest = vm.guest
        assert guest._memory.grow(guest._store, _GROW_PAGES) > 0
        ctypes.memset(guest._memory_address(), 0xA5, guest.memory_bytes())
        addresses.add(guest._memory_address())
        vm.close()
    return addresses


def test_a_vm_in_a_slot_others_used_starts_as_the_image_with_nothing_of_theirs() -> None:
    """VMs that wrote over all of their memory, grown past what a slot keeps, leave nothing: the
    VMs made in their slots read the image's bytes, and what they grow reads zeros."""
    first = _vm()
    try:
        image = _memory(first)
    finally:
        first.close()
    left = _scribbled(6)
    reused = 0
    for _ in range(6):
        vm = _vm()
        try:
            guest = vm.guest
            reused += guest._memory_address() in left
            assert _memory(vm) == image
            size = guest.memory_bytes()
            assert guest._memory.grow(guest._store, _GROW_PAGES) > 0
            assert _memory(vm, size).count(0) == _GROW_PAGES << 16
        finally:
            vm.close()
    assert reused, "no VM was made in a slot another had used"


def test_a_vm_in_a_used_slot_has_the_pages_its_last_vm_wrote_already_its_own() -> None:
    """A run's first writes to its memory make no copy-on-write copy: closing a VM put the image's
    bytes back in its slot's own pages, and the next VM there writes those."""
    vm = _vm()
    address, image = vm.guest._memory_address(), _memory(vm)
    pages = range(0, len(image) // _PAGE, 5)
    for page in pages:
        ctypes.memset(address + page * _PAGE, image[page * _PAGE] ^ 0xFF, 1)
    vm.close()
    found = []
    for _ in range(8):  # the slot is handed out again (most likely at once)
        again = _vm()
        found.append(again)
        if again.guest._memory_address() == address:
            assert set(pages) <= _own_pages(again)
            assert _memory(again) == image
            break
    else:
        pytest.fail("the slot of a closed VM was not handed out again")
    for made in found:
        made.close()


def _all_slots_taken() -> list[js._Vm]:
    """Make VMs until the process's slots are all taken: those VMs (close them)."""
    held: list[js._Vm] = []
    try:
        with pytest.raises(wasmtime.WasmtimeError) as refused:
            for _ in range(4 * MAX_VMS):
                held.append(_vm())
    except BaseException:
        for vm in held:
            vm.close()
        raise
    assert str(refused.value) == TOO_MANY_VMS
    return held


def _run(engine: JsEngine, code: str):
    async def no_tools(*args):
        return []
    return asyncio.run(engine.run(code, call_tool=no_tools, list_tools=no_tools))


def test_vms_past_what_the_process_holds_are_refused_clearly_and_made_once_others_close() -> None:
    """The slots are a fixed number: a VM past them is refused with an error that says what to
    do, a run that needs one says so, and once VMs close, VMs are made and runs go again."""
    held = _all_slots_taken()
    try:
        assert len(held) >= MAX_VMS - 8  # the session's engines hold a few
        with JsEngine(pool_size=0) as engine:
            out = _run(engine, "6 * 7")
            assert out.error is not None and out.error.kind == "internal"
            assert "retry once some runs have ended" in out.error.message
            for vm in held[:4]:
                vm.close()
            del held[:4]
            assert _run(engine, "6 * 7").value == 42
    finally:
        for vm in held:
            vm.close()


def test_a_run_short_of_a_slot_closes_the_vms_of_ended_runs_first(monkeypatch) -> None:
    """The VMs of ended runs wait to be closed between runs; a run that finds every slot taken
    closes them first and is served."""
    with JsEngine(pool_size=0) as engine:
        monkeypatch.setattr(engine, "_after_run", lambda: None)  # nothing closes them meanwhile
        for _ in range(4):
            assert _run(engine, "1").value == 1
        assert len(engine._ended) == 4
        held = _all_slots_taken()
        try:
            assert _run(engine, "6 * 7").value == 42
            assert len(engine._ended) == 1  # its own
        finally:
            for vm in held:
                vm.close()


_UNDER_ULIMIT_V = """
import asyncio, logging, resource
resource.setrlimit(resource.RLIMIT_AS, (300 << 30, 300 << 30))  # ulimit -v: 300 GiB
logging.basicConfig(level=logging.WARNING)
from sandbox import JsEngine
async def main():
    async def no_tools(*args):
        return []
    with JsEngine() as engine:
        return (await engine.run("6 * 7", call_tool=no_tools, list_tools=no_tools)).value
print(asyncio.run(main()))
"""


def test_a_process_whose_address_space_is_too_small_for_the_slots_runs_js_without_them() -> None:
    """Under a `ulimit -v` below the slots' reservation, the engine is made without them (wasmtime
    would abort the process making it), says so, and runs scripts."""
    done = subprocess.run([sys.executable, "-c", _UNDER_ULIMIT_V], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "42", done.stderr[-2000:]
    assert "without the pool of memory slots" in done.stderr and "ulimit -v" in done.stderr
