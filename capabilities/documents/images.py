"""Image tools with Pillow: `read_image`, `get_image_metadata`, `image_get_info`, and the
editing tools `image_crop`, `image_resize`, `image_zoom`, `image_rotate`, `image_annotate`,
`image_convert`.

Every tool works in the EXIF-corrected orientation (what a viewer shows), so the coordinates
`image_get_info` reports are the ones the editing tools take. Edits write a new file next to
the input (`<name>-cropped.png`, ...) unless `output_path` is given; a default name never
replaces an existing file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Literal, Union

from PIL import Image, ImageColor, ImageDraw, ImageFont, ImageOps, UnidentifiedImageError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from .errors import BadDocument
from .paths import atomic_output, sibling
from .results import ToolOutput, encode_for_model
from .tooling import Args, ToolSpec, Workspace

MAX_OUTPUT_PIXELS = 100_000_000

# Pillow's format names for the formats image_convert writes, and their usual extensions.
FORMATS = {"png": ("PNG", ".png"), "jpeg": ("JPEG", ".jpg"), "webp": ("WEBP", ".webp"),
           "bmp": ("BMP", ".bmp"), "tiff": ("TIFF", ".tiff")}


@contextmanager
def open_image(path: Path) -> Iterator[Image.Image]:
    """Open an image, refusing files Pillow cannot read and decompression bombs."""
    try:
        image = Image.open(path)
    except (UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise BadDocument(f"{path.name!r} is not an image Pillow can read ({exc}); check the file") from exc
    except OSError as exc:
        raise BadDocument(f"cannot read the image {path.name!r}: {exc} (the file is corrupt)") from exc
    try:
        try:
            image.load()
        except (OSError, Image.DecompressionBombError) as exc:
            raise BadDocument(f"cannot read the image {path.name!r}: {exc} (the file is truncated or corrupt)") from exc
        yield image
    finally:
        image.close()


def _frame(image: Image.Image, frame: int) -> Image.Image:
    """Frame `frame` of `image`, EXIF orientation applied, as an independent copy."""
    frames = getattr(image, "n_frames", 1)
    if not 0 <= frame < frames:
        raise BadDocument(f"frame {frame} is out of range: the image has {frames} frame(s) (0-{frames - 1})")
    if frame:
        image.seek(frame)
    return ImageOps.exif_transpose(image)


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def _save(image: Image.Image, target: Path, fmt: str | None) -> dict:
    """Write `image` to `target` in `fmt` (default: from the extension), atomically."""
    fmt = fmt or Image.registered_extensions().get(target.suffix.lower())
    if fmt is None:
        raise BadDocument(f"cannot tell the image format from {target.name!r}; end the output path with .png, .jpg, ...")
    if fmt == "JPEG" or (fmt == "BMP" and image.mode not in ("RGB", "L", "1", "P")):
        image = _on_white(image)
    elif fmt in ("PNG", "WEBP", "TIFF") and image.mode not in ("RGB", "RGBA", "L", "LA", "1", "P", "I", "I;16"):
        image = image.convert("RGBA")
    with atomic_output(target) as tmp:
        try:
            image.save(tmp, fmt)
        except (OSError, ValueError, KeyError) as exc:
            raise BadDocument(f"cannot write {fmt} to {target.name!r}: {exc}") from exc
    return {"output_path": str(target), "width": image.width, "height": image.height, "format": fmt}


def _on_white(image: Image.Image) -> Image.Image:
    """RGB (or L), with any transparency composited onto white, never black."""
    if image.mode in ("RGB", "L"):
        return image
    if image.mode == "P" and "transparency" not in image.info:
        return image.convert("RGB")
    rgba = image.convert("RGBA")
    background = Image.new("RGB", rgba.size, "white")
    background.paste(rgba, mask=rgba.getchannel("A"))
    return background


def _output(ws: Workspace, source: Path, output_path: str | None, suffix: str, extension: str | None = None) -> Path:
    if output_path:
        return ws.roots.output_file(output_path)
    return sibling(source, suffix, extension or source.suffix)


def _check_size(width: int, height: int) -> None:
    if width * height > MAX_OUTPUT_PIXELS:
        raise BadDocument(f"the result would be {width}x{height} px, over 100 megapixels; ask for a smaller size")


# --- reading -------------------------------------------------------------------------------


class PathArgs(Args):
    path: str


def read_image(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    with open_image(path) as image:
        fmt = image.format
        upright = _frame(image, 0)
    encoded = encode_for_model(upright)
    return ToolOutput(
        data={
            "path": str(path), "format": fmt, "width": upright.width, "height": upright.height,
            "delivered_width": encoded.width, "delivered_height": encoded.height,
            "scaled_down": (encoded.width, encoded.height) != upright.size,
        },
        images=[encoded],
    )


def get_image_metadata(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    size = path.stat().st_size
    with open_image(path) as image:
        return ToolOutput(data={
            "format": image.format, "width": image.width, "height": image.height, "mode": image.mode,
            "file_size": _human(size), "file_size_bytes": size,
        })


def image_get_info(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    size = path.stat().st_size
    with open_image(path) as image:
        width, height = image.size
        orientation = image.getexif().get(0x0112, 1)
        if orientation in (5, 6, 7, 8):  # rotated by 90 or 270 degrees
            width, height = height, width
        return ToolOutput(data={
            "width": width, "height": height, "format": image.format, "mode": image.mode,
            "n_frames": getattr(image, "n_frames", 1), "is_animated": getattr(image, "is_animated", False),
            "exif_orientation": orientation,
            "file_size_bytes": size, "file_size_human": _human(size),
        })


# --- editing -------------------------------------------------------------------------------


class EditArgs(Args):
    path: str
    output_path: str | None = None
    frame: int = Field(default=0, ge=0)


class CropArgs(EditArgs):
    left: int
    top: int
    right: int
    bottom: int


def image_crop(ws: Workspace, args: CropArgs) -> ToolOutput:
    source = ws.roots.input_file(args.path)
    target = _output(ws, source, args.output_path, "-cropped")
    with open_image(source) as image:
        frame = _frame(image, args.frame)
        width, height = frame.size
        if not (0 <= args.left < args.right <= width and 0 <= args.top < args.bottom <= height):
            raise BadDocument(
                f"the crop box ({args.left}, {args.top}, {args.right}, {args.bottom}) is not inside the "
                f"{width}x{height} image; need 0 <= left < right <= {width} and 0 <= top < bottom <= {height}"
            )
        return ToolOutput(data=_save(frame.crop((args.left, args.top, args.right, args.bottom)), target, None))


class ResizeArgs(EditArgs):
    width: int | None = Field(default=None, ge=1)
    height: int | None = Field(default=None, ge=1)


def image_resize(ws: Workspace, args: ResizeArgs) -> ToolOutput:
    if args.width is None and args.height is None:
        raise BadDocument("give width, height or both (one alone keeps the aspect ratio)")
    source = ws.roots.input_file(args.path)
    target = _output(ws, source, args.output_path, "-resized")
    with open_image(source) as image:
        frame = _frame(image, args.frame)
        width = args.width or max(1, round(frame.width * args.height / frame.height))
        height = args.height or max(1, round(frame.height * args.width / frame.width))
        _check_size(width, height)
        return ToolOutput(data=_save(frame.resize((width, height), Image.Resampling.LANCZOS), target, None))


class Region(BaseModel):
    model_config = ConfigDict(extra="forbid")
    left: int = Field(ge=0)
    top: int = Field(ge=0)
    width: int = Field(ge=1)
    height: int = Field(ge=1)


class ZoomArgs(EditArgs):
    region: Region
    zoom_factor: float = Field(default=2.0, gt=0, le=20)


def image_zoom(ws: Workspace, args: ZoomArgs) -> ToolOutput:
    source = ws.roots.input_file(args.path)
    target = _output(ws, source, args.output_path, "-zoomed")
    r = args.region
    with open_image(source) as image:
        frame = _frame(image, args.frame)
        if r.left + r.width > frame.width or r.top + r.height > frame.height:
            raise BadDocument(
                f"the region {r.width}x{r.height} at ({r.left}, {r.top}) reaches outside the "
                f"{frame.width}x{frame.height} image"
            )
        size = (max(1, round(r.width * args.zoom_factor)), max(1, round(r.height * args.zoom_factor)))
        _check_size(*size)
        box = (r.left, r.top, r.left + r.width, r.top + r.height)
        zoomed = frame.crop(box).resize(size, Image.Resampling.LANCZOS)
        return ToolOutput(data=_save(zoomed, target, None))


class RotateArgs(EditArgs):
    angle: float


def image_rotate(ws: Workspace, args: RotateArgs) -> ToolOutput:
    source = ws.roots.input_file(args.path)
    target = _output(ws, source, args.output_path, "-rotated")
    with open_image(source) as image:
        frame = _frame(image, args.frame)
        quarter = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}
        turn = args.angle % 360
        if turn == 0:
            rotated = frame.copy()
        elif turn in quarter:  # exact, no resampling
            rotated = frame.transpose(quarter[int(turn)])
        else:
            if frame.mode == "P":
                frame = frame.convert("RGBA")
            fill = (0, 0, 0, 0) if "A" in frame.getbands() else ("white" if frame.mode in ("RGB", "L") else None)
            rotated = frame.rotate(args.angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=fill)
        return ToolOutput(data=_save(rotated, target, None))


def _color(value: str) -> str:
    try:
        ImageColor.getrgb(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a color; use a name like 'red' or a hex like '#ff0000'") from exc
    return value


Color = Annotated[str, AfterValidator(_color)]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")
    color: Color = "red"


class RectangleNote(_Shape):
    type: Literal["rectangle"]
    x: int
    y: int
    width: int = Field(ge=1)
    height: int = Field(ge=1)
    line_width: int = Field(default=3, ge=1, le=50)


class TextNote(_Shape):
    type: Literal["text"]
    x: int
    y: int
    text: str
    font_size: int = Field(default=20, ge=4, le=400)


class CircleNote(_Shape):
    type: Literal["circle"]
    cx: int
    cy: int
    radius: int = Field(ge=1)
    line_width: int = Field(default=3, ge=1, le=50)


class ArrowNote(_Shape):
    type: Literal["arrow"]
    x1: int
    y1: int
    x2: int
    y2: int
    line_width: int = Field(default=3, ge=1, le=50)


Annotation = Annotated[Union[RectangleNote, TextNote, CircleNote, ArrowNote], Field(discriminator="type")]
_ANNOTATIONS = TypeAdapter(list[Annotation])


class AnnotateArgs(EditArgs):
    annotations: str | list[Annotation] = Field(
        description="A list of annotations, or that list as a JSON string (see the tool description).",
    )

    @field_validator("annotations", mode="before")
    @classmethod
    def _parse(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValueError(f"annotations is not valid JSON: {exc}") from exc
        try:
            parsed = _ANNOTATIONS.validate_python(value)
        except ValidationError as exc:
            raise ValueError(str(exc)) from exc
        if not parsed:
            raise ValueError("annotations is empty; give at least one")
        return parsed


def _draw(draw: ImageDraw.ImageDraw, note: Annotation) -> None:
    color = ImageColor.getrgb(note.color)
    if isinstance(note, RectangleNote):
        draw.rectangle((note.x, note.y, note.x + note.width, note.y + note.height), outline=color, width=note.line_width)
    elif isinstance(note, TextNote):
        draw.text((note.x, note.y), note.text, fill=color, font=ImageFont.load_default(size=note.font_size))
    elif isinstance(note, CircleNote):
        box = (note.cx - note.radius, note.cy - note.radius, note.cx + note.radius, note.cy + note.radius)
        draw.ellipse(box, outline=color, width=note.line_width)
    else:
        draw.line((note.x1, note.y1, note.x2, note.y2), fill=color, width=note.line_width)
        # The head: two strokes back from the tip, 30 degrees either side of the shaft.
        angle = math.atan2(note.y2 - note.y1, note.x2 - note.x1)
        head = max(10, note.line_width * 4)
        for side in (-math.pi / 6, math.pi / 6):
            end = (note.x2 - head * math.cos(angle + side), note.y2 - head * math.sin(angle + side))
            draw.line((note.x2, note.y2, *end), fill=color, width=note.line_width)


def image_annotate(ws: Workspace, args: AnnotateArgs) -> ToolOutput:
    source = ws.roots.input_file(args.path)
    target = _output(ws, source, args.output_path, "-annotated")
    with open_image(source) as image:
        frame = _frame(image, args.frame)
        canvas = frame.convert("RGBA") if "A" in frame.getbands() or frame.mode == "P" else frame.convert("RGB")
        draw = ImageDraw.Draw(canvas)
        for note in args.annotations:
            _draw(draw, note)
        data = _save(canvas, target, None)
        data["annotations"] = len(args.annotations)
        return ToolOutput(data=data)


class ConvertImageArgs(EditArgs):
    format: Literal["png", "jpeg", "jpg", "webp", "bmp", "tiff", "tif"]


def image_convert(ws: Workspace, args: ConvertImageArgs) -> ToolOutput:
    name = {"jpg": "jpeg", "tif": "tiff"}.get(args.format, args.format)
    fmt, extension = FORMATS[name]
    source = ws.roots.input_file(args.path)
    if args.output_path:
        target = ws.roots.output_file(args.output_path)
    else:
        target = sibling(source, "", extension)
    with open_image(source) as image:
        frame = _frame(image, args.frame)
        return ToolOutput(data=_save(frame, target, fmt))


_EDIT_ARGS_DOC = (
    "    output_path: Path for the output image (default: new file next to input, same format; an "
    "existing file is never replaced unless named here).\n"
    "    frame: Frame index for multi-frame inputs (default 0).\n\n"
    "Returns:\n    JSON {output_path, width, height, format}."
)

TOOLS = [
    ToolSpec(
        name="read_image",
        description=(
            "Read an image into the model's vision context (PNG / JPEG / WEBP / GIF / BMP / TIFF).\n\n"
            "The model SEES the image and can transcribe its text, describe it, or compare it with "
            "another. For dimensions / file size / format WITHOUT the image, use get_image_metadata. "
            "Images larger than 1568 px on the long edge or 3 MB are scaled down before they are "
            "returned (EXIF orientation applied).\n\n"
            "Args:\n    path: Path to the image file.\n\n"
            "Returns:\n    JSON {path, format, width, height, delivered_width, delivered_height, "
            "scaled_down}, then the image block."
        ),
        args=PathArgs,
        run=read_image,
    ),
    ToolSpec(
        name="get_image_metadata",
        description=(
            "Read image metadata (format / dimensions / file size) WITHOUT delivering the image bytes "
            "to the model. Use it to decide whether to crop / resize before reading; to SEE the image "
            "use read_image.\n\n"
            "Args:\n    path: Path to the image file.\n\n"
            "Returns:\n    JSON with keys: format, width, height, mode, file_size, file_size_bytes "
            "(width and height as stored in the file)."
        ),
        args=PathArgs,
        run=get_image_metadata,
    ),
    ToolSpec(
        name="image_get_info",
        description=(
            "Get image dimensions, format, color mode, frame count, and file size.\n\n"
            "Dimensions reflect the EXIF-corrected orientation (what a viewer shows), so they match "
            "the coordinate space the other image tools operate in.\n\n"
            "Args:\n    path: Path to the image file.\n\n"
            "Returns:\n    JSON with width, height, format, mode, n_frames, is_animated, "
            "exif_orientation, file_size_bytes, and file_size_human."
        ),
        args=PathArgs,
        run=image_get_info,
    ),
    ToolSpec(
        name="image_crop",
        description=(
            "Crop an image to the box (left, top, right, bottom), in pixels of the EXIF-corrected image.\n\n"
            "Args:\n    path: Path to the input image.\n    left, top, right, bottom: The crop box.\n"
            + _EDIT_ARGS_DOC
        ),
        args=CropArgs,
        run=image_crop,
    ),
    ToolSpec(
        name="image_resize",
        description=(
            "Resize an image. Maintains aspect ratio if only one dimension is given.\n\n"
            "Args:\n    path: Path to the input image.\n    width: Target width in pixels (optional).\n"
            "    height: Target height in pixels (optional).\n" + _EDIT_ARGS_DOC
        ),
        args=ResizeArgs,
        run=image_resize,
    ),
    ToolSpec(
        name="image_zoom",
        description=(
            "Zoom into a region of an image: crops the region, then scales it up by zoom_factor.\n\n"
            "Args:\n    path: Path to the input image.\n"
            "    region: {\"left\": int, \"top\": int, \"width\": int, \"height\": int}.\n"
            "    zoom_factor: Zoom multiplier (default 2.0).\n" + _EDIT_ARGS_DOC
        ),
        args=ZoomArgs,
        run=image_zoom,
    ),
    ToolSpec(
        name="image_rotate",
        description=(
            "Rotate an image by a given angle (counter-clockwise). The canvas is expanded to fit the "
            "whole rotated image (multiples of 90 degrees are exact).\n\n"
            "Args:\n    path: Path to the input image.\n    angle: Rotation angle in degrees "
            "(counter-clockwise).\n" + _EDIT_ARGS_DOC
        ),
        args=RotateArgs,
        run=image_rotate,
    ),
    ToolSpec(
        name="image_annotate",
        description=(
            "Add annotations (text, rectangles, circles, arrows) to an image.\n\n"
            "Args:\n    path: Path to the input image.\n"
            "    annotations: A list of annotation objects (or that list as a JSON string):\n"
            "        - {\"type\": \"rectangle\", \"x\": int, \"y\": int, \"width\": int, \"height\": int, \"color\": str}\n"
            "        - {\"type\": \"text\", \"x\": int, \"y\": int, \"text\": str, \"font_size\": int, \"color\": str}\n"
            "        - {\"type\": \"circle\", \"cx\": int, \"cy\": int, \"radius\": int, \"color\": str}\n"
            "        - {\"type\": \"arrow\", \"x1\": int, \"y1\": int, \"x2\": int, \"y2\": int, \"color\": str}\n"
            "      color defaults to 'red'; rectangle, circle and arrow take line_width (default 3).\n"
            + _EDIT_ARGS_DOC
        ),
        args=AnnotateArgs,
        run=image_annotate,
    ),
    ToolSpec(
        name="image_convert",
        description=(
            "Convert an image between formats (PNG, JPEG, WEBP, BMP, TIFF).\n\n"
            "Non-RGB/L modes are normalized to RGB for JPEG, compositing any alpha onto a white "
            "background (not black).\n\n"
            "Args:\n    path: Path to the input image.\n"
            "    format: Target format: 'png', 'jpeg', 'webp', 'bmp', 'tiff'.\n"
            "    output_path: Path for the output image (default: new file with the new extension).\n"
            "    frame: Frame index for multi-frame inputs (default 0).\n\n"
            "Returns:\n    JSON {output_path, width, height, format}."
        ),
        args=ConvertImageArgs,
        run=image_convert,
    ),
]
