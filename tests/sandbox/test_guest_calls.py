"""Calls into a JS VM's exports (`sandbox._wasmcall._c`): made through wasmtime's
`wasmtime_func_call_unchecked`, each export's values placed in one array of raw values as its
signature says. Numbers of every kind cross both ways, and a call that traps or is stopped leaves
the VM's next calls working (the trap its calls share is taken, not left for the next)."""

from __future__ import annotations

import json
import time

import pytest

from sandbox import js
from sandbox._wasmcall import Interrupted, Trap


@pytest.fixture
def vm():
    made = js._Vm(js._DEFAULT_HEAP_MB)
    made.guest.make_ready()
    made.guest.deadline = time.monotonic() + 30
    yield made
    made.close()


def test_numbers_of_every_kind_cross_into_the_guest_and_back(vm: js._Vm) -> None:
    inst = vm.guest._ctx._inst
    for value in (0, -3, 2**31 - 1, -(2**31), 2**40, 2.5, -1e300, 5e-324, True, False):
        handle = inst.python_to_handle(value)
        assert inst.handle_to_python(handle, allow_opaque=False) == value
        inst.c("free_value", handle)


def test_after_a_call_that_trapped_the_runs_console_is_still_read(vm: js._Vm) -> None:
    """As `_JsRun._failed` does after a trap (the wasm stack exhausted): one short call for the
    console lines, which must not fail with the trap of the call before."""
    guest = vm.guest
    with pytest.raises(Trap):
        guest.eval("console.log('before'); function f() { return f() + 1 } f()", top_level_await=False)
    out = json.loads(guest.call_for_text(vm.step_fn, 0, 0, 1000))
    assert [text for _, text in out["console"]] == ["before"]


def test_a_call_stopped_at_the_epoch_deadline_leaves_the_next_calls_working(vm: js._Vm) -> None:
    guest = vm.guest
    guest.trap_within(0)  # the store's epoch deadline: now
    with pytest.raises(Interrupted):
        guest.eval("for (;;) {}", top_level_await=False)
    guest.trap_within(None)
    value = guest.eval("6 * 7", top_level_await=False)
    assert guest.call_for_text(vm.step_fn, 1, value, 1000).endswith('"done":true,"value":42}')
