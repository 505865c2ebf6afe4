"""One QuickJS VM in its own wasm instance, driven through quickjs-rs's engine layer.

quickjs-rs's public `Context` drives promises with its own loop: it stops after 100,000 jobs
as if the script were stuck, runs jobs with no deadline when its task is cancelled, and
settles async host calls from tasks that can outlive the eval. Its `Handle.call` runs guest
code with no deadline at all. None of that is acceptable for hostile code, so `GuestVm` uses
the engine layer beneath it (`quickjs_rs._engine`: the wasm instance, its handles and its
job queue) and owns what the public layer decided:

- the interrupt: QuickJS polls its interrupt while it runs, in wasm (`sandbox._jsinterrupt`:
  a Python poll made busy guests hold up every thread); it answers "stop" once the VM's
  `deadline` has passed, in every call into the guest (evaluation, jobs, calls, marshalling),
  and `abort()` makes it answer "stop" at once, from any thread; past the deadline and a grace,
  the store's epoch deadline stops the guest wherever it is (`sandbox._jsmodule`, `Epoch`);
  a call may instead be started to pause there and go on later, on another thread (`Paused`);
- the memory: QuickJS's own limit does not count strings or typed arrays, so the wasm
  store's linear memory is capped as well (`memory.grow` fails past it);
- the threads: a VM is used by one thread at a time, handed over through locks or futures,
  and closed by the thread that used it last. No object here has a finalizer that calls into
  the guest, so garbage collection on another thread never touches a store.

quickjs-rs is pinned (`_FOR_VERSION`); another version is refused at the first VM rather than
driven through internals that may have changed.
"""

from __future__ import annotations

import functools
import math
import struct
import time
from collections.abc import Callable, Generator
from typing import Any

import ctypes
import quickjs_rs
import wasmtime
from quickjs_rs import _engine
from wasmtime import _ffi
from wasmtime._func import maybe_raise_last_exn

from sandbox import _jsinterrupt, _jsmodule
from sandbox._jsimage import Image, from_image
from sandbox._jsmodule import EPOCH_TICK, FAR_EPOCH

_FOR_VERSION = "0.2.6"

JSError = _engine.JSError  # args: (name, message, stack)
EngineError = _engine.QuickJSError  # the engine layer's base error (JSError, MarshalError, ...)
Trap = wasmtime.Trap
WasmtimeError = wasmtime.WasmtimeError


class Interrupted(Exception):
    """A call into the guest stopped at its store's epoch deadline (`GuestVm.trap_within`)."""


GUEST_FAILURES = (EngineError, Trap, WasmtimeError, Interrupted, ValueError)
"""What a call into a guest may raise: a JS exception, a marshalling failure, a trap (stack
exhausted, memory cap hit inside the engine), a stop at the epoch deadline, or ValueError from
a store already closed."""

PENDING, FULFILLED, REJECTED = 0, 1, 2
_JOBS_PER_CALL = 100_000  # the guest's execute_pending_jobs stops after this many

_STACK_BYTES = 1 << 20  # QuickJS's own stack check (quickjs-rs's default)
EPOCH_GRACE_SECONDS = 0.3
"""How long past its deadline a guest that does not poll its interrupt runs before it traps."""
_MIN_MEMORY = 16 << 20  # linear memory the engine needs beyond the JS heap
_MAX_ARGS = 4  # of a call_for_text

Steps = Generator[tuple[str, tuple[int, ...]], Any, Any]
"""Calls into the guest, one at a time (see `GuestVm.now`)."""
OFF_THE_LOOP = ("", ())
"""What steps ask for before they make a call that may run the script's code and is not
started to pause: they go on on the run's thread."""


@functools.cache
def _check_version() -> None:
    found = quickjs_rs.__version__  # the installed package's own (its metadata: 0.5 ms a process)
    if found != _FOR_VERSION:
        raise RuntimeError(
            f"sandbox.js drives quickjs-rs {_FOR_VERSION}'s engine layer; quickjs-rs {found} is "
            f"installed. Install quickjs-rs=={_FOR_VERSION}."
        )


WELL_FORMED_SOURCE = "(() => { const apply = Reflect.apply, w = String.prototype.toWellFormed; " \
                      "return (s) => apply(w, s, []); })()"
"""Made in each VM before any script runs, so no script can change what it does."""


def _get_string(self: Any, handle: int) -> str:
    """quickjs-rs's string accessor (`_Instance._get_string`), for any string. The guest refuses
    to hand out one holding a lone surrogate (a status, not the text), and quickjs-rs then loses
    it: a thrown Error's message read as "", a value as a failure. Such a string is read again
    through the VM's own `toWellFormed` (`GuestVm`), each lone surrogate as U+FFFD."""
    status = self.c("get_string", handle)
    if status == _engine.STATUS_OK:
        return self.take_result().decode()
    repair = getattr(self, "codedesk_well_formed", None)
    if repair is not None and self._type_name(handle) == "string":
        argv = self.alloc_write(struct.pack("<i", handle))
        out = self.alloc_out()
        this = self.c("new_undefined")
        try:
            status = self.c("call_function", repair, this, argv, 1, out)
            repaired = self.read_i32(out)
        finally:
            self.free(argv, 4)
            self.free(out, 4)
            self.c("free_value", this)
        if status == _engine.STATUS_OK:
            try:
                if self.c("get_string", repaired) == _engine.STATUS_OK:
                    return self.take_result().decode()
            finally:
                self.c("free_value", repaired)
        else:
            self.take_exception()  # clear what the call left pending
    raise _engine.MarshalError(f"get_string status={status}")


_engine._Instance._get_string = _get_string

# ---- linear memory: wasmtime-py's `Memory.read` and `write` make a ctypes array type and a
# bytearray copy for each access, and an empty run makes five. quickjs-rs's `read` and
# `alloc_write` are made here with the address wasmtime's C API gives, checked the same way.

_memory_data = _ffi.dll["wasmtime_memory_data"]  # a prototype of our own, answering an address
_memory_data.restype = ctypes.c_void_p
_memory_data.argtypes = [ctypes.POINTER(_ffi.wasmtime_context_t), ctypes.POINTER(_ffi.wasmtime_memory_t)]


def _address(self: Any, ptr: int, length: int) -> int:
    """Where the guest's bytes [ptr, ptr + length) are in this process, checked against the size
    of its memory now."""
    context, memory = self.store._context(), ctypes.byref(self.mem._memory)
    if ptr < 0 or length < 0 or ptr + length > _ffi.wasmtime_memory_data_size(context, memory):
        raise EngineError(f"out-of-range guest access ptr={ptr} len={length}")
    return (_memory_data(context, memory) or 0) + ptr


def _read(self: Any, ptr: int, length: int) -> bytes:
    """quickjs-rs's `_Instance.read`."""
    address = _address(self, ptr, length)
    return ctypes.string_at(address, length) if length else b""


def _write(self: Any, data: bytes, ptr: int) -> None:
    if data:
        ctypes.memmove(_address(self, ptr, len(data)), data, len(data))


def _alloc_write(self: Any, data: bytes) -> int:
    """quickjs-rs's `_Instance.alloc_write`."""
    ptr = self.c("qjs_alloc", len(data))
    if ptr == 0 and data:
        raise EngineError("qjs_alloc returned null")
    _write(self, data, ptr)
    return int(ptr)


_engine._Instance.read = _read
_engine._Instance.alloc_write = _alloc_write

# ---- calls into the guest: wasmtime-py's `Func.__call__` reads the function's type again at every
# call (a FuncType and its ValTypes made and freed, in Python): about 20 us of a ~25 us call, and a
# run with one tool call makes 80 of them. The signature of each QuickJS export is read once here
# and the call made with wasmtime's C API directly, as `Func.__call__` makes it.

_NUMBERS = {_ffi.WASMTIME_I32.value: ("i32", int), _ffi.WASMTIME_I64.value: ("i64", int),
            _ffi.WASMTIME_F32.value: ("f32", float), _ffi.WASMTIME_F64.value: ("f64", float)}
_KIND_OF = {name: kind for kind, (name, _) in _NUMBERS.items()}  # "i32" -> its kind


def _signature(fn: wasmtime.Func, store: wasmtime.Store) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    ty = fn.type(store)
    try:
        return tuple(_KIND_OF[str(t)] for t in ty.params), tuple(_KIND_OF[str(t)] for t in ty.results)
    except KeyError:
        return None


_plain_c = _engine._Instance.c


_RAW_BYTES = ctypes.sizeof(_ffi.wasmtime_val_raw_t)
_VIEWS = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float, "f64": ctypes.c_double}
_VIEW_ORDER = tuple(_VIEWS)  # a `_Call`'s `views`, in this order


class _Shape:
    """What every instance's call of one export shares: its kinds, where each argument and result
    sits in a call's one array of raw values (`_Call`), and `Paused`'s argument and result
    arrays, filled in once as templates (an instance's own are byte copies of them)."""

    __slots__ = ("kinds", "result_field", "width", "raw_type", "view_types", "setters", "getters", "params",
                 "results")

    def __init__(self, signature: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
        kinds, result_kinds = signature
        self.kinds = tuple((kind, *_NUMBERS[kind]) for kind in kinds)
        self.width = max(len(kinds), len(result_kinds), 1)
        self.raw_type = ctypes.c_int32 * (self.width * _RAW_BYTES // 4)
        # the raw array seen as each kind's C type; none needed when every value is an i32
        only_i32 = set(kinds + result_kinds) <= {_ffi.WASMTIME_I32.value}
        self.view_types = () if only_i32 else tuple(
            view * (ctypes.sizeof(self.raw_type) // ctypes.sizeof(view)) for view in _VIEWS.values())
        self.setters = tuple(_place(kind, i) for i, kind in enumerate(kinds))
        self.getters = tuple(_place(kind, i)[:2] for i, kind in enumerate(result_kinds))
        self.params = (_ffi.wasmtime_val_t * len(kinds))()
        for slot, kind in zip(self.params, kinds):
            slot.kind = kind
        self.results = (_ffi.wasmtime_val_t * len(result_kinds))()
        self.result_field = tuple(_NUMBERS[kind][0] for kind in result_kinds)

    def arrays(self) -> tuple[Any, Any]:
        return type(self.params).from_buffer_copy(self.params), type(self.results)()


def _place(kind: int, index: int) -> tuple[int, int, type]:
    """Where the `index`th value of `kind` sits in an array of `wasmtime_val_raw_t` seen as an
    array of that kind's C type (each value at the start of its union, little-endian): which of
    a `_Call`'s `views`, at which index; and the Python type it takes."""
    field, python_type = _NUMBERS[kind]
    return _VIEW_ORDER.index(field), index * (_RAW_BYTES // ctypes.sizeof(_VIEWS[field])), python_type


_shapes: dict[str, _Shape | None] = {}
"""Export name -> its `_Shape`, or None for a function with other than numbers (called the
plain way). QuickJS's module and its image (`sandbox._jsimage`) export the same."""

_call_unchecked = _ffi.dll["wasmtime_func_call_unchecked"]  # a prototype of our own, as `_memory_data`
_call_unchecked.restype = ctypes.c_void_p
_call_unchecked.argtypes = [ctypes.POINTER(_ffi.wasmtime_context_t), ctypes.POINTER(_ffi.wasmtime_func_t),
                            ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]


class _Call:
    """One export of one instance, ready to call: its function and one array of raw values for
    its arguments, then its results, made once (an instance is driven by one thread at a time;
    a host function's call back into it has read its arguments before any call is made there).

    Called through `wasmtime_func_call_unchecked`: the export's signature was read once
    (`_Shape`), so wasmtime need not check each call's values against it again, nor convert
    them from `wasmtime_val_t`s (a short call took 3.1 us, 2.0 now). Unchecked, a value of the
    wrong kind would be read as another: `_c` places each as the signature says, and sends any
    other the checked way."""

    __slots__ = ("func", "kinds", "raw", "views", "setters", "getters", "width", "trap", "trap_ref",
                 "result_field", "started")

    def __init__(self, export: Any, shape: _Shape, trap: Any, trap_ref: Any) -> None:
        self.func = ctypes.byref(export.of.func)  # keeps `export` alive
        self.kinds, self.result_field, self.width = shape.kinds, shape.result_field, shape.width
        self.setters, self.getters = shape.setters, shape.getters
        self.raw = raw = shape.raw_type()  # seen as i32s; as the other kinds through `views`
        self.views = tuple(view.from_buffer(raw) for view in shape.view_types) or (raw,)
        self.trap, self.trap_ref = trap, trap_ref  # the instance's: a `wasm_trap_t *` once a call traps
        self.started: tuple[Any, Any] | None = None  # `Paused`'s own arrays, made at its first


def _prepared(self: Any, name: str) -> _Call | None:
    calls = self.__dict__.get("codedesk_calls")
    if calls is None:
        calls = self.codedesk_calls = {}
        trap = self.codedesk_trap = ctypes.c_void_p()  # taken, and set back to NULL, when a call traps
        self.codedesk_trap_ref = ctypes.byref(trap)
    call = calls.get(name, False)
    if call is False:
        shape = _shapes.get(name, False)
        if shape is False:
            signature = _signature(self._exports[name], self.store)
            shape = _shapes[name] = None if signature is None else _Shape(signature)
        call = calls[name] = None if shape is None else _Call(_export(self, name), shape, self.codedesk_trap,
                                                               self.codedesk_trap_ref)
    return call


def _export(self: Any, name: str) -> Any:
    """The function `name` of this instance as wasmtime's C API has it (not wrapped as a `Func`)."""
    export = _ffi.wasmtime_extern_t()
    raw = name.encode()
    if not _ffi.wasmtime_instance_export_get(self.store._context(), ctypes.byref(self.inst._instance), raw, len(raw),
                                             ctypes.byref(export)) or export.kind != _ffi.WASMTIME_EXTERN_FUNC.value:
        raise KeyError(name)
    return export


def _c(self: Any, name: str, *args: Any) -> Any:
    """quickjs-rs's `_Instance.c` (call an export, this instance published as the active one for
    the host imports' trampolines), with numbers passed and read as wasmtime's C API has them."""
    epoch: Epoch | None = getattr(self.store, "codedesk_epoch", None)
    if epoch is not None:
        if epoch.depth == 0:
            epoch.stopped = False
        epoch.depth += 1
    try:
        calls = self.__dict__.get("codedesk_calls")
        call = calls.get(name) if calls else None
        if call is None:  # not prepared yet, or called the plain way
            call = _prepared(self, name)
        if call is None or len(args) != len(call.kinds):
            return _plain_c(self, name, *args)
        views = call.views
        for (view, index, python_type), value in zip(call.setters, args):
            if not isinstance(value, python_type):
                return _plain_c(self, name, *args)  # which refuses it as wasmtime-py does
            views[view][index] = value
        current = _engine._CUR
        prev = getattr(current, "inst", None)
        current.inst = self
        try:
            error = _call_unchecked(self.store._context(), call.func, call.raw, call.width, call.trap_ref)
        finally:
            current.inst = prev
        if error or call.trap:
            trap, call.trap.value = call.trap.value, None
            _raise_failure(ctypes.cast(error, ctypes.POINTER(_ffi.wasmtime_error_t)) if error else None,
                           ctypes.cast(trap, ctypes.POINTER(_ffi.wasm_trap_t)) if trap else None, epoch)
        getters = call.getters
        if not getters:
            return None
        if len(getters) == 1:
            view, index = getters[0]
            return views[view][index]
        return [views[view][index] for view, index in getters]
    finally:
        if epoch is not None:
            epoch.depth -= 1


def _raise_failure(error: Any, trap: Any, epoch: Epoch | None) -> None:
    """As wasmtime-py's `enter_wasm`: a host function's own exception first; a stop at the
    epoch deadline as `Interrupted`."""
    failure = wasmtime.WasmtimeError._from_ptr(error) if error else Trap._from_ptr(trap)
    maybe_raise_last_exn()
    if epoch is not None and epoch.stopped and epoch.depth <= 1:
        raise Interrupted("the guest was stopped at its epoch deadline") from failure
    raise failure


def _read_results(results: Any, fields: tuple[str, ...]) -> Any:
    if not fields:
        return None
    if len(fields) == 1:
        return getattr(results[0].of, fields[0])
    return [getattr(results[i].of, field) for i, field in enumerate(fields)]


_engine._Instance.c = _c


# ---- the epoch deadline, and calls that pause: a store's epoch deadline comes every tick once
# passed; what then happens is `Epoch`'s to say (one callback for every VM's store). A call
# started with `GuestVm.start` pauses there, in its slice, and goes on from where it was when
# polled again, on any thread: a guest step tried on the caller's loop that computes longer is
# handed, paused, to the run's thread, rather than holding the loop or being thrown away.

_YIELD, _CONTINUE = 1, 0
_DeadlineCallback = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.POINTER(_ffi.wasmtime_context_t), ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint8))
_call_async = _ffi.dll["wasmtime_func_call_async"]  # prototypes of our own, not wasmtime-py's
_call_async.restype = ctypes.c_void_p
_call_async.argtypes = [ctypes.POINTER(_ffi.wasmtime_context_t), ctypes.POINTER(_ffi.wasmtime_func_t),
                        ctypes.POINTER(_ffi.wasmtime_val_t), ctypes.c_size_t, ctypes.POINTER(_ffi.wasmtime_val_t),
                        ctypes.c_size_t, ctypes.POINTER(ctypes.POINTER(_ffi.wasm_trap_t)),
                        ctypes.POINTER(ctypes.POINTER(_ffi.wasmtime_error_t))]
_poll = _ffi.dll["wasmtime_call_future_poll"]
_poll.restype = ctypes.c_bool
_poll.argtypes = [ctypes.c_void_p]
_delete_future = _ffi.dll["wasmtime_call_future_delete"]
_delete_future.restype = None
_delete_future.argtypes = [ctypes.c_void_p]
_on_deadline = _ffi.dll["wasmtime_store_epoch_deadline_callback"]
_on_deadline.restype = None
_on_deadline.argtypes = [ctypes.POINTER(_ffi.wasmtime_store_t), _DeadlineCallback, ctypes.c_void_p, ctypes.c_void_p]


class Epoch:
    """What a VM's store does at its epoch deadline: pause a call started with `GuestVm.start`
    while `slicing`; else go on until `backstop` (time.monotonic()), and stop the guest there."""

    __slots__ = ("depth", "slicing", "backstop", "stopped")

    def __init__(self) -> None:
        self.depth = 0  # calls into the guest under way (a host function may call in again)
        self.slicing = False  # the outermost call pauses at the deadline (`Paused`)
        self.backstop = 0.0  # 0: stop at the deadline
        self.stopped = False  # the outermost call was stopped at the deadline


_epochs: dict[int, Epoch] = {}  # the callback's data -> its store's Epoch
_epoch_keys = iter(range(1, 1 << 62))


@_DeadlineCallback
def _at_deadline(_context: Any, data: int | None, delta: Any, kind: Any) -> int:
    try:
        epoch = _epochs.get(data or 0)
        if epoch is not None:
            if epoch.slicing and epoch.depth == 1:
                delta[0], kind[0] = 1, _YIELD
                return 0
            left = epoch.backstop - time.monotonic()
            if left > 0:
                delta[0] = FAR_EPOCH if math.isinf(left) else max(1, math.ceil(left / EPOCH_TICK))
                kind[0] = _CONTINUE
                return 0
            epoch.stopped = True
    except Exception:  # noqa: BLE001 - whatever went wrong here, the guest stops (fails closed)
        pass
    return ctypes.cast(_ffi.wasmtime_error_new(b"stopped at the epoch deadline"), ctypes.c_void_p).value or 0


def _watch_epoch(store: wasmtime.Store) -> Epoch:
    """Give `store` an `Epoch`, which its epoch deadline consults from now on."""
    key = next(_epoch_keys)
    epoch = _epochs[key] = Epoch()
    store.codedesk_epoch = epoch
    store.codedesk_epoch_key = key
    _on_deadline(store.ptr(), _at_deadline, key, None)
    return epoch


class Paused:
    """A call into the guest started with `GuestVm.start`: `poll` runs it on (from any thread,
    one at a time) until it returns or pauses at the epoch deadline; `result` then reads it. No
    other call may go into the VM until it has returned (or `cancel`)."""

    __slots__ = ("_inst", "_epoch", "_results", "_fields", "_trap", "_error", "_future", "done")

    def __init__(self, inst: Any, name: str, args: tuple[int, ...]) -> None:
        call = _prepared(inst, name)
        if call is None or len(args) != len(call.kinds):
            raise TypeError(f"{name} cannot be started as a paused call")
        epoch: Epoch = inst.store.codedesk_epoch
        if epoch.depth:
            raise RuntimeError("a call is already under way in this VM")
        if call.started is None:  # not `raw`: a host function's calls into the VM use it
            call.started = _shapes[name].arrays()  # type: ignore[union-attr]
        params, self._results = call.started
        for slot, (_kind, field, _type), value in zip(params, call.kinds, args):
            setattr(slot.of, field, value)
        self._inst = inst
        self._epoch = epoch
        self._fields = call.result_field
        self._trap = ctypes.POINTER(_ffi.wasm_trap_t)()
        self._error = ctypes.POINTER(_ffi.wasmtime_error_t)()
        epoch.depth, epoch.stopped, epoch.slicing = 1, False, True
        self._future = _call_async(inst.store._context(), call.func, params, len(params), self._results,
                                   len(self._results), ctypes.byref(self._trap), ctypes.byref(self._error))
        self.done = False

    def poll(self, *, slicing: bool) -> bool:
        """Run the call on until it returns (True) or, with `slicing`, pauses at the deadline."""
        self._epoch.slicing = slicing
        current = _engine._CUR
        prev = getattr(current, "inst", None)
        current.inst = self._inst
        try:
            self.done = bool(_poll(self._future))
        finally:
            current.inst = prev
        return self.done

    def result(self) -> Any:
        """What the returned call answered (or raised)."""
        assert self.done
        self._end()
        if self._error or self._trap:
            _raise_failure(self._error, self._trap, self._epoch)
        return _read_results(self._results, self._fields)

    def cancel(self) -> None:
        """Drop the call where it paused (its VM is not to be used again)."""
        self._end()

    def _end(self) -> None:
        if self._future:
            _delete_future(self._future)
            self._future = None
        self._epoch.depth, self._epoch.slicing = 0, False


def memory_cap(heap_bytes: int) -> int:
    """The wasm linear memory allowed a VM whose JS heap is `heap_bytes`: three times the heap
    (QuickJS's allocator leaves holes as arrays and maps grow) and room for the engine."""
    return min(3 * heap_bytes + _MIN_MEMORY, 4 << 30)


class GuestVm:
    """A fresh QuickJS VM with one sync host function, `host`, installed as `__host`."""

    def __init__(self, heap_bytes: int, host: Callable[..., Any], image: Image | None = None) -> None:
        """`image`: start from a pre-initialized image (`sandbox._jsimage`) instead of booting."""
        _check_version()
        self._deadline = math.inf
        self._armed = False  # the store has an epoch deadline (`_epoch_deadline`)
        self.memory_cap = memory_cap(heap_bytes)
        self.closed = False
        self._slots = 0  # call_for_text's argument slots and answer, in guest memory
        self._undefined = 0
        self._numbers: dict[int, int] = {}  # number -> its handle, made once
        if image is None:
            self._rt = _engine.QjsRuntime(memory_limit=heap_bytes, stack_limit=_STACK_BYTES)
            self._ctx = _engine.QjsContext(self._rt)
        else:  # the boot set the limits (an image is made for one heap limit): they are in its memory
            self._rt = _engine.QjsRuntime()
            with from_image(image):
                self._ctx = _engine.QjsContext(self._rt)
        inst = self._ctx._inst
        self._store = inst.store
        self._flag: _jsinterrupt.Flag = inst.store.codedesk_flag  # the interrupt poll, in wasm
        self._epoch = _watch_epoch(self._store)
        self._paused: Paused | None = None
        self._memory = inst.mem
        try:
            self._store.set_limits(memory_size=self.memory_cap)
            self._ctx.set_host_call_dispatcher(lambda fn_id, args: host(*args))
            if image is None:
                self._ctx.register_host_function("__host", 1, False)
                self._well_formed = self._ctx.eval_handle(WELL_FORMED_SOURCE, promise=False, filename="<input>")
            else:  # what the boot did, already in the image's memory; the host's side of it
                inst.name_to_fn_id.update(image.host_names)
                self._well_formed = self.adopt(image.handles["well_formed"])
                self._slots, self._undefined = image.handles["call_slots"], image.handles["undefined"]
                self._numbers = {int(k.removeprefix("number:")): v for k, v in image.handles.items()
                                 if k.startswith("number:")}
            inst.codedesk_well_formed = self._well_formed._require_live()
        except BaseException:
            self.close()
            raise

    def adopt(self, handle: int) -> Any:
        """A handle of this VM's by its number (one a boot left, valid in every instance of an
        image)."""
        return _engine.QjsHandle._adopt(self._ctx._inst, handle, context=self._ctx)

    @property
    def well_formed_handle(self) -> int:
        """The number of the VM's own `toWellFormed` (kept in an image)."""
        return self._well_formed._require_live()

    @property
    def deadline(self) -> float:
        """When the guest must stop (time.monotonic()): its interrupt answers "stop" from then
        on, and `EPOCH_GRACE_SECONDS` later its compiled code traps wherever it is (a long loop
        inside a builtin, which never polls the interrupt). Set it only from the thread that
        runs the VM, between calls into it."""
        return self._deadline

    @deadline.setter
    def deadline(self, when: float) -> None:
        self._deadline = when
        self._flag.set_deadline(when)
        self.trap_within(None)

    def trap_within(self, ticks: int | None) -> None:
        """Stop the guest wherever it is once the epoch has ticked `ticks` times from now (the
        call raises `Interrupted`); None: `EPOCH_GRACE_SECONDS` past its deadline, as the
        deadline says. From the thread that runs the VM, between calls into it."""
        if ticks is None:
            when = self._deadline
            if math.isinf(when) or self.closed:
                ticks = FAR_EPOCH
            else:
                ticks = max(1, math.ceil((when + EPOCH_GRACE_SECONDS - time.monotonic()) / EPOCH_TICK))
            self.go_on_until_backstop()
        else:
            self._epoch.backstop = 0.0
        self._epoch_deadline(ticks)

    def abort(self) -> None:
        """Make the guest stop at its next interrupt poll (any thread may call this; the store,
        which only its own thread may touch, keeps its epoch deadline)."""
        self._deadline = -math.inf
        self._flag.raise_now()

    # -- running code --

    def eval(self, code: str, *, top_level_await: bool) -> Any:
        """Evaluate a script: its value, or with `top_level_await` the promise of its
        {value} envelope. Raises JSError for what the script throws.

        As quickjs-rs's `eval_handle` (whose source transform does nothing without transform
        flags, which no VM here has), with the handle answered in the VM's own slot: three calls
        into the guest rather than five."""
        inst = self._ctx._inst
        out = self._answer_slot()
        data = code.encode()
        source = inst.alloc_write(data)
        try:
            status = inst.c("eval_async" if top_level_await else "eval_code", source, len(data), out)
        finally:
            inst.free(source, len(data))
        if status == _engine.STATUS_JS_ERROR:
            raise inst.take_exception()
        if status != _engine.STATUS_OK:
            raise JSError("Error", f"eval status={status}", None)
        return _engine.QjsHandle._adopt(inst, inst.read_i32(out), context=self._ctx)

    def jobs_steps(self) -> Steps:
        """Run the microtask queue until it is empty (the guest runs at most 100,000 jobs a call;
        a long but finite chain of them is not a stuck script), as steps (see `now`)."""
        while (yield ("execute_pending_jobs", ())) >= _JOBS_PER_CALL:
            pass

    def now(self, steps: Steps, answer: Any = None, error: BaseException | None = None) -> Any:
        """Make the calls into the guest `steps` asks for (`(export, args)` tuples sent back
        their answer; an error is thrown into them), one after another on this thread; what
        `steps` returns. The same steps may instead be driven a call at a time, each `start`ed
        and polled (`sandbox.js`): only these calls run guest code that may take long. `answer`
        (or `error`): of the call `steps` asked for last, when it was made elsewhere."""
        inst = self._ctx._inst
        try:
            request = steps.send(answer) if error is None else steps.throw(error)
            while True:
                if request is OFF_THE_LOOP:
                    request = steps.send(None)
                    continue
                try:
                    answer = inst.c(request[0], *request[1])
                except GUEST_FAILURES as exc:
                    request = steps.throw(exc)
                else:
                    request = steps.send(answer)
        except StopIteration as end:
            return end.value

    def pause_within(self, ticks: int) -> None:
        """Pause a started call once the epoch has ticked `ticks` times from now; any other call
        still runs on until `EPOCH_GRACE_SECONDS` past the deadline. Between calls into it."""
        self.go_on_until_backstop()
        self._epoch_deadline(ticks)

    def _epoch_deadline(self, ticks: int) -> None:
        """The store's epoch deadline, `ticks` from now."""
        self._arm(ticks < FAR_EPOCH)
        self._store.set_epoch_deadline(ticks)

    def _arm(self, armed: bool) -> None:
        """Tell the epoch's ticker whether the store has a deadline on it: it ticks while one has."""
        ticker = _jsmodule.ticker
        if armed != self._armed and ticker is not None:
            self._armed = armed
            (ticker.arm if armed else ticker.disarm)()

    def go_on_until_backstop(self) -> None:
        """From now on, a started call that pauses runs on until `EPOCH_GRACE_SECONDS` past the
        deadline (it may be paused: the store is not touched)."""
        self._epoch.backstop = self._deadline + EPOCH_GRACE_SECONDS

    def start(self, request: tuple[str, tuple[int, ...]]) -> Paused:
        """Start one of `now`'s calls so that it pauses at the epoch deadline (see `Paused`)."""
        paused = self._paused = Paused(self._ctx._inst, *request)
        return paused

    def ended(self, paused: Paused) -> Any:
        """The answer of a started call that returned (what it raised, raised)."""
        self._paused = None
        return paused.result()

    def promise_state(self, handle: Any) -> int:
        """As quickjs-rs's, answered in the VM's own slot (one call into the guest, not three)."""
        inst = self._ctx._inst
        out = self._answer_slot()
        status = inst.c("promise_state", handle._require_live(), out)
        if status != _engine.STATUS_OK:
            raise JSError("Error", f"promise_state status={status}", None)
        return inst.read_i32(out)

    def promise_result(self, handle: Any) -> Any:
        """As quickjs-rs's, answered in the VM's own slot. A rejected promise's call fails, and
        answers the reason all the same (`promise_state` tells them apart)."""
        inst = self._ctx._inst
        out = self._answer_slot()
        inst.c("promise_result", handle._require_live(), out)
        return _engine.QjsHandle._adopt(inst, inst.read_i32(out), context=self._ctx)

    def _answer_slot(self) -> int:
        """Where a call into the guest answers a handle: the slot after `call_for_text`'s
        arguments (made at first use)."""
        if self._slots == 0:
            self.prepare_calls(())  # freed with the store
        return self._slots + 4 * _MAX_ARGS

    def prepare_calls(self, numbers: tuple[int, ...]) -> dict[str, int]:
        """Make `call_for_text`'s argument slots, `undefined` and these numbers now (a boot for an
        image does, so every VM from it starts with them): the handles, to keep with the image."""
        inst = self._ctx._inst
        self._slots = inst.c("qjs_alloc", 4 * _MAX_ARGS + 4)
        self._undefined = inst.c("new_undefined")
        for number in numbers:
            self._numbers[number] = inst.python_to_handle(number)
        return {"call_slots": self._slots, "undefined": self._undefined,
                **{f"number:{n}": h for n, h in self._numbers.items()}}

    def call_for_text(self, fn: Any, *args: int | str | Any) -> str:
        """Call a guest function of the API (`step`) with whole numbers, strings or handles, and
        read its answer as text ("" when it is not a string). As `fn.call(*args)` and `text()` do,
        but with the VM's argument slots, `undefined` and numbers made once: through quickjs-rs's
        marshalling one such call is a dozen calls into the guest, here it is one, and one more
        for each string passed and for the answer."""
        return self.now(self.call_for_text_steps(fn, *args))

    def call_for_text_steps(self, fn: Any, *args: int | str | Any) -> Steps:
        """`call_for_text`, as steps (see `now`)."""
        inst = self._ctx._inst
        answer = yield from self._call_steps(fn, args)
        try:
            return inst._get_string(answer)
        except _engine.MarshalError:
            return ""  # not a string
        finally:
            inst.c("free_value", answer)

    def call_steps(self, fn: Any, *args: int | str | Any) -> Steps:
        """As `call_for_text_steps`, for a function whose answer is not read (`deliver`)."""
        self._ctx._inst.c("free_value", (yield from self._call_steps(fn, args)))

    def _call_steps(self, fn: Any, args: tuple[Any, ...]) -> Steps:
        """Call `fn` with `args` through the VM's argument slots: the handle of its answer."""
        inst = self._ctx._inst
        out = self._answer_slot()
        if len(args) > _MAX_ARGS:
            raise ValueError(f"at most {_MAX_ARGS} arguments")
        handles, made = [], []
        try:
            for arg in args:
                if isinstance(arg, str):
                    handle = inst.python_to_handle(arg)
                    if not handle:  # the guest could not make the string
                        raise JSError("InternalError", f"out of memory: {len(arg) >> 20} MB of results could "
                                                       "not be handed to the script", "")
                    made.append(handle)
                    handles.append(handle)
                elif isinstance(arg, int) and not isinstance(arg, bool):
                    number = self._numbers.get(arg)
                    if number is None:
                        number = self._numbers[arg] = inst.python_to_handle(arg)
                    handles.append(number)
                else:
                    handles.append(arg._require_live())
            argv = self._slots
            if handles:
                _write(inst, struct.pack(f"<{len(handles)}i", *handles), argv)
            status = yield ("call_function", (fn._require_live(), self._undefined, argv, len(handles), out))
        finally:
            for handle in made:
                inst.c("free_value", handle)
        if status == _engine.STATUS_JS_ERROR:
            yield OFF_THE_LOOP  # reading what was thrown may run the script's getters
            raise inst.take_exception()
        if status != _engine.STATUS_OK:
            raise JSError("Error", f"call status={status}", None)
        return inst.read_i32(out)

    @staticmethod
    def dispose(*handles: Any) -> None:
        for handle in handles:
            if handle is not None:
                handle.dispose()

    def make_ready(self) -> None:
        """Before the VM's run, on the thread that made it: the calls earlier VMs made looked up."""
        inst = self._ctx._inst
        for name in list(_shapes):
            _prepared(inst, name)

    def _memory_address(self) -> int:
        return _address(self._ctx._inst, 0, 0)

    # -- state --

    def memory_bytes(self) -> int:
        """The size of the guest's linear memory now (0 once closed)."""
        try:
            return self._memory.data_len(self._store)
        except ValueError:
            return 0

    def near_memory_cap(self) -> bool:
        """Whether a failure is likely an allocation refused at the memory cap."""
        return self.memory_bytes() + (1 << 20) >= self.memory_cap

    def close(self) -> None:
        """Free the wasm instance. Only the thread that used the VM last may call this."""
        if self.closed:
            return
        self.closed = True
        if self._paused is not None:  # a call paused and never taken up again
            self._paused.cancel()
            self._paused = None
        _epochs.pop(self._store.codedesk_epoch_key, None)
        self._arm(False)
        self._flag.retire()
        inst = self._ctx._inst
        inst.codedesk_well_formed = None
        # the dispatcher holds the host, whose owner holds this VM: without the cycle, the VM's
        # objects go as their last reference does, not at the collector's next pass
        inst.sync_dispatch = None
        self._ctx.close()  # frees the store, and every value in it: no handle needs freeing first
        self._rt.close()
