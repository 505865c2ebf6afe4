"""QuickJS's interrupt poll answered in wasm, not in Python.

QuickJS polls its interrupt import (`env.host_interrupt`) every few thousand operations.
quickjs-rs answers it with a Python function, so a guest computing in a loop takes the GIL
thousands of times a second: a few such runs in one process make every other thread (the
event loop, the other runs, their console lines) wait for the GIL in a convoy, and runs answer
seconds past their deadlines. Here each VM's poll is a wasm function of a tiny instance in the
VM's own store (its module, `_jsmodule.POLL_WAT`, is kept in the disk cache with QuickJS's),
reading a flag in that instance's memory. The flag is raised at the VM's
deadline by one alarm thread (or at once by `abort()`), so a guest's loop never leaves wasm.

The flag's memory is one page that never grows: its address is fixed for the store's life. The
alarm writes it only under `_lock`, and only for a live flag: `close()` retires the flag under
the same lock before the store is freed.

The instance made here also looks its exports up lazily (`_LazyExports`): wasmtime-py's
`Instance.exports` wraps all 55 of QuickJS's at once, about half of what making a VM from the
image cost (0.28 of 0.55 ms of CPU), where a run uses a handful.
"""

from __future__ import annotations

import ctypes
import functools
import heapq
import itertools
import math
import threading
import time

import wasmtime
from quickjs_rs import _wasmtime as shared
from wasmtime import _ffi
from wasmtime._extern import wrap_extern
from wasmtime._func import enter_wasm

from sandbox import _jsmodule

_import_names: dict[int, list[tuple[str, str]]] = {}  # module id -> its imports, in order
_kept: list[wasmtime.Module] = []
_lock = threading.Lock()  # every write of a flag, and every change of what the alarm will write
_alarms: list[tuple[float, int, Flag, int]] = []  # (when, order, flag, its generation then)
_stale = 0  # alarms in `_alarms` that will never ring: their flag retired, or given another deadline
_STALE_MAX = 64
"""Past this many, and once they are most of `_alarms`, the stale alarms are dropped. Every run
leaves one (its VM is closed long before its deadline): runs back to back kept a timeout's worth
(60 s by default: some 80,000), and once they came due the alarm thread woke for each, in Python
(8% of a core here, taking the GIL as often)."""
_order = itertools.count()
_wake = threading.Condition(_lock)
_alarm_thread: threading.Thread | None = None


class Flag:
    """One VM's interrupt flag: 0 while the guest may run, 1 once it must stop."""

    def __init__(self, store: wasmtime.Store, memory: wasmtime.Memory) -> None:
        self._cell = ctypes.c_int32.from_address(ctypes.addressof(memory.data_ptr(store).contents))
        # Written now, as the VM is made (most are made ahead): the first write to the fresh page
        # is two page faults, which the run's first deadline paid (about 10 us of an empty run).
        self._cell.value = 0
        self._generation = 0  # moves on at every new deadline: older alarms are void
        self._live = True
        self._alarmed = False  # an alarm in `_alarms` is for this flag's deadline now

    @property
    def raised(self) -> bool:
        return self._cell.value != 0

    def set_deadline(self, when: float) -> None:
        """Lower the flag and raise it at `when` (time.monotonic(); inf: never)."""
        global _alarm_thread
        with _lock:
            if not self._live:
                return
            self._generation += 1
            self._void_alarm()
            if when <= time.monotonic():
                self._cell.value = 1
                return
            self._cell.value = 0
            if math.isinf(when):
                return
            heapq.heappush(_alarms, (when, next(_order), self, self._generation))
            self._alarmed = True
            if _alarm_thread is None:
                _alarm_thread = threading.Thread(target=_ring, name="js-interrupt", daemon=True)
                _alarm_thread.start()
            if _alarms[0][2] is self:
                # the alarm is waiting for a later time (or none): it must look again. Otherwise
                # it is left asleep: woken, it would take the GIL from the run just starting.
                _wake.notify()

    def raise_now(self) -> None:
        """Stop the guest at its next poll (any thread)."""
        with _lock:
            if self._live:
                self._generation += 1
                self._void_alarm()
                self._cell.value = 1

    def retire(self) -> None:
        """Before the store is freed: no alarm writes this flag again."""
        with _lock:
            self._live = False
            self._void_alarm()

    def _void_alarm(self) -> None:
        """Under `_lock`: this flag's alarm, if it has one, will never ring (see `_STALE_MAX`)."""
        global _stale
        if not self._alarmed:
            return
        self._alarmed = False
        _stale += 1
        if _stale > _STALE_MAX and 2 * _stale > len(_alarms):
            _alarms[:] = [alarm for alarm in _alarms if _rings(alarm)]
            heapq.heapify(_alarms)
            _stale = 0


def _rings(alarm: tuple[float, int, Flag, int]) -> bool:
    """Whether `alarm` is still its flag's deadline."""
    _, _, flag, generation = alarm
    return flag._live and flag._generation == generation


def _ring() -> None:
    global _stale
    with _lock:
        while True:
            if not _alarms:
                _wake.wait()
                continue
            when = _alarms[0][0]
            left = when - time.monotonic()
            if left > 0:
                _wake.wait(left)
                continue
            alarm = heapq.heappop(_alarms)
            if _rings(alarm):
                flag = alarm[2]
                flag._alarmed = False
                flag._cell.value = 1
            else:
                _stale -= 1


def instantiate(artifact: shared.SharedWasmArtifact, store: wasmtime.Store) -> tuple[wasmtime.Instance, Flag]:
    """Instantiate `artifact`'s QuickJS module in `store` with its linker's imports, except the
    interrupt poll: the `poll` of a new flag instance in the same store. (Through wasmtime's C
    API as `wasmtime.Instance` and `Linker.get` do, without wrapping each import in Python.)"""
    if _jsmodule.poll_module is None:
        _jsmodule.load()
    names = _import_names.get(id(artifact.module))
    if names is None:
        names = [(item.module.encode(), item.name.encode()) for item in artifact.module.imports]
        _import_names[id(artifact.module)] = names
        _kept.append(artifact.module)  # the id stays this module's
    poll = _new_instance(store, _jsmodule.poll_module, _externs(0)())
    poll_exports = poll.exports(store)
    imports = _externs(len(names))()
    context, linker = store._context(), artifact.linker.ptr()
    for i, (module, name) in enumerate(names):
        if (module, name) == (b"env", b"host_interrupt"):
            imports[i] = poll_exports["poll"]._as_extern()
        elif not _ffi.wasmtime_linker_get(linker, context, module, len(module), name, len(name),
                                          ctypes.byref(imports[i])):
            raise wasmtime.WasmtimeError(f"item not defined in linker: {module.decode()}.{name.decode()}")
    return _new_instance(store, artifact.module, imports), Flag(store, poll_exports["flag"])


@functools.cache
def _externs(count: int) -> type[ctypes.Array]:
    """The array type of `count` externs (ctypes keeps the types it makes at `*` too: this only
    skips its lookup)."""
    return _ffi.wasmtime_extern_t * count


def _new_instance(store: wasmtime.Store, module: wasmtime.Module, imports: ctypes.Array) -> _LazyInstance:
    raw = _ffi.wasmtime_instance_t()
    with enter_wasm(store) as trap:
        error = _ffi.wasmtime_instance_new(store._context(), module.ptr(), imports, len(imports),
                                           ctypes.byref(raw), trap)
        if error:
            exc = wasmtime.WasmtimeError._from_ptr(error)
            if "concurrent limit" in str(exc):  # the pooling allocator's slots are all taken
                raise _jsmodule.TooManyVms() from exc
            raise exc
    return _LazyInstance._from_raw(raw)  # type: ignore[return-value]


class _LazyExports(dict):
    """An instance's exports by name, each looked up (and wrapped) when first asked for: a dict
    for quickjs-rs, which only indexes it by name."""

    def __init__(self, store: wasmtime.Store, instance: wasmtime.Instance) -> None:
        super().__init__()
        self._store = store
        self._raw = instance._instance  # not the instance, which holds these exports: no cycle

    def __missing__(self, name: str) -> object:
        item = _ffi.wasmtime_extern_t()
        raw = name.encode()
        found = _ffi.wasmtime_instance_export_get(self._store._context(), ctypes.byref(self._raw),
                                                  raw, len(raw), ctypes.byref(item))
        if not found:
            raise KeyError(name)
        extern = self[name] = wrap_extern(item)
        return extern


class _LazyInstance(wasmtime.Instance):
    def exports(self, store: wasmtime.Store) -> _LazyExports:  # type: ignore[override]
        if self._exports is None:
            self._exports = _LazyExports(store, self)  # type: ignore[assignment]
        return self._exports  # type: ignore[return-value]
