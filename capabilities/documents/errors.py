"""The errors the documents tools raise; each message says what failed and what to do next.

    DocumentError          any failure the caller can act on (the base)
    ├── PathRefused        a path outside the roots, with `..`, or escaping through a symlink
    ├── BadDocument        missing, corrupt, encrypted or unsupported file; page out of range
    ├── MissingProgram     LibreOffice or Tesseract is not installed
    └── ConversionFailed   LibreOffice failed or was killed after its timeout

Lower-layer exceptions (pymupdf, openpyxl, Pillow, subprocess) are translated into these
at the boundary with `raise ... from exc`, so the original stays as `__cause__`.
"""

from __future__ import annotations


class DocumentError(Exception):
    """A failure the caller can act on; the message is shown to the model as is."""


class PathRefused(DocumentError):
    """The path is not inside a configured root (or reaches outside through `..` or a symlink)."""


class BadDocument(DocumentError):
    """The file is missing, unreadable, corrupt, encrypted, of the wrong kind, or the page is out of range."""


class MissingProgram(DocumentError):
    """A program the tool needs (LibreOffice, Tesseract) is not installed."""


class ConversionFailed(DocumentError):
    """LibreOffice exited with an error, produced nothing, or was killed after its timeout."""
