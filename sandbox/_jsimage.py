"""QuickJS booted once, its memory made the module's own data: a fresh VM in a fraction of a
millisecond.

Making a VM the plain way instantiates QuickJS's module, creates its runtime and context, and
evaluates the guest API (`prelude.js`): a few milliseconds, every run. Here that is done once:
a VM is booted the plain way, and a new module is written whose linear memory starts as that
VM's did after booting (its data segments are the booted memory, its stack pointer's initial
value the booted one). wasmtime maps such a module's memory copy-on-write, so instantiating it
costs about what an empty module costs, and every run still gets its own instance and its own
memory: isolation stays one VM per run. The handles the boot left (the API's `step` and
`deliver`, the VM's `toWellFormed`) are the same numbers in every instance, and are kept beside
the module.

This is Wizer's technique, done at the wasm boundary without forking quickjs-rs: its boot is
driven from the host (host functions, limits), which Wizer's single init export cannot do.
What the boot fixes for every VM: the default heap limit (other limits boot the plain way) and
Math.random's state, which the guest API reseeds from the host on first use.

The image is compiled at install time (`python -m sandbox.warm`) into the same owner-only cache
as the plain module (`sandbox._jsmodule`). Its file name carries a digest of everything it is
made from; a sidecar holds the handles and the file's SHA-256, checked before wasmtime loads the
native code: a corrupted, foreign or stale image is refused with a warning and built again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wasmtime
from quickjs_rs import _engine
from quickjs_rs import _wasmtime as shared

from sandbox import _jsinterrupt, _jsmodule

logger = logging.getLogger(__name__)

FORMAT = 2
"""Bumped whenever what an image holds, or how it is read, changes."""
_PAGE = 65536


@dataclass(frozen=True)
class Image:
    """A pre-initialized module and what its boot left: handles valid in every instance."""

    artifact: shared.SharedWasmArtifact
    handles: dict[str, int]
    host_names: dict[str, int]


# ---- the module, rewritten ----------------------------------------------------------------------

def _leb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _sleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        done = (value == 0 and not byte & 0x40) or (value == -1 and byte & 0x40)
        out.append(byte | (0 if done else 0x80))
        if done:
            return bytes(out)


def _read_leb(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _sections(wasm: bytes) -> list[tuple[int, bytes]]:
    if wasm[:8] != b"\0asm\x01\0\0\0":
        raise ValueError("not a wasm module (version 1)")
    sections, at = [], 8
    while at < len(wasm):
        size, body = _read_leb(wasm, at + 1)
        sections.append((wasm[at], wasm[body:body + size]))
        at = body + size
    return sections


def _memory_section(body: bytes, pages: int) -> bytes:
    """The one memory, at least `pages` long from the start."""
    count, at = _read_leb(body, 0)
    if count != 1:
        raise ValueError(f"expected one memory, found {count}")
    flags = body[at]
    minimum, at = _read_leb(body, at + 1)
    rest = body[at:]  # the maximum, when flags say there is one
    if flags not in (0, 1):
        raise ValueError(f"unsupported memory flags {flags}")
    return _leb(1) + bytes([flags]) + _leb(max(minimum, pages)) + rest


def _global_section(body: bytes, stack_pointer: int) -> bytes:
    """The module's one global (the stack pointer, i32, mutable), starting at `stack_pointer`."""
    count, at = _read_leb(body, 0)
    if count != 1 or body[at:at + 3] != b"\x7f\x01\x41":  # i32, mutable, i32.const
        raise ValueError("expected one mutable i32 global (the stack pointer)")
    _, end = _read_leb(body, at + 3)
    if body[end:] != b"\x0b":
        raise ValueError("unexpected global initializer")
    return _leb(1) + b"\x7f\x01\x41" + _sleb(stack_pointer - (1 << 32) if stack_pointer >= 1 << 31 else stack_pointer) + b"\x0b"


def _data_section(memory: bytes) -> tuple[bytes, int]:
    """Active segments holding `memory`'s non-zero pages (runs of them, zeros trimmed at the
    ends): (section body, segment count). What they leave out is zero in a new instance."""
    pages = -(-len(memory) // _PAGE)
    nonzero = [bool(memory[p * _PAGE:(p + 1) * _PAGE].strip(b"\0")) for p in range(pages)]
    segments, page = [], 0
    while page < pages:
        if not nonzero[page]:
            page += 1
            continue
        first = page
        while page < pages and nonzero[page]:
            page += 1
        chunk = memory[first * _PAGE:page * _PAGE]
        segments.append((first * _PAGE + len(chunk) - len(chunk.lstrip(b"\0")), chunk.strip(b"\0")))
    body = bytearray(_leb(len(segments)))
    for offset, data in segments:
        body += b"\x00\x41" + _sleb(offset) + b"\x0b" + _leb(len(data)) + data
    return bytes(body), len(segments)


def preinitialized(wasm: bytes, memory: bytes, stack_pointer: int) -> bytes:
    """`wasm` rewritten to start as a booted instance did: `memory` its data, `stack_pointer`
    its stack pointer's initial value. Refuses a module shaped otherwise than QuickJS's."""
    data, count = _data_section(memory)
    out = bytearray(wasm[:8])
    seen = set()
    for section, body in _sections(wasm):
        if section == 8:
            raise ValueError("the module has a start function: booting it again would reset it")
        if section == 5:
            body = _memory_section(body, -(-len(memory) // _PAGE))
        elif section == 6:
            body = _global_section(body, stack_pointer)
        elif section == 11:
            body = data
        elif section == 12:
            body = _leb(count)
        seen.add(section)
        out += bytes([section]) + _leb(len(body)) + body
    if not {5, 6, 11} <= seen:
        raise ValueError("the module lacks a memory, a global or data")
    return bytes(out)


# ---- building and loading -----------------------------------------------------------------------

Boot = Callable[[], tuple[Any, dict[str, int]]]
"""Boots a VM the plain way: (its GuestVm, the handles to keep by name)."""

_lock = threading.Lock()
_image: Image | None = None
_tried = False


def digest(boot_source: str) -> str:
    parts = [_jsmodule.guest_digest(), boot_source.encode(), str(FORMAT).encode(),
             _jsmodule._wasmtime_version().encode(), b"epochs" if _jsmodule.EPOCHS else b""]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:32]


def image(boot: Boot, boot_source: str) -> Image | None:
    """This process's image: loaded from the cache, else built (and written); None when it
    cannot be made (the plain way is used then)."""
    global _image, _tried
    with _lock:
        if not _tried:
            _tried = True
            try:
                _image = _load_or_build(boot, boot_source)
            except Exception as exc:  # the plain way still works: say why, go on without
                logger.warning("no pre-initialized JS image (%s); VMs boot the plain way", exc)
        return _image


def _load_or_build(boot: Boot, boot_source: str) -> Image:
    _jsmodule.load()
    engine = shared.shared_wasmtime_engine()
    linker = shared._SHARED_ARTIFACTS[_jsmodule._KEY].linker
    key = digest(boot_source)
    folder = _jsmodule.private_cache_dir()
    module_path = folder / f"quickjs-image-{key}.cwasm" if folder is not None else None
    sidecar = module_path.with_suffix(".json") if module_path is not None else None
    if module_path is not None and sidecar is not None:
        _jsmodule.tidy_cache([*_jsmodule.in_use, module_path, sidecar])
        loaded = _load(engine, module_path, sidecar, key)
        if loaded is not None:
            module, handles, names = loaded
            return Image(shared.SharedWasmArtifact(module, linker, bytes.fromhex(key)), handles, names)
    vm, handles = boot()
    try:
        inst = vm._ctx._inst
        memory = bytes(inst.mem.read(inst.store, 0, inst.mem.data_len(inst.store)))
        wasm = preinitialized(_engine._read_guest_wasm(), memory, inst.sp.value(inst.store))
        names = dict(inst.name_to_fn_id)
    finally:
        vm.close()
    module = wasmtime.Module(engine, wasm)
    if module_path is not None and sidecar is not None:
        data = module.serialize()
        _jsmodule.write_private(module_path, data)
        _jsmodule.write_private(sidecar, json.dumps({
            "key": key, "sha256": hashlib.sha256(data).hexdigest(), "handles": handles, "host_names": names,
        }).encode())
    return Image(shared.SharedWasmArtifact(module, linker, bytes.fromhex(key)), handles, names)


def _load(engine: wasmtime.Engine, module_path: Path, sidecar: Path,
          key: str) -> tuple[wasmtime.Module, dict[str, int], dict[str, int]] | None:
    """The cached image, when its sidecar vouches for it; None (with a warning when something
    was there) to build it again."""
    if not module_path.exists():
        return None
    try:
        if not (_jsmodule.is_private(module_path) and _jsmodule.is_private(sidecar)):
            raise ValueError("it must be this user's, mode 0600, one link")
        meta = json.loads(sidecar.read_bytes())
        with module_path.open("rb") as file:
            data = file.read()
            if meta.get("key") != key:
                raise ValueError("it was made from another module or guest API")
            if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
                raise ValueError("its content is not what was written (corrupted or replaced)")
            handles = {str(k): int(v) for k, v in meta["handles"].items()}
            names = {str(k): int(v) for k, v in meta["host_names"].items()}
            return _module_of(engine, file, data), handles, names
    except (OSError, ValueError, KeyError, TypeError, AttributeError, wasmtime.WasmtimeError) as exc:
        logger.warning("not loading the JS image %s: %s; building it again", module_path, exc)
        return None


def _module_of(engine: wasmtime.Engine, file: Any, data: bytes) -> wasmtime.Module:
    """The module `data` holds, read from the open `file`: mapped from that file (through its
    descriptor, so the bytes checked are the bytes mapped, whatever its path names meanwhile)
    rather than copied from `data`, 0.2 ms rather than 2-4 of a cold start's first run."""
    by_descriptor = f"/proc/self/fd/{file.fileno()}"
    if os.path.exists(by_descriptor):
        return wasmtime.Module.deserialize_file(engine, by_descriptor)
    return wasmtime.Module.deserialize(engine, data)


# ---- instances ---------------------------------------------------------------------------------

_making = threading.local()


def _instantiate(artifact: shared.SharedWasmArtifact, store: wasmtime.Store) -> wasmtime.Instance:
    """quickjs-rs's instantiation (`_engine.instantiate_wasm_artifact`), from the image while
    this thread makes a VM from it, with its interrupt poll in wasm (`sandbox._jsinterrupt`)."""
    chosen = getattr(_making, "image", None)
    instance, store.codedesk_flag = _jsinterrupt.instantiate(chosen.artifact if chosen is not None else artifact,
                                                              store)
    return instance


_engine.instantiate_wasm_artifact = _instantiate


class from_image:  # noqa: N801 - used as `with from_image(image):`
    """While entered, the QuickJS instances this thread makes start from `image`."""

    def __init__(self, chosen: Image) -> None:
        self._chosen = chosen

    def __enter__(self) -> None:
        _making.image = self._chosen

    def __exit__(self, *exc: object) -> None:
        _making.image = None
