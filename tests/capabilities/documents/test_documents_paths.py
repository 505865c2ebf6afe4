"""Where files may be: the document roots, and every way out of them refused."""

from __future__ import annotations

import os

import pytest

from capabilities.documents.paths import ROOTS_ENV, Roots
from capabilities.session import SessionInfo, write_session

from .conftest import error, ok


def test_a_file_outside_the_roots_is_refused(call, tmp_path):
    """A real file elsewhere on the machine is not readable."""
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("private")
    message = error(call("get_file_overview", path=str(outside)), kind="refused")
    assert "outside the document roots" in message and ROOTS_ENV in message


def test_dot_dot_is_refused_even_when_it_lands_inside(call, docs_dir, scratch):
    """'..' is refused outright, so no path games are possible."""
    message = error(call("read_pdf", path=f"{scratch}/../report.pdf"), kind="refused")
    assert "'..'" in message


def test_a_symlink_leading_out_is_refused(call, scratch, tmp_path):
    """A link inside the root to a file, or a folder, outside it is refused as an escape."""
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    (scratch / "link.txt").symlink_to(secret)
    (scratch / "door").symlink_to(tmp_path, target_is_directory=True)
    assert "symlink" in error(call("get_file_overview", path=str(scratch / "link.txt")), kind="refused")
    assert "symlink" in error(call("get_file_overview", path=str(scratch / "door" / "secret.txt")))


def test_a_symlink_inside_the_roots_is_followed(call, docs_dir, scratch):
    """Links that stay inside the roots are fine."""
    (scratch / "alias.pdf").symlink_to(docs_dir / "report.pdf")
    assert ok(call("read_pdf", path=str(scratch / "alias.pdf"), pages="1"))["page_count"] == 3


def test_an_output_outside_the_roots_is_refused_and_nothing_written(call, docs_dir, tmp_path, scratch):
    """An output path outside the roots, directly or through a linked folder, writes nothing."""
    target = tmp_path / "out.png"
    outside = call("image_resize", path=str(docs_dir / "invoice.png"), width=10, output_path=str(target))
    assert "outside" in error(outside, kind="refused")
    assert outside.structured_content["error"]["field"] == "output_path"
    (scratch / "door").symlink_to(tmp_path, target_is_directory=True)
    assert "symlink" in error(call("image_resize", path=str(docs_dir / "invoice.png"), width=10,
                                   output_path=str(scratch / "door" / "out.png")))
    assert list(tmp_path.iterdir()) == []


def test_a_missing_file_is_named(call, docs_dir):
    """A path that does not exist is `not_found` and says so, rather than 'outside'."""
    assert "no such file" in error(call("read_word", path=str(docs_dir / "nope.docx")), kind="not_found")


def test_roots_from_the_environment_variable(monkeypatch, tmp_path):
    """CODEDESK_DOCUMENT_ROOTS lists the roots, separated by os.pathsep."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    monkeypatch.setenv(ROOTS_ENV, f"{first}{os.pathsep}{second}")
    assert Roots.from_environment().dirs == (first.resolve(), second.resolve())


def test_default_roots_are_the_session_home_and_data_dir(monkeypatch, tmp_path):
    """Without the variable, the roots are the session's desktop home and its data directory; ~ is that home."""
    data, home = tmp_path / "data", tmp_path / "home"
    data.mkdir()
    home.mkdir()
    monkeypatch.delenv(ROOTS_ENV, raising=False)
    monkeypatch.setenv("CODEDESK_DATA", str(data))
    write_session(SessionInfo(
        data_dir=data, display=":99", env={}, devtools_url="http://127.0.0.1:1", chromium_command=[],
        user="desktop", uid=os.getuid(), gid=os.getgid(), home=home,
    ))
    assert Roots.from_environment().dirs == (home.resolve(), data.resolve())
    (home / "letter.txt").write_text("hi")
    assert Roots.from_environment().input_file("~/letter.txt") == (home / "letter.txt").resolve()


def test_without_a_session_the_data_dir_is_still_a_root(monkeypatch, tmp_path):
    """The server works without a desktop session: the data directory stays reachable."""
    monkeypatch.delenv(ROOTS_ENV, raising=False)
    monkeypatch.setenv("CODEDESK_DATA", str(tmp_path))
    roots = Roots.from_environment()
    assert tmp_path.resolve() in roots.dirs
    (tmp_path / "note.txt").write_text("hi")
    assert roots.input_file(str(tmp_path / "note.txt")) == (tmp_path / "note.txt").resolve()


def test_relative_paths_start_at_the_first_root(tmp_path):
    """A relative path is read from the first root (the desktop home by default)."""
    (tmp_path / "doc.txt").write_text("x")
    assert Roots((tmp_path.resolve(),)).input_file("doc.txt") == (tmp_path / "doc.txt").resolve()


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root server hands files to another user")
def test_outputs_in_a_users_folder_belong_to_that_user(call, docs_dir, scratch):
    """A root server writing into the desktop user's folder leaves files that user owns."""
    folder = scratch / "home-like"
    folder.mkdir()
    os.chown(folder, 4321, 4321)
    data = ok(call("image_resize", path=str(docs_dir / "invoice.png"), width=30, output_path=str(folder / "small.png")))
    written = os.stat(data["output_path"])
    assert (written.st_uid, written.st_gid) == (4321, 4321)
