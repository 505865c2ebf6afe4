"""Image tools: reading into the model's view, metadata, and the editing tools."""

from __future__ import annotations

import base64
import io
import json

from PIL import Image


from .conftest import error, ok


def _exif_rotated_jpeg(path):
    """A 400x200 JPEG stored sideways: EXIF orientation 6 means a viewer shows it 200x400."""
    image = Image.new("RGB", (400, 200), "blue")
    exif = Image.Exif()
    exif[0x0112] = 6
    image.save(path, "JPEG", exif=exif)
    return path


def _animated_gif(path):
    frames = [Image.new("RGB", (60, 40), color) for color in ("red", "green", "blue")]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    return path


def test_read_image_scales_a_big_image_to_1568(call, scratch):
    """A 4000x1000 image reaches the model at 1568x392, with the original size in the JSON."""
    big = scratch / "wide.png"
    Image.new("RGB", (4000, 1000), "white").save(big)
    result = call("read_image", path=str(big))
    data = ok(result)
    assert (data["width"], data["height"]) == (4000, 1000)
    assert (data["delivered_width"], data["delivered_height"]) == (1568, 392)
    delivered = Image.open(io.BytesIO(base64.b64decode(result.content[1 + data["image_index"]].data)))
    assert delivered.size == (1568, 392)
    assert result.content[0].text.split("\n")[0] == "read_image: wide.png, PNG 4000x1000 px, shown at 1568x392"


def test_read_image_keeps_under_3_mb(call, scratch):
    """Incompressible noise that would be a huge PNG is re-encoded under 3 MB."""
    noisy = scratch / "noise.png"
    channels = [Image.effect_noise((1500, 1500), sigma) for sigma in (100, 120, 140)]
    Image.merge("RGB", channels).save(noisy)
    assert noisy.stat().st_size > 3 * 1024 * 1024
    result = call("read_image", path=str(noisy))
    ok(result)
    assert result.content[1].mime_type == "image/jpeg"
    assert len(base64.b64decode(result.content[1].data)) <= 3 * 1024 * 1024


def test_get_image_metadata(call, docs_dir):
    """Format, size, mode and file size, without the image itself."""
    result = call("get_image_metadata", path=str(docs_dir / "invoice.png"))
    data = ok(result)
    assert len(result.content) == 1
    assert (data["format"], data["width"], data["height"], data["mode"]) == ("PNG", 900, 200, "RGB")
    assert data["file_size_bytes"] == (docs_dir / "invoice.png").stat().st_size


def test_image_get_info_reports_exif_corrected_size_and_frames(call, scratch):
    """A sideways-stored JPEG reports the size a viewer shows; a GIF its frame count."""
    info = ok(call("image_get_info", path=str(_exif_rotated_jpeg(scratch / "photo.jpg"))))
    assert (info["width"], info["height"]) == (200, 400)
    gif = ok(call("image_get_info", path=str(_animated_gif(scratch / "spin.gif"))))
    assert gif["n_frames"] == 3 and gif["is_animated"] is True


def test_crop_works_in_the_exif_corrected_space(call, scratch):
    """Cropping the shown 200x400 photo's lower half gives 200x200, written next to it."""
    photo = _exif_rotated_jpeg(scratch / "photo.jpg")
    data = ok(call("image_crop", path=str(photo), left=0, top=200, right=200, bottom=400))
    assert data["output_path"] == str(scratch / "photo-cropped.jpg")
    with Image.open(data["output_path"]) as out:
        assert out.size == (200, 200) and out.format == "JPEG"


def test_crop_outside_the_image_is_refused(call, docs_dir, scratch):
    """A crop box beyond the image is refused with the image's size, and nothing is written."""
    message = error(call("image_crop", path=str(docs_dir / "invoice.png"), left=0, top=0, right=901, bottom=10,
                         output_path=str(scratch / "out.png")), kind="invalid_arguments")
    assert "900x200" in message
    assert not (scratch / "out.png").exists()


def test_resize_keeps_the_aspect_ratio(call, docs_dir, scratch):
    """Giving only the width scales the height to match."""
    data = ok(call("image_resize", path=str(docs_dir / "invoice.png"), width=450, output_path=str(scratch / "half.png")))
    assert (data["width"], data["height"]) == (450, 100)
    with Image.open(scratch / "half.png") as out:
        assert out.size == (450, 100)


def test_default_outputs_never_replace_existing_files(call, scratch, docs_dir):
    """Two resizes with default names write two files, the second with a new name."""
    source = scratch / "pic.png"
    Image.new("RGB", (100, 50), "red").save(source)
    first = ok(call("image_resize", path=str(source), width=10))["output_path"]
    second = ok(call("image_resize", path=str(source), height=10))["output_path"]
    assert first != second
    with Image.open(first) as a, Image.open(second) as b:
        assert a.size == (10, 5) and b.size == (20, 10)


def test_zoom_crops_then_enlarges(call, scratch):
    """A 20x10 region at factor 3 becomes 60x30, showing that region's pixels."""
    source = scratch / "quad.png"
    image = Image.new("RGB", (100, 100), "white")
    image.paste((255, 0, 0), (50, 50, 100, 100))
    image.save(source)
    data = ok(call("image_zoom", path=str(source), region={"left": 60, "top": 60, "width": 20, "height": 10}, zoom_factor=3))
    with Image.open(data["output_path"]) as out:
        assert out.size == (60, 30)
        assert out.convert("RGB").getpixel((30, 15)) == (255, 0, 0)


def test_zoom_region_refuses_unknown_keys(call, docs_dir):
    """The region object is typed: a misspelt key is named."""
    message = error(call("image_zoom", path=str(docs_dir / "invoice.png"), region={"left": 0, "top": 0, "width": 5, "hieght": 5}))
    assert "hieght" in message


def test_rotate_expands_the_canvas(call, docs_dir, scratch):
    """90 degrees swaps width and height; 45 degrees grows the canvas to fit."""
    quarter = ok(call("image_rotate", path=str(docs_dir / "invoice.png"), angle=90, output_path=str(scratch / "r90.png")))
    assert (quarter["width"], quarter["height"]) == (200, 900)
    slant = ok(call("image_rotate", path=str(docs_dir / "invoice.png"), angle=45, output_path=str(scratch / "r45.png")))
    assert slant["width"] > 700 and slant["height"] > 700


def test_annotate_draws_the_shapes(call, scratch):
    """A rectangle outline lands where asked, in the colour asked; JSON strings work too."""
    source = scratch / "blank.png"
    Image.new("RGB", (200, 100), "white").save(source)
    notes = [
        {"type": "rectangle", "x": 10, "y": 10, "width": 50, "height": 30, "color": "#00ff00", "line_width": 2},
        {"type": "text", "x": 100, "y": 10, "text": "Hi", "font_size": 20, "color": "blue"},
        {"type": "circle", "cx": 150, "cy": 60, "radius": 20},
        {"type": "arrow", "x1": 10, "y1": 90, "x2": 90, "y2": 90},
    ]
    data = ok(call("image_annotate", path=str(source), annotations=notes))
    assert data["annotations"] == 4
    with Image.open(data["output_path"]) as out:
        assert out.getpixel((10, 25)) == (0, 255, 0)
        assert out.getpixel((35, 25)) == (255, 255, 255)
        assert out.getpixel((50, 90)) == (255, 0, 0)

    again = ok(call("image_annotate", path=str(source), annotations=json.dumps(notes[:1])))
    assert again["output_path"] != data["output_path"]


def test_annotate_refuses_bad_annotations(call, docs_dir):
    """An unknown annotation type or a bad colour is named before anything is drawn."""
    assert "hexagon" in error(call("image_annotate", path=str(docs_dir / "invoice.png"),
                                   annotations=[{"type": "hexagon", "x": 1}]))
    assert "not a color" in error(call("image_annotate", path=str(docs_dir / "invoice.png"),
                                       annotations='[{"type": "circle", "cx": 1, "cy": 1, "radius": 2, "color": "blurple"}]'))


def test_convert_to_jpeg_puts_transparency_on_white(call, scratch):
    """A transparent PNG becomes a JPEG with a white, not black, background."""
    source = scratch / "clear.png"
    Image.new("RGBA", (40, 40), (0, 0, 0, 0)).save(source)
    data = ok(call("image_convert", path=str(source), format="jpeg"))
    assert data["output_path"] == str(scratch / "clear.jpg")
    with Image.open(data["output_path"]) as out:
        assert out.format == "JPEG"
        assert all(channel > 245 for channel in out.getpixel((20, 20)))


def test_frames_are_chosen_and_checked(call, scratch):
    """frame=2 reads the third frame of a GIF; frame=7 is refused with the frame count."""
    gif = _animated_gif(scratch / "spin.gif")
    data = ok(call("image_convert", path=str(gif), format="png", frame=2))
    with Image.open(data["output_path"]) as out:
        assert out.size == (60, 40)
        assert out.convert("RGB").getpixel((30, 20)) == (0, 0, 255)
    assert "3 frame" in error(call("image_convert", path=str(gif), format="png", frame=7), kind="invalid_arguments")


def test_corrupt_image_is_refused(call, scratch):
    """A file that is not an image is reported as such."""
    fake = scratch / "fake.png"
    fake.write_bytes(b"\x89PNG\r\n\x1a\n" + b"junk" * 10)
    message = error(call("read_image", path=str(fake)), kind="failed")
    assert "corrupt" in message or "not an image" in message


def test_truncated_image_is_refused_without_leaking_the_file(call, docs_dir, scratch):
    """A PNG cut short opens but cannot load: refused as truncated, the file handle closed."""
    cut = scratch / "cut.png"
    data = (docs_dir / "invoice.png").read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    assert "truncated" in error(call("image_get_info", path=str(cut)))
