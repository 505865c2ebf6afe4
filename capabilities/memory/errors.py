"""The errors the memory and skills tools raise: one root, one subclass per kind of failure.

    MemoryFailure          the root: a failure the caller can act on      kind
    ├── TooLarge           a text or a file past its cap                  invalid_arguments
    ├── NotFound           no entry with that key, no skill of that name  not_found
    ├── Refused            a skill file that is a link, or leaves its     refused
    │                      folder, or is not a regular file
    └── StoreUnavailable   the database cannot be opened or written       unavailable

`sqlite3` errors are translated into these with `raise ... from exc`; `memory_tool` in
`tooling.py` turns a `MemoryFailure` into the contract's `ToolError` in one place.
"""

from __future__ import annotations

from capabilities.contract import CapabilityError


class MemoryFailure(CapabilityError):
    """A failure the caller can act on; `message` and `hint` are shown to the model as they are."""


class TooLarge(MemoryFailure):
    kind = "invalid_arguments"


class NotFound(MemoryFailure):
    kind = "not_found"


class Refused(MemoryFailure):
    kind = "refused"


class StoreUnavailable(MemoryFailure):
    kind = "unavailable"
