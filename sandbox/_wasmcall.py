"""Quicker calls from quickjs-rs into its wasm guest.

quickjs-rs reaches its guest through wasmtime-py's `Func.__call__`, which asks the engine for
the function's type on every call and boxes each argument through `Val`: about 20 µs of
Python a call, where a run makes 15 to 100 calls. `install()` replaces quickjs-rs's one call
site (`_Instance.c`) with one that reads each export's type once and makes a single ctypes
call with its numbers set in place. Semantics are wasmtime-py's: a trap raises `wasmtime.Trap`,
an engine error `wasmtime.WasmtimeError`, and an exception raised by a host function during
the call is re-raised.

Both libraries are pinned to the versions this was written against; with any other version
`install()` leaves quickjs-rs as it is.
"""

from __future__ import annotations

import threading
from ctypes import POINTER, byref
from typing import Any

import wasmtime
from quickjs_rs import _engine
from wasmtime import _ffi as ffi
from wasmtime import _func

_FOR_VERSIONS = {"quickjs-rs": "0.2.6", "wasmtime": "49."}

# kind code -> the field of wasmtime_valunion that holds it
_FIELDS = {
    ffi.WASMTIME_I32.value: "i32",
    ffi.WASMTIME_I64.value: "i64",
    ffi.WASMTIME_F32.value: "f32",
    ffi.WASMTIME_F64.value: "f64",
}
_KINDS = {"i32": ffi.WASMTIME_I32.value, "i64": ffi.WASMTIME_I64.value,
          "f32": ffi.WASMTIME_F32.value, "f64": ffi.WASMTIME_F64.value}

_installed = False
_install_lock = threading.Lock()


class _Signature:
    """The parameter and result kinds of one export, all numeric."""

    __slots__ = ("params", "results", "result_fields")

    def __init__(self, ty: wasmtime.FuncType) -> None:
        self.params = tuple(_KINDS[str(p)] for p in ty.params)
        self.results = tuple(_KINDS[str(r)] for r in ty.results)
        self.result_fields = tuple(_FIELDS[k] for k in self.results)


# Exports of the one guest module quickjs-rs ships, by name; types never change.
_signatures: dict[str, _Signature | None] = {}


def _signature(inst: Any, name: str, fn: wasmtime.Func) -> _Signature | None:
    sig = _signatures.get(name, False)
    if sig is False:
        try:
            sig = _Signature(fn.type(inst.store))
        except KeyError:  # a reference type: leave it to wasmtime-py
            sig = None
        _signatures[name] = sig
    return sig  # type: ignore[return-value]


def _call(inst: Any, name: str, args: tuple[Any, ...]) -> Any:
    fn = inst._exports[name]
    sig = _signature(inst, name, fn)
    if sig is None or len(args) != len(sig.params) or not all(type(a) is int for a in args):
        return fn(inst.store, *args)
    context = inst.store._context()  # raises ValueError once the store is closed
    n = len(args)
    params = (ffi.wasmtime_val_t * n)() if n else None
    for i, (kind, value) in enumerate(zip(sig.params, args)):
        slot = params[i]  # type: ignore[index]
        slot.kind = kind
        setattr(slot.of, _FIELDS[kind], value)
    m = len(sig.results)
    results = (ffi.wasmtime_val_t * m)() if m else None
    trap = POINTER(ffi.wasm_trap_t)()
    error = ffi.wasmtime_func_call(context, byref(fn._func), params, n, results, m, byref(trap))
    if error:
        exc: Exception = wasmtime.WasmtimeError._from_ptr(error)
        _func.maybe_raise_last_exn()
        raise exc
    if trap:
        exc = wasmtime.Trap._from_ptr(trap)
        _func.maybe_raise_last_exn()
        raise exc
    if m == 0:
        return None
    if m == 1:
        return getattr(results[0].of, sig.result_fields[0])  # type: ignore[index]
    return [getattr(results[i].of, f) for i, f in enumerate(sig.result_fields)]  # type: ignore[index]


def _c(self: Any, name: str, *args: Any) -> Any:
    # As quickjs-rs's own `c`: publish this instance for host callbacks during the call.
    cur = _engine._CUR
    prev = getattr(cur, "inst", None)
    cur.inst = self
    try:
        return _call(self, name, args)
    finally:
        cur.inst = prev


def _versions_match() -> bool:
    from importlib.metadata import version

    return version("quickjs-rs") == _FOR_VERSIONS["quickjs-rs"] and version("wasmtime").startswith(
        _FOR_VERSIONS["wasmtime"]
    )


def install() -> bool:
    """Route quickjs-rs's guest calls through `_call`. Idempotent; False when left as it was."""
    global _installed
    with _install_lock:
        if _installed:
            return True
        if not (_versions_match() and hasattr(_engine, "_Instance") and hasattr(_engine, "_CUR")):
            return False
        _engine._Instance.c = _c
        _installed = True
        return True

