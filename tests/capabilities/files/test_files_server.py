"""The files server over stdio: the round trips an agent makes, and the hostile cases."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from .conftest import desktop_account, give_to_desktop

TEXT = "alpha\nbeta\ngamma\nbeta\ndelta\n"


def test_write_read_edit_patch_round_trip(files_server, folder):
    """The agent's edit loop: each step lands whole, and a refused step changes nothing."""
    target = folder / "notes" / "a.txt"
    written = files_server.ok("write", path=str(target), content=TEXT)
    assert written == {"path": str(target), "bytes": len(TEXT), "created": True}
    assert target.stat().st_uid == desktop_account().pw_uid, "the file belongs to the desktop user"

    page = files_server.ok("read", path=str(target))
    assert page["text"].split("\n")[1] == "     2\tbeta" and page["total_lines"] == 5
    assert "next_offset" not in page

    ambiguous = files_server.refused("edit", path=str(target), old="beta", new="BETA")
    assert ambiguous["kind"] == "invalid_arguments" and "lines 2, 4" in ambiguous["message"]
    assert "count: 2" in ambiguous["hint"]
    assert target.read_text() == TEXT

    edited = files_server.ok("edit", path=str(target), old="beta\ngamma", new="beta\nGAMMA")
    assert edited == {"path": str(target), "replacements": 1, "lines": [2]}
    both = files_server.ok("edit", path=str(target), old="beta", new="BETA", count=2)
    assert both["lines"] == [2, 4]
    assert target.read_text() == "alpha\nBETA\nGAMMA\nBETA\ndelta\n"

    diff = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n alpha\n-BETA\n+beta\n GAMMA\n@@ -4,2 +4,3 @@\n BETA\n delta\n+epsilon\n"
    patched = files_server.ok("patch", path=str(target), diff=diff)
    assert patched == {"path": str(target), "hunks": 2, "added": 2, "removed": 1}
    assert target.read_text() == "alpha\nbeta\nGAMMA\nBETA\ndelta\nepsilon\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.txt"], "no temporary file is left"


def test_a_patch_with_a_hunk_that_does_not_apply_leaves_the_file_untouched(files_server, folder):
    """All hunks or none: a half-applied patch is the worst outcome for the next edit."""
    target = folder / "b.txt"
    files_server.ok("write", path=str(target), content=TEXT)
    before = target.stat()
    diff = "@@ -1,2 +1,2 @@\n-alpha\n+ALPHA\n beta\n@@ -4,2 +4,2 @@\n beta\n-nothing\n+here\n"
    error = files_server.refused("patch", path=str(target), diff=diff)
    assert error["kind"] == "failed" and "Hunk #2 FAILED" in error["message"] and "Nothing was written" in error["message"]
    assert target.read_text() == TEXT and target.stat().st_ino == before.st_ino
    assert sorted(p.name for p in folder.iterdir()) == ["b.txt"]


def test_an_edit_whose_text_is_missing_names_the_lines_that_look_like_it(files_server, folder):
    """A near miss (indentation, case) must point at where the model meant to aim."""
    target = folder / "c.py"
    files_server.ok("write", path=str(target), content="def f():\n    return  1\n")
    error = files_server.refused("edit", path=str(target), old="return 1", new="return 2")
    assert error["kind"] == "not_found" and "line(s) 2" in error["message"]


def test_write_takes_base64_and_keeps_an_existing_files_mode(files_server, folder):
    """Binary content arrives as base64; replacing a script must not drop its execute bit."""
    target = folder / "run.sh"
    files_server.ok("write", path=str(target), content="#!/bin/sh\n")
    os.chmod(target, 0o755)
    again = files_server.ok("write", path=str(target), content="IyEvYmluL3NoCmVjaG8gaGkK", encoding="base64")
    assert again["created"] is False and target.read_bytes() == b"#!/bin/sh\necho hi\n"
    assert target.stat().st_mode & 0o777 == 0o755
    bad = files_server.refused("write", path=str(target), content="not base64!", encoding="base64")
    assert bad["field"] == "content"


def test_search_with_context_on_a_tree_of_ten_thousand_files(files_server, big_tree):
    """ripgrep's speed and semantics, sorted and paged so a page follows the last."""
    first = files_server.ok("search", pattern=r"needle_\d+", root=str(big_tree), context=1, max=50)
    assert first["total"] == 100 and first["files"] == 100 and first["next_offset"] == 50
    hit = first["matches"][0]
    assert hit["path"].startswith(str(big_tree)) and hit["text"].startswith("needle_")
    assert hit["before"] == ["line 2 before"] and hit["after"] == ["line 4 after"]
    second = files_server.ok("search", pattern=r"needle_\d+", root=str(big_tree), context=1, max=50, offset=50)
    assert "next_offset" not in second
    paths = [(m["path"], m["line"]) for m in first["matches"] + second["matches"]]
    assert paths == sorted(paths) and len(set(paths)) == 100
    only = files_server.ok("search", pattern="needle", root=str(big_tree), glob="d00/**")
    assert only["total"] == 1
    bad = files_server.refused("search", pattern="(unclosed", root=str(big_tree))
    assert bad["kind"] == "invalid_arguments" and "regex" in bad["message"]


@pytest.fixture(scope="module")
def big_tree(files_base: Path) -> Path:
    """10,000 small files in 100 folders; every 100th holds a needle on its third line."""
    root = files_base / "tree"
    for d in range(100):
        folder = root / f"d{d:02d}"
        folder.mkdir(parents=True)
        for f in range(100):
            n = d * 100 + f
            body = f"line 1\nline 2 before\n{'needle_%d' % n if f == 7 else 'hay'}\nline 4 after\n"
            (folder / f"f{f:03d}.txt").write_text(body)
    give_to_desktop(root)
    return root


def test_list_and_glob_show_the_tree_with_sizes(files_server, folder):
    """The model sees what is there, how big, and pages through a long listing."""
    (folder / "src" / "pkg").mkdir(parents=True)
    (folder / "src" / "pkg" / "m.py").write_text("x = 1\n")
    (folder / "README").write_text("hello")
    (folder / "link").symlink_to("README")
    give_to_desktop(folder)
    listed = files_server.ok("list", path=str(folder), depth=3)
    entries = {e["path"]: e for e in listed["entries"]}
    assert entries["README"] == {"path": "README", "type": "file", "size": 5}
    assert entries["src"]["type"] == "folder" and entries["src"]["entries"] == 1
    assert entries["src/pkg/m.py"]["size"] == 6
    assert entries["link"] == {"path": "link", "type": "symlink", "link_target": "README"}
    assert listed["total"] == 5 and listed["total_size"] == 11
    shallow = files_server.ok("list", path=str(folder))
    assert [e["path"] for e in shallow["entries"]] == ["README", "link", "src"]
    found = files_server.ok("glob", pattern="**/*.py", root=str(folder))
    assert found["paths"] == [str(folder / "src" / "pkg" / "m.py")]


def test_listing_a_big_folder_pages_with_next_offset(files_server, big_tree):
    """A listing too long for one answer says where the next page starts."""
    first = files_server.ok("list", path=str(big_tree), depth=2)
    assert first["total"] == 10_100 and len(first["entries"]) == 1000 and first["next_offset"] == 1000
    last = files_server.ok("list", path=str(big_tree), depth=2, offset=10_000)
    assert len(last["entries"]) == 100 and "next_offset" not in last


def test_move_copy_delete_and_restore(files_server, folder, files_base):
    """Nothing is lost: a delete goes to the desktop's trash and comes back from it."""
    source = folder / "doc.txt"
    files_server.ok("write", path=str(source), content="keep me")
    moved = files_server.ok("move", source=str(source), destination=str(folder / "sub" / "doc2.txt"))
    assert moved["type"] == "file" and not source.exists()
    files_server.ok("copy", source=str(folder / "sub"), destination=str(folder / "sub-copy"))
    assert (folder / "sub-copy" / "doc2.txt").read_text() == "keep me"
    taken = files_server.refused("move", source=str(folder / "sub-copy" / "doc2.txt"),
                                 destination=str(folder / "sub" / "doc2.txt"))
    assert taken["kind"] == "refused" and "overwrite" in taken["hint"]

    deleted = files_server.ok("delete", path=str(folder / "sub" / "doc2.txt"))
    trash = files_base / "share" / "Trash"
    assert not (folder / "sub" / "doc2.txt").exists()
    assert (trash / "files" / deleted["trash_id"]).read_text() == "keep me"
    info = (trash / "info" / f"{deleted['trash_id']}.trashinfo").read_text()
    assert info.startswith("[Trash Info]\nPath=") and "doc2.txt" in info
    restored = files_server.ok("restore", trash_id=deleted["trash_id"])
    assert restored["path"] == str(folder / "sub" / "doc2.txt")
    assert (folder / "sub" / "doc2.txt").read_text() == "keep me"

    gone = files_server.ok("delete", path=str(folder / "sub-copy"))
    assert gone["type"] == "folder"
    files_server.ok("restore", path=str(folder / "sub-copy"))
    assert (folder / "sub-copy" / "doc2.txt").read_text() == "keep me"
    both = files_server.refused("restore", trash_id="x", path="y")
    assert both["kind"] == "invalid_arguments"


def test_paths_the_desktop_user_cannot_reach_are_refused(files_server, folder):
    """The desktop user's permissions are the only boundary, even for a server started as root."""
    for tool, args in (("read", {"path": "/etc/shadow"}), ("list", {"path": "/root"}),
                       ("write", {"path": "/etc/codedesk-files-test", "content": "x"}),
                       ("read", {"path": str(folder / ".." / ".." / ".." / "etc" / "shadow")}),
                       ("delete", {"path": "/etc/hostname"})):
        error = files_server.refused(tool, **args)
        assert error["kind"] == "refused" and "permission denied" in error["message"], (tool, error)
    assert not Path("/etc/codedesk-files-test").exists() and Path("/etc/hostname").exists()


def test_symlinks_lead_nowhere_the_desktop_user_cannot_go(files_server, folder):
    """A link planted in the user's folder to a root-only file is read (or written) as that user."""
    (folder / "shadow").symlink_to("/etc/shadow")
    (folder / "rootdir").symlink_to("/root")
    (folder / "passwd").symlink_to("/etc/passwd")
    give_to_desktop(folder)
    assert files_server.refused("read", path=str(folder / "shadow"))["kind"] == "refused"
    assert files_server.refused("write", path=str(folder / "passwd"), content="x")["kind"] == "refused"
    assert files_server.refused("list", path=str(folder / "rootdir"))["kind"] == "refused"
    unseen = files_server.ok("search", pattern="root", root=str(folder))
    assert unseen["total"] == 0  # ripgrep follows no symlink, as its semantics say
    assert Path("/etc/passwd").read_text().startswith("root:")
    # deleting the link trashes the link, never its target
    files_server.ok("delete", path=str(folder / "passwd"))
    assert Path("/etc/passwd").exists()


def test_a_binary_file_is_refused_with_its_type_and_size(files_server, folder):
    """Dumping an executable as text wastes the model's context: say what it is instead."""
    shutil_copy = folder / "ls-copy"
    shutil_copy.write_bytes(Path("/bin/ls").read_bytes())
    give_to_desktop(folder)
    error = files_server.refused("read", path=str(shutil_copy))
    assert error["kind"] == "refused" and "binary" in error["message"] and "ELF" in error["message"]
    assert "KiB" in error["message"]


def test_a_fifty_megabyte_file_is_read_in_pages(files_server, folder):
    """A huge log must come a page at a time, each page saying where the next starts."""
    target = folder / "big.log"
    line = "x" * 99 + "\n"
    with open(target, "w") as f:
        for _ in range(50):
            f.write(line * 10_000)
    give_to_desktop(folder)
    assert target.stat().st_size == 50_000_000
    first = files_server.ok("read", path=str(target))
    assert first["lines"] == 2000 and first["next_offset"] == 2001 and first["total_lines"] == 500_000
    assert len(first["text"]) < 300_000
    started = time.monotonic()
    far = files_server.ok("read", path=str(target), offset=499_000, limit=5000)
    assert far["start_line"] == 499_000 and far["text"].startswith("499000\t")
    assert far["lines"] <= 1001 and time.monotonic() - started < 30
    past = files_server.refused("read", path=str(target), offset=600_000)
    assert past["field"] == "offset" and "500000 lines" in past["message"]


def test_unknown_fields_are_refused_by_name_and_nothing_is_done(files_server, folder):
    """A misspelt field must be named with the fields that exist, before anything is written."""
    error = files_server.refused("write", path=str(folder / "x"), content="x", mode="0777")
    assert error["kind"] == "invalid_arguments" and "unknown field 'mode'" in error["message"]
    assert "path, content, encoding" in error["message"]
    assert not (folder / "x").exists()


def test_tilde_and_relative_paths_are_the_desktop_users_home(files_server):
    """'~' means the desktop user's home, not the server's (root's) one."""
    home = desktop_account().pw_dir
    stat = files_server.ok("stat", path="~")
    assert stat["path"] == home and stat["type"] == "folder" and stat["owner"] == "desktop"
    assert files_server.ok("stat", path=".")["path"] == home
