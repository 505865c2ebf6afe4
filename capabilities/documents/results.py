"""What a documents tool hands back, and the encoding of the images it shows.

A tool returns a `ToolOutput`: its typed output model (the tool's `outputSchema` is made from
the same model), a one-line summary a person can read, and its images. `ToolOutput.result`
builds the contract's result (`capabilities.contract.success`): the model as structured
content, the text (the summary line, then the structured content as JSON), the images as image
blocks; an image is referenced from the
structured content by `image_index`, its index among the result's images.

Images handed back are scaled so the long edge is at most `CODEDESK_IMAGE_MAX_EDGE_PX` (1568
by default) and the encoded bytes at most `CODEDESK_IMAGE_MAX_MB` (3 by default), so every
model provider accepts one a script attaches with `artifact()`.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field

import mcp_types as types
from PIL import Image
from pydantic import BaseModel

from .. import contract
from ..png import encode_png

DEFAULT_MAX_EDGE_PX = 1568
DEFAULT_MAX_MB = 3.0


@dataclass(frozen=True, kw_only=True)
class EncodedImage:
    """An image ready for an MCP image block."""

    data: bytes
    mime_type: str
    width: int
    height: int


@dataclass(frozen=True, kw_only=True)
class ToolOutput:
    """What a tool produced: its output model, a one-line summary, and its images in the order
    the output's `image_index` fields count them."""

    data: BaseModel
    summary: str
    images: list[EncodedImage] = field(default_factory=list)

    def result(self) -> types.CallToolResult:
        """The contract's result. Optional fields left unset are left out, not sent as null."""
        structured = self.data.model_dump(mode="json")
        return contract.success(structured, self.summary,
                                [contract.Image(image.data, image.mime_type) for image in self.images])


def image_limits() -> tuple[int, int]:
    """(max long edge in px, max bytes) for images returned to the model."""
    edge = int(os.environ.get("CODEDESK_IMAGE_MAX_EDGE_PX", DEFAULT_MAX_EDGE_PX))
    megabytes = float(os.environ.get("CODEDESK_IMAGE_MAX_MB", DEFAULT_MAX_MB))
    return edge, int(megabytes * 1024 * 1024)


def encode_for_model(image: Image.Image) -> EncodedImage:
    """Encode `image` for the model: PNG when it fits, else JPEG, scaled down to the limits."""
    max_edge, max_bytes = image_limits()
    if max(image.size) > max_edge:
        factor = max_edge / max(image.size)
        image = image.resize(_scaled(image.size, factor), Image.Resampling.LANCZOS)
    if image.mode not in ("RGB", "RGBA", "L", "LA"):
        image = image.convert("RGBA" if "A" in image.getbands() else "RGB")
    data = _encode(image, "PNG")
    if len(data) <= max_bytes:
        return EncodedImage(data=data, mime_type="image/png", width=image.width, height=image.height)
    flat = _flatten(image)
    while True:
        data = _encode(flat, "JPEG")
        if len(data) <= max_bytes or max(flat.size) <= 64:
            return EncodedImage(data=data, mime_type="image/jpeg", width=flat.width, height=flat.height)
        flat = flat.resize(_scaled(flat.size, 0.75), Image.Resampling.LANCZOS)


def _scaled(size: tuple[int, int], factor: float) -> tuple[int, int]:
    return max(1, round(size[0] * factor)), max(1, round(size[1] * factor))


def _flatten(image: Image.Image) -> Image.Image:
    """RGB on a white background (JPEG has no alpha; black behind text would hide it)."""
    if image.mode in ("RGBA", "LA"):
        background = Image.new("RGB", image.size, "white")
        background.paste(image, mask=image.getchannel("A"))
        return background
    return image.convert("RGB")


def _encode(image: Image.Image, fmt: str) -> bytes:
    if fmt == "PNG":
        return encode_png(image)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=85, optimize=True)
    return buffer.getvalue()
