"""The errors the files tools raise: one root, one subclass per kind of failure.

    FilesError            the root: a failure the caller can act on          kind
    ├── InvalidRequest    the request cannot apply: an edit whose `old`      invalid_arguments
    │                     matches more often than `count`, a folder given
    │                     where a file is needed
    ├── NotFound          no such file or folder, `old` not in the file,     not_found
    │                     nothing in the trash under that name
    ├── Refused           the desktop user may not (permissions), a binary   refused
    │                     file read as text, a destination that exists
    ├── PatchDoesNotApply a hunk of the diff does not apply: nothing was      failed
    │                     written
    └── Unavailable       ripgrep, patch or the desktop user is missing      unavailable

Each carries a `message` (what failed, where), a `hint` (what to do next) and the `field` at
fault. File-system errors (`OSError`) are translated at the tool boundary
(`tooling.files_tool`) with `raise ... from exc`.
"""

from __future__ import annotations

from capabilities.contract import CapabilityError


class FilesError(CapabilityError):
    """A failure the caller can act on; `message` and `hint` are shown to the model as they are."""


class InvalidRequest(FilesError):
    kind = "invalid_arguments"


class NotFound(FilesError):
    kind = "not_found"


class Refused(FilesError):
    kind = "refused"


class PatchDoesNotApply(FilesError):
    kind = "failed"


class Unavailable(FilesError):
    kind = "unavailable"
