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

from .errors import BadDocument, InvalidRequest
from .paths import atomic_output, sibling
from .results import ToolOutput, encode_for_model
from .tooling import PATH_DOC, WRITES_FILES, Args, Output, Workspace, document_tool

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
        raise BadDocument(f"{path.name!r} is not an image Pillow can read ({exc})",
                          hint="check the file; for documents use get_file_overview") from exc
    except PermissionError:
        raise  # the tool wrapper says whose permission is missing
    except OSError as exc:
        raise BadDocument(f"cannot read the image {path.name!r}: {exc} (the file is corrupt)",
                          hint="check that it opens in an image viewer") from exc
    try:
        try:
            image.load()
        except (OSError, Image.DecompressionBombError) as exc:
            raise BadDocument(f"cannot read the image {path.name!r}: {exc} (the file is truncated or corrupt)",
                              hint="check that it opens in an image viewer") from exc
        yield image
    finally:
        image.close()


def _frame(image: Image.Image, frame: int) -> Image.Image:
    """Frame `frame` of `image`, EXIF orientation applied, as an independent copy."""
    frames = getattr(image, "n_frames", 1)
    if not 0 <= frame < frames:
        raise InvalidRequest(f"frame {frame} is out of range: the image has {frames} frame(s) (0-{frames - 1})",
                             hint="frames are numbered from 0", field="frame")
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


class SavedImageOutput(Output):
    path: str = Field(description="Absolute path of the input image.")
    output_path: str = Field(description="Absolute path of the image written.")
    width: int = Field(description="Width of the image written, in pixels.")
    height: int = Field(description="Height of the image written, in pixels.")
    format: str = Field(description="Pillow's name of the format written, e.g. 'PNG', 'JPEG'.")


def _save(image: Image.Image, source: Path, target: Path, fmt: str | None) -> SavedImageOutput:
    """Write `image` to `target` in `fmt` (default: from the extension), atomically."""
    fmt = fmt or Image.registered_extensions().get(target.suffix.lower())
    if fmt is None:
        raise InvalidRequest(f"cannot tell the image format from {target.name!r}",
                             hint="end the output path with .png, .jpg, ...", field="output_path")
    if fmt == "JPEG" or (fmt == "BMP" and image.mode not in ("RGB", "L", "1", "P")):
        image = _on_white(image)
    elif fmt in ("PNG", "WEBP", "TIFF") and image.mode not in ("RGB", "RGBA", "L", "LA", "1", "P", "I", "I;16"):
        image = image.convert("RGBA")
    with atomic_output(target) as tmp:
        try:
            image.save(tmp, fmt)
        except (OSError, ValueError, KeyError) as exc:
            raise BadDocument(f"cannot write {fmt} to {target.name!r}: {exc}",
                              hint="choose another format or output name") from exc
    return SavedImageOutput(path=str(source), output_path=str(target), width=image.width, height=image.height,
                            format=fmt)


def _saved(tool: str, data: SavedImageOutput) -> ToolOutput:
    summary = (f"{tool}: {Path(data.path).name} -> {data.output_path}, {data.width}x{data.height} px "
               f"{data.format}")
    return ToolOutput(data=data, summary=summary)


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
        raise InvalidRequest(f"the result would be {width}x{height} px, over 100 megapixels",
                             hint="ask for a smaller size")


# --- reading -------------------------------------------------------------------------------


class PathArgs(Args):
    path: str = Field(description=PATH_DOC)


class ReadImageOutput(Output):
    path: str = Field(description="Absolute path of the image read.")
    format: str = Field(description="Pillow's name of the file's format, e.g. 'PNG', 'JPEG'.")
    width: int = Field(description="Width of the image as a viewer shows it (EXIF orientation applied), in pixels.")
    height: int = Field(description="Height of the image as a viewer shows it, in pixels.")
    delivered_width: int = Field(description="Width of the image block returned, in pixels.")
    delivered_height: int = Field(description="Height of the image block returned, in pixels.")
    scaled_down: bool = Field(description="Whether the image block was scaled down to the image limits.")
    image_index: int = Field(description="Index of the image among the result's image blocks (0-based).")


def read_image(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    with open_image(path) as image:
        fmt = image.format or path.suffix.lstrip(".").upper()
        upright = _frame(image, 0)
    encoded = encode_for_model(upright)
    data = ReadImageOutput(path=str(path), format=fmt, width=upright.width, height=upright.height,
                           delivered_width=encoded.width, delivered_height=encoded.height,
                           scaled_down=(encoded.width, encoded.height) != upright.size, image_index=0)
    summary = f"read_image: {path.name}, {fmt} {data.width}x{data.height} px"
    if data.scaled_down:
        summary += f", shown at {encoded.width}x{encoded.height}"
    return ToolOutput(data=data, summary=summary, images=[encoded])


class ImageMetadataOutput(Output):
    path: str = Field(description="Absolute path of the image.")
    format: str = Field(description="Pillow's name of the file's format, e.g. 'PNG', 'JPEG'.")
    width: int = Field(description="Width as stored in the file (EXIF orientation not applied), in pixels.")
    height: int = Field(description="Height as stored in the file, in pixels.")
    mode: str = Field(description="Pillow's color mode, e.g. 'RGB', 'RGBA', 'L', 'P'.")
    file_size: str = Field(description="The file's size for a person, e.g. '12.3 KB'.")
    file_size_bytes: int = Field(description="The file's size in bytes.")


def get_image_metadata(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    size = path.stat().st_size
    with open_image(path) as image:
        data = ImageMetadataOutput(path=str(path), format=image.format or path.suffix.lstrip(".").upper(),
                                   width=image.width, height=image.height, mode=image.mode,
                                   file_size=_human(size), file_size_bytes=size)
    return ToolOutput(data=data, summary=f"get_image_metadata: {path.name}, {data.format} {data.width}x"
                                         f"{data.height} px {data.mode}, {data.file_size}")


class ImageInfoOutput(Output):
    path: str = Field(description="Absolute path of the image.")
    width: int = Field(description="Width as a viewer shows it (EXIF orientation applied), in pixels: the "
                                   "coordinate space of the editing tools.")
    height: int = Field(description="Height as a viewer shows it, in pixels.")
    format: str = Field(description="Pillow's name of the file's format, e.g. 'PNG', 'JPEG'.")
    mode: str = Field(description="Pillow's color mode, e.g. 'RGB', 'RGBA', 'L', 'P'.")
    n_frames: int = Field(description="Number of frames (1 for a still image); frames are numbered from 0.")
    is_animated: bool = Field(description="Whether the image is animated.")
    exif_orientation: int = Field(description="The EXIF orientation tag, 1-8 (1: stored upright).")
    file_size_bytes: int = Field(description="The file's size in bytes.")
    file_size_human: str = Field(description="The file's size for a person, e.g. '12.3 KB'.")


def image_get_info(ws: Workspace, args: PathArgs) -> ToolOutput:
    path = ws.roots.input_file(args.path)
    size = path.stat().st_size
    with open_image(path) as image:
        width, height = image.size
        orientation = image.getexif().get(0x0112, 1)
        if orientation in (5, 6, 7, 8):  # rotated by 90 or 270 degrees
            width, height = height, width
        data = ImageInfoOutput(
            path=str(path), width=width, height=height, format=image.format or path.suffix.lstrip(".").upper(),
            mode=image.mode, n_frames=getattr(image, "n_frames", 1),
            is_animated=getattr(image, "is_animated", False), exif_orientation=orientation,
            file_size_bytes=size, file_size_human=_human(size),
        )
    frames = f", {data.n_frames} frames" if data.n_frames > 1 else ""
    return ToolOutput(data=data, summary=f"image_get_info: {path.name}, {data.format} {width}x{height} px "
                                         f"{data.mode}{frames}, {data.file_size_human}")


# --- editing -------------------------------------------------------------------------------


class EditArgs(Args):
    path: str = Field(description=PATH_DOC + " The input image.")
    output_path: str | None = Field(
        default=None, description="Where to write the result, inside the document roots (default: a new file "
                                  "next to the input; an existing file is replaced only when named here).")
    frame: int = Field(default=0, ge=0, description="Frame of a multi-frame input (GIF, TIFF), 0-based.")


class CropArgs(EditArgs):
    left: int = Field(description="Left edge of the box, in pixels from the left (EXIF-corrected image).")
    top: int = Field(description="Top edge of the box, in pixels from the top.")
    right: int = Field(description="Right edge of the box (exclusive), in pixels from the left.")
    bottom: int = Field(description="Bottom edge of the box (exclusive), in pixels from the top.")


def image_crop(ws: Workspace, args: CropArgs) -> ToolOutput:
    source = ws.roots.input_file(args.path)
    target = _output(ws, source, args.output_path, "-cropped")
    with open_image(source) as image:
        frame = _frame(image, args.frame)
        width, height = frame.size
        if not (0 <= args.left < args.right <= width and 0 <= args.top < args.bottom <= height):
            raise InvalidRequest(
                f"the crop box ({args.left}, {args.top}, {args.right}, {args.bottom}) is not inside the "
                f"{width}x{height} image",
                hint=f"need 0 <= left < right <= {width} and 0 <= top < bottom <= {height}",
            )
        return _saved("image_crop", _save(frame.crop((args.left, args.top, args.right, args.bottom)), source,
                                          target, None))


class ResizeArgs(EditArgs):
    width: int | None = Field(default=None, ge=1, description="Target width in pixels.")
    height: int | None = Field(default=None, ge=1, description="Target height in pixels.")


def image_resize(ws: Workspace, args: ResizeArgs) -> ToolOutput:
    if args.width is None and args.height is None:
        raise InvalidRequest("neither width nor height was given",
                             hint="give width, height or both (one alone keeps the aspect ratio)", field="width")
    source = ws.roots.input_file(args.path)
    target = _output(ws, source, args.output_path, "-resized")
    with open_image(source) as image:
        frame = _frame(image, args.frame)
        width = args.width or max(1, round(frame.width * args.height / frame.height))
        height = args.height or max(1, round(frame.height * args.width / frame.width))
        _check_size(width, height)
        return _saved("image_resize", _save(frame.resize((width, height), Image.Resampling.LANCZOS), source,
                                            target, None))


class Region(BaseModel):
    model_config = ConfigDict(extra="forbid")
    left: int = Field(ge=0, description="Left edge, in pixels from the left.")
    top: int = Field(ge=0, description="Top edge, in pixels from the top.")
    width: int = Field(ge=1, description="Width in pixels.")
    height: int = Field(ge=1, description="Height in pixels.")


class ZoomArgs(EditArgs):
    region: Region = Field(description="The region to zoom into (EXIF-corrected image).")
    zoom_factor: float = Field(default=2.0, gt=0, le=20, description="How many times to enlarge the region.")


def image_zoom(ws: Workspace, args: ZoomArgs) -> ToolOutput:
    source = ws.roots.input_file(args.path)
    target = _output(ws, source, args.output_path, "-zoomed")
    r = args.region
    with open_image(source) as image:
        frame = _frame(image, args.frame)
        if r.left + r.width > frame.width or r.top + r.height > frame.height:
            raise InvalidRequest(
                f"the region {r.width}x{r.height} at ({r.left}, {r.top}) reaches outside the "
                f"{frame.width}x{frame.height} image",
                hint="read the size with image_get_info and keep the region inside it", field="region",
            )
        size = (max(1, round(r.width * args.zoom_factor)), max(1, round(r.height * args.zoom_factor)))
        _check_size(*size)
        box = (r.left, r.top, r.left + r.width, r.top + r.height)
        zoomed = frame.crop(box).resize(size, Image.Resampling.LANCZOS)
        return _saved("image_zoom", _save(zoomed, source, target, None))


class RotateArgs(EditArgs):
    angle: float = Field(description="Rotation in degrees, counter-clockwise.")


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
        return _saved("image_rotate", _save(rotated, source, target, None))


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


class AnnotatedImageOutput(SavedImageOutput):
    annotations: int = Field(description="Number of annotations drawn.")


def image_annotate(ws: Workspace, args: AnnotateArgs) -> ToolOutput:
    source = ws.roots.input_file(args.path)
    target = _output(ws, source, args.output_path, "-annotated")
    with open_image(source) as image:
        frame = _frame(image, args.frame)
        canvas = frame.convert("RGBA") if "A" in frame.getbands() or frame.mode == "P" else frame.convert("RGB")
        draw = ImageDraw.Draw(canvas)
        for note in args.annotations:
            _draw(draw, note)
        saved = _save(canvas, source, target, None)
    data = AnnotatedImageOutput(**saved.model_dump(), annotations=len(args.annotations))
    return ToolOutput(data=data, summary=f"image_annotate: {source.name} -> {data.output_path}, "
                                         f"{data.annotations} annotation(s) drawn")


class ConvertImageArgs(EditArgs):
    format: Literal["png", "jpeg", "jpg", "webp", "bmp", "tiff", "tif"] = Field(description="The target format.")


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
        return _saved("image_convert", _save(frame, source, target, fmt))


_SAVED = "Returns: the path, size and format of the image written."

TOOLS = [
    document_tool(
        name="read_image",
        description=(
            "Read an image file (PNG / JPEG / WEBP / GIF / BMP / TIFF) and return it as an image block, "
            "EXIF orientation applied, scaled down to at most 1568 px on the long edge and 3 MB. In a "
            "script, attach the block with artifact() to look at it. For the size and format alone, "
            "use get_image_metadata.\n\n"
            "Returns: the image's format and size, and the image block (image_index)."
        ),
        args=PathArgs,
        output=ReadImageOutput,
        run=read_image,
    ),
    document_tool(
        name="get_image_metadata",
        description=(
            "Read an image's format, dimensions (as stored) and file size, without the image itself. "
            "Use it to decide whether to crop or resize before reading.\n\n"
            "Returns: format, width, height, color mode and file size."
        ),
        args=PathArgs,
        output=ImageMetadataOutput,
        run=get_image_metadata,
    ),
    document_tool(
        name="image_get_info",
        description=(
            "Get an image's dimensions, format, color mode, frame count and file size. Dimensions are "
            "those a viewer shows (EXIF orientation applied): the coordinates the editing tools take.\n\n"
            "Returns: width, height, format, mode, frames, EXIF orientation and file size."
        ),
        args=PathArgs,
        output=ImageInfoOutput,
        run=image_get_info,
    ),
    document_tool(
        name="image_crop",
        description=(
            "Crop an image to the box (left, top, right, bottom), in pixels of the EXIF-corrected "
            "image, and write it as a new file.\n\n" + _SAVED
        ),
        args=CropArgs,
        output=SavedImageOutput,
        run=image_crop,
        annotations=WRITES_FILES,
    ),
    document_tool(
        name="image_resize",
        description=(
            "Resize an image and write it as a new file; given only width or height, the aspect ratio "
            "is kept.\n\n" + _SAVED
        ),
        args=ResizeArgs,
        output=SavedImageOutput,
        run=image_resize,
        annotations=WRITES_FILES,
    ),
    document_tool(
        name="image_zoom",
        description=(
            "Zoom into a region of an image: crop the region, scale it up by zoom_factor, and write it "
            "as a new file.\n\n" + _SAVED
        ),
        args=ZoomArgs,
        output=SavedImageOutput,
        run=image_zoom,
        annotations=WRITES_FILES,
    ),
    document_tool(
        name="image_rotate",
        description=(
            "Rotate an image counter-clockwise and write it as a new file. The canvas grows to fit the "
            "whole rotated image (multiples of 90 degrees are exact).\n\n" + _SAVED
        ),
        args=RotateArgs,
        output=SavedImageOutput,
        run=image_rotate,
        annotations=WRITES_FILES,
    ),
    document_tool(
        name="image_annotate",
        description=(
            "Draw annotations (rectangles, text, circles, arrows) on an image and write it as a new file.\n\n"
            "annotations is a list (or that list as a JSON string) of:\n"
            "- {\"type\": \"rectangle\", \"x\", \"y\", \"width\", \"height\", \"color\"?, \"line_width\"?}\n"
            "- {\"type\": \"text\", \"x\", \"y\", \"text\", \"font_size\"?, \"color\"?}\n"
            "- {\"type\": \"circle\", \"cx\", \"cy\", \"radius\", \"color\"?, \"line_width\"?}\n"
            "- {\"type\": \"arrow\", \"x1\", \"y1\", \"x2\", \"y2\", \"color\"?, \"line_width\"?}\n"
            "Coordinates in pixels from the top-left corner; color defaults to 'red', line_width to 3.\n\n"
            "Returns: the path, size and format of the image written, and how many annotations were drawn."
        ),
        args=AnnotateArgs,
        output=AnnotatedImageOutput,
        run=image_annotate,
        annotations=WRITES_FILES,
    ),
    document_tool(
        name="image_convert",
        description=(
            "Convert an image to another format (PNG, JPEG, WEBP, BMP, TIFF) and write it as a new file "
            "(default: next to the input, with the new extension). For JPEG, transparency is composited "
            "onto white (not black).\n\n" + _SAVED
        ),
        args=ConvertImageArgs,
        output=SavedImageOutput,
        run=image_convert,
        annotations=WRITES_FILES,
    ),
]
