"""`python -m capabilities.documents`: the documents capability server on stdio."""

import sys

# pymupdf imports its optional ONNX page-layout model when it is installed, which costs seconds
# of start-up; no tool here calls Page.get_layout, so the server starts without it.
sys.modules.setdefault("pymupdf.layout", None)

from capabilities.stdio import serve  # noqa: E402

from .server import main  # noqa: E402

if __name__ == "__main__":
    serve(main)
