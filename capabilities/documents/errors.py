"""The errors the documents tools raise: one root, one subclass per kind of failure.

    DocumentError            the root: a failure the caller can act on    kind
    ├── InvalidRequest       the request cannot work on this file: a page    invalid_arguments
    │                        out of range, a crop box outside the image, a
    │                        conversion the format does not allow
    ├── NotFound             no such file, folder, sheet                   not_found
    ├── PathRefused          a path outside the roots, with `..`, or       refused
    │                        escaping through a symlink
    ├── OutputExists         the output file exists and overwrite is off   refused
    ├── BadDocument          the file is corrupt, encrypted, or of         failed
    │                        another kind than its name says
    ├── MissingProgram       LibreOffice or Tesseract is not installed     unavailable
    └── ProgramFailed        LibreOffice or Tesseract failed               failed
        └── ProgramTimedOut  ... or was stopped after its timeout          timeout

Each carries a `message` (what failed, where), a `hint` (what to do next) and the `field` of
the arguments at fault. Lower-layer exceptions (pymupdf, openpyxl, Pillow, subprocess) are
translated into these with `raise ... from exc`, so the original stays as `__cause__`; the
tool wrapper (`tooling.document_tool`) turns a `DocumentError` into the contract's
`ToolError` in one place, `to_tool_error`.
"""

from __future__ import annotations

from capabilities.contract import CapabilityError


class DocumentError(CapabilityError):
    """A failure the caller can act on; `message` and `hint` are shown to the model as they are."""

    def __str__(self) -> str:
        return self.message + (f" ({self.hint})" if self.hint else "")


class InvalidRequest(DocumentError):
    """The arguments are well-formed but cannot apply to this file (nothing was done)."""

    kind = "invalid_arguments"


class NotFound(DocumentError):
    """The file, folder or sheet named is not there."""

    kind = "not_found"


class PathRefused(DocumentError):
    """The path is not inside a configured root (or reaches outside through `..` or a symlink)."""

    kind = "refused"


class OutputExists(DocumentError):
    """The output file exists, and files are replaced only when asked (`overwrite`)."""

    kind = "refused"


class BadDocument(DocumentError):
    """The file is unreadable, corrupt, encrypted, or not of the kind its name says."""

    kind = "failed"


class MissingProgram(DocumentError):
    """A program the tool needs (LibreOffice, Tesseract) is not installed."""

    kind = "unavailable"


class ProgramFailed(DocumentError):
    """LibreOffice or Tesseract exited with an error or produced nothing."""

    kind = "failed"


class ProgramTimedOut(ProgramFailed):
    """LibreOffice or Tesseract did not finish within its timeout and was stopped."""

    kind = "timeout"
