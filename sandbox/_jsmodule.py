"""QuickJS's compiled wasm module, kept on disk between processes.

quickjs-rs compiles its guest module in every process that makes a context: about 0.7 s of a
two-core machine, most of a cold start. `load()` hands quickjs-rs the module from a `.cwasm`
file (wasmtime's serialized native code, loaded in milliseconds), compiling and writing it
first when there is none; the interrupt poll's small module (`POLL_WAT`) is kept the same way.
`python -m sandbox.warm` calls it at install time.

The engine is made here, before quickjs-rs makes its own, with wasmtime's epoch interruption:
the guest's compiled code checks a counter that a ticker thread advances every `EPOCH_TICK`
seconds while some store has a deadline on it, and traps once its store's deadline is passed
(`sandbox._wasmcall` sets it past the run's deadline). QuickJS's own interrupt stops JavaScript
sooner and cleanly; the epoch is the backstop for a long loop inside one C builtin, which never
polls that interrupt: without it such a VM could only be abandoned, spinning on and holding its
memory until the builtin returned. Its instances come from wasmtime's pooling allocator
(`_pooled`): a VM's memory is a slot that earlier VMs used, put back to the image as each closed.

A `.cwasm` is native code that wasmtime runs as it finds it, so a file is used only as this
module writes it: in a directory of this user's at 0700, a file of this user's at 0600 with one
link. Anything else is left alone and the module is compiled in memory, as without a cache.
The name carries the guest's digest and wasmtime's version, so an upgrade of either compiles
afresh. The JS guest has no filesystem, so no script can reach the file.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import mmap
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import wasmtime
from wasmtime import _ffi as ffi
from quickjs_rs import _engine, _transform
from quickjs_rs import _wasmtime as shared

logger = logging.getLogger(__name__)

CACHE_ENV = "CODEDESK_WASM_CACHE"
"""Overrides the cache directory (default `$XDG_CACHE_HOME/codedesk`, else `~/.cache/codedesk`)."""

_KEY = "quickjs"  # quickjs-rs's own key for its guest in its process-wide artifact table
_lock = threading.Lock()
EPOCH_TICK = 0.01
"""Seconds between two ticks of the engine's epoch (the backstop's resolution)."""
EPOCHS = True
"""Whether this process's engine has epoch interruption (False if quickjs-rs made it first)."""


def _engine_with_epochs() -> wasmtime.Engine:
    """The process-wide engine quickjs-rs uses, made with epoch interruption, and its ticker."""
    global EPOCHS, ticker
    if shared._SHARED_ENGINE is None:
        with shared._SHARED_ENGINE_LOCK:
            if shared._SHARED_ENGINE is None:
                config = wasmtime.Config()
                config.epoch_interruption = True
                if _room_for_slots():
                    _pooled(config)
                else:
                    logger.warning("JS VMs are made without the pool of memory slots: this process may not "
                                   "reserve the %d GiB of address space it takes (ulimit -v); each VM is "
                                   "mapped and unmapped, and its run makes copy-on-write faults",
                                   _SLOTS * _SLOT_SPACE >> 30)
                shared._SHARED_ENGINE = wasmtime.Engine(config)
                for module in (_engine, _transform):  # every maker of stores on this engine
                    module.wasmtime = _StoresWithDeadline()
                ticker = Ticker(shared._SHARED_ENGINE)
                return shared._SHARED_ENGINE
    EPOCHS = False
    logger.warning("quickjs-rs made its wasm engine first: no epoch backstop for JS runs")
    return shared.shared_wasmtime_engine()


MAX_VMS = 64
"""JS VMs one process can always hold at once (the runs in progress and the VMs made ahead; up to
half as many again while no TypeScript is being transformed). One past them cannot be made
(`TooManyVms`) until runs end: each slot used keeps memory (`_pooled`). Without the pool (no
room for it: `_room_for_slots`), VMs are not counted."""
TOO_MANY_VMS = ("this process holds as many JavaScript VMs as it can at once (runs in progress and "
                f"VMs made ahead, at least {MAX_VMS}): retry once some runs have ended")


class TooManyVms(wasmtime.WasmtimeError):
    """A VM refused: the pool's slots are all taken."""

    def __init__(self) -> None:
        super().__init__(TOO_MANY_VMS)


_TRANSFORMS = 64  # TypeScript transformers at once (one a run thread), each an instance
_SLOTS = 2 * MAX_VMS + _TRANSFORMS  # a VM is two instances: QuickJS and its interrupt poll
_KEEP_RESIDENT = 2 << 20
"""Bytes at the start of a VM's memory that its slot keeps when the VM is closed, put back to the
image's bytes: the image's memory (1.4 MiB) and what a short run adds. (Keeping none, measured:
less CPU back to back, later answers 50 ms apart; sandbox/README.md.)"""


_SLOT_SPACE = 5 << 30  # address space a slot takes, and room to spare: 4 GiB, its guard, tables


def _room_for_slots() -> bool:
    """Whether the pool's reservation fits in this process's address space: tried with a mapping
    of no access, which takes no memory (22 us). Under a `ulimit -v` below it, wasmtime's C API
    cannot map the pool and aborts the process as the engine is made."""
    try:
        probe = mmap.mmap(-1, _SLOTS * _SLOT_SPACE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                          prot=0)  # PROT_NONE (the mmap module has no name for it)
    except OSError:
        return False
    probe.close()
    return True


def _pooled(config: wasmtime.Config) -> None:
    """Instances from wasmtime's pooling allocator: a VM's memory is a slot of a reservation made
    once, which keeps its module's image mapped, rather than a mapping made and unmapped for each
    VM. Closing a VM copies the image's bytes back over the first `_KEEP_RESIDENT` bytes of its
    slot (wasmtime's reset: no page table change) and lets go of the rest; the next VM in the
    slot writes pages that are already its own, with no copy-on-write fault on its run's way,
    and nothing is written ahead. wasmtime-py has no setter for this: wasmtime's C API.

    The cost: the reservation is address space (4 GiB and a guard a slot, some 800 GiB of virtual
    size, none of it memory), and a slot once used keeps those bytes resident: 96 VMs made at once
    and closed left the process 147 MiB larger (1.5 MiB a VM)."""
    pooling = ffi.wasmtime_pooling_allocation_config_new()
    try:
        for setter, value in (
            (ffi.wasmtime_pooling_allocation_config_total_core_instances_set, _SLOTS),
            (ffi.wasmtime_pooling_allocation_config_total_memories_set, _SLOTS),
            (ffi.wasmtime_pooling_allocation_config_total_tables_set, _SLOTS),
            # a VM's async call runs on a stack of the pool's (one at a time: `GuestVm.start`); each
            # is made at once with its guard page, and wasmtime's 1,000 took 3.0 ms of a cold start
            (ffi.wasmtime_pooling_allocation_config_total_stacks_set, _SLOTS // 2),
            (ffi.wasmtime_pooling_allocation_config_linear_memory_keep_resident_set, _KEEP_RESIDENT),
        ):
            setter(pooling, value)
        ffi.wasmtime_pooling_allocation_strategy_set(config.ptr(), pooling)  # copies it
    finally:
        ffi.wasmtime_pooling_allocation_config_delete(pooling)


_PARK_TICKS = 100
"""Ticks with no store armed after which the ticker parks (a second)."""


class Ticker:
    """Advances the engine's epoch every `EPOCH_TICK` seconds while some store has a deadline on
    it (`arm`ed); `_PARK_TICKS` ticks after the last is `disarm`ed, it parks until one is again.
    Ticking always, an idle process woke 100 times a second, some 9 ms of CPU a second.

    Parked, it loses nothing: a store's deadline counts ticks from when it is set, and while no
    store has one, what the epoch is matters to none. A store is armed before its deadline is
    set, so the ticker runs before the guest does."""

    def __init__(self, engine: wasmtime.Engine) -> None:
        self._engine = engine
        self._armed = 0
        self._parked = False
        self._wake = threading.Condition()
        threading.Thread(target=self._tick, name="wasm-epoch", daemon=True).start()

    def arm(self) -> None:
        with self._wake:
            self._armed += 1
            if self._parked:
                self._parked = False
                self._wake.notify()

    def disarm(self) -> None:
        with self._wake:
            self._armed -= 1

    def _tick(self) -> None:
        idle = 0
        while True:
            time.sleep(EPOCH_TICK)
            self._engine.increment_epoch()
            with self._wake:
                idle = 0 if self._armed else idle + 1
                if idle < _PARK_TICKS:
                    continue
                self._parked = True
                while self._parked:
                    self._wake.wait()
                idle = 0


ticker: Ticker | None = None
"""The ticker of this process's engine (None without epochs)."""


FAR_EPOCH = 1 << 62
"""A store's epoch deadline until a run sets one: never."""


class _EpochStore(wasmtime.Store):
    """A store that may run code at once: a new store's epoch deadline is 0, which traps at the
    first check, and quickjs-rs runs the guest's start-up code right after making the store."""

    def __init__(self, engine: wasmtime.Engine | None = None, data: object = None) -> None:
        super().__init__(engine, data)
        self.set_epoch_deadline(FAR_EPOCH)


class _WasiWithoutStdout(wasmtime.WasiConfig):
    """quickjs-rs hands its guest the process's stdout, which over the stdio transport is the MCP
    channel: one stray write from the guest would corrupt it. The guest gets no stdout; its stderr
    (an allocation failure's message) still reaches the runtime's log."""

    def inherit_stdout(self) -> None:
        pass


class _StoresWithDeadline:
    """The `wasmtime` module as quickjs-rs's engine layer sees it: its stores are `_EpochStore`s,
    its guests have no stdout."""

    Store = _EpochStore
    WasiConfig = _WasiWithoutStdout

    def __getattr__(self, name: str) -> object:
        return getattr(wasmtime, name)


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "codedesk"


def load() -> str:
    """Make quickjs-rs's guest module ready in this process, and the interrupt poll's
    (`poll_module`). Returns how the guest's was: "loaded" from the disk cache, "compiled" (and
    written to it), or "ready" when this process had it already."""
    global poll_module
    with _lock:
        how = "ready"
        if _KEY not in shared._SHARED_ARTIFACTS:
            engine = _engine_with_epochs()
            digest = guest_digest()
            module, how = _compiled(engine, digest, _engine._read_guest_wasm)
            # What quickjs-rs's own first use would build (`_engine._quickjs_artifact`).
            shared._SHARED_ARTIFACTS[_KEY] = shared.SharedWasmArtifact(
                module=module, linker=_engine._build_shared_linker(engine), build_id=digest
            )
        if poll_module is None:
            # two instructions, but compiling them started Cranelift: 1.7 ms of a cold start
            poll_module = _compiled(shared.shared_wasmtime_engine(), hashlib.sha256(POLL_WAT.encode()).digest(),
                                    lambda: POLL_WAT, "-poll")[0]
        return how


def _compiled(engine: wasmtime.Engine, digest: bytes, source: Callable[[], bytes | str],
              kind: str = "") -> tuple[wasmtime.Module, str]:
    """The module of `source` (wasm or its text; `digest` its SHA-256): loaded from the cache,
    else compiled and written there. Returns it and how: "loaded" or "compiled"."""
    path = _cache_file(digest, kind)
    if path is not None:
        in_use.append(path)
    module = _deserialize(engine, path) if path is not None else None
    if module is not None:
        return module, "loaded"
    module = wasmtime.Module(engine, source())
    if path is not None:
        write_private(path, module.serialize())
    return module, "compiled"


@functools.cache
def guest_digest() -> bytes:
    """The SHA-256 of quickjs-rs's guest wasm, read once a process (the module's and the image's
    cache names both carry it)."""
    return hashlib.sha256(_engine._read_guest_wasm()).digest()


POLL_WAT = """(module
  (memory (export "flag") 1 1)
  (func (export "poll") (result i32) i32.const 0 i32.load))"""
"""The interrupt poll every VM calls (`sandbox._jsinterrupt`): its flag, one page of its own."""

poll_module: wasmtime.Module | None = None
"""`POLL_WAT` compiled, once `load()` made it ready."""

in_use: list[Path] = []
"""The cache files of the modules this process loaded or wrote (`tidy_cache` keeps them)."""

UNUSED_DAYS = 30
"""A file of the cache that no process has used for this long is removed (an upgrade of
quickjs-rs, wasmtime or the guest API leaves the old module and image behind, 2.5 MB each)."""
_DAY = 86400.0


def tidy_cache(in_use: list[Path]) -> None:
    """Mark the cache files this process uses as used (their mtime, at most once a day), and
    remove the module's and images' files no process has used for `UNUSED_DAYS` days, and writes
    left half done a day ago. Only files named as this module names them are looked at, and only
    this user's regular files removed. `in_use`: files of one private cache folder."""
    if not in_use:
        return
    now = time.time()
    try:
        entries = list(os.scandir(in_use[0].parent))
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if name.startswith(".quickjs-") and name.endswith(".tmp"):
            unused_for = _DAY
        elif name.startswith("quickjs-") and name.endswith((".cwasm", ".json")):
            unused_for = UNUSED_DAYS * _DAY
        else:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or now - st.st_mtime < _DAY:
                continue
            if Path(entry.path) in in_use:
                os.utime(entry.path)
            elif now - st.st_mtime > unused_for:
                os.unlink(entry.path)
        except OSError:  # gone meanwhile, or not ours to change: left as it is
            continue


def private_cache_dir() -> Path | None:
    """The cache directory, made if missing; None (with a warning) when it is not this user's
    alone, or cannot be made."""
    folder = cache_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(folder, is_dir=True):
            logger.warning("not using the wasm cache %s: it must be this user's, mode 0700", folder)
            return None
    except OSError as exc:
        logger.warning("not using the wasm cache %s: %s", folder, exc)
        return None
    return folder


def _cache_file(digest: bytes, kind: str = "") -> Path | None:
    folder = private_cache_dir()
    if folder is None:
        return None
    epochs = "-epochs" if EPOCHS else ""  # compiled with the checks, or without: not interchangeable
    return folder / f"quickjs{kind}-{digest.hex()[:32]}-wasmtime{_wasmtime_version()}{epochs}.cwasm"


def _deserialize(engine: wasmtime.Engine, path: Path) -> wasmtime.Module | None:
    try:
        if not _private(path, is_dir=False):
            logger.warning("not loading %s: it must be this user's, mode 0600, one link", path)
            return None
        return wasmtime.Module.deserialize_file(engine, str(path))
    except FileNotFoundError:
        return None
    except (OSError, wasmtime.WasmtimeError) as exc:  # unreadable or stale: compile afresh
        logger.warning("not loading %s: %s", path, exc)
        return None


def write_private(path: Path, data: bytes) -> None:
    """Write atomically (a reader never sees half a file), 0600 from the start."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".quickjs-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        logger.warning("could not write the wasm cache %s: %s", path, exc)


def is_private(path: Path) -> bool:
    """Whether `path` is a file of this user's alone (mode 0600 or less, one link)."""
    return _private(path, is_dir=False)


def _private(path: Path, *, is_dir: bool) -> bool:
    st = os.lstat(path)
    kind = stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode) and st.st_nlink == 1
    return kind and st.st_uid == os.getuid() and not st.st_mode & 0o077


@functools.cache
def _wasmtime_version() -> str:
    from importlib.metadata import version

    return version("wasmtime")
