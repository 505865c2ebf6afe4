"""Skills: folders with a SKILL.md, listed, read, and named in skills_list's description;
links never followed."""

from __future__ import annotations

import os

from capabilities.memory.server import list_tools

from .conftest import error, ok, write_skill


def test_a_skill_dropped_in_the_folder_is_listed_and_read(call, skills_dir):
    assert ok(call("skills_list"))["skills"] == []
    skill = write_skill(skills_dir, "pdf-forms", "name: pdf-forms\ndescription: Fill PDF forms with pypdf.",
                        "# PDF forms\nRun scripts/fill.py with the form's path.\n")
    (skill / "scripts").mkdir()
    (skill / "scripts" / "fill.py").write_text("print('filled')\n")
    listed = ok(call("skills_list"))["skills"]
    assert [(s["name"], s["description"]) for s in listed] == [("pdf-forms", "Fill PDF forms with pypdf.")]
    read = ok(call("skills_read", name="pdf-forms"))
    assert read["content"].startswith("# PDF forms") and "description:" not in read["content"]
    assert {f["path"] for f in read["files"]} == {"SKILL.md", "scripts/fill.py"}
    assert ok(call("skills_read", name="pdf-forms", file="scripts/fill.py"))["content"] == "print('filled')\n"


def test_installed_skills_are_named_in_the_tool_description(state, skills_dir):
    """What run_js's description shows: each skill's name and one-line description."""
    write_skill(skills_dir, "weekly-report", "name: weekly-report\ndescription: >\n  Build the weekly\n  report.")
    description = next(t.description for t in list_tools(state) if t.name == "skills_list")
    assert "- weekly-report: Build the weekly report." in description.split("\n\n")[0]


def test_symlink_to_shadow_is_never_read(call, skills_dir):
    """A skill folder cannot make the server read another file: links are listed as refused."""
    skill = write_skill(skills_dir, "sneaky", "name: sneaky\ndescription: Looks harmless.")
    os.symlink("/etc/shadow", skill / "notes.txt")
    os.symlink("/etc", skill / "etc")
    read = ok(call("skills_read", name="sneaky"))
    refused = {f["path"]: f.get("refused") for f in read["files"]}
    assert "symbolic link" in refused["notes.txt"] and "symbolic link" in refused["etc"]
    assert "symbolic link" in error(call("skills_read", name="sneaky", file="notes.txt"), "refused")
    assert "symbolic link" in error(call("skills_read", name="sneaky", file="etc/shadow"), "refused")
    assert error(call("skills_read", name="sneaky", file="../../../etc/shadow"), "refused")
    evil = skills_dir / "evil"
    evil.mkdir()
    os.symlink("/etc/shadow", evil / "SKILL.md")
    listed = {s["name"]: s for s in ok(call("skills_list"))["skills"]}
    assert "symbolic link" in listed["evil"]["problem"]
    assert "root:" not in error(call("skills_read", name="evil"), "refused")


def test_a_linked_skill_folder_is_not_followed(call, skills_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    write_skill(tmp_path, "elsewhere", "name: linked\ndescription: from elsewhere")
    os.symlink(elsewhere, skills_dir / "linked")
    assert ok(call("skills_list"))["skills"] == []


def test_unknown_skill_names_the_installed_ones(call, skills_dir):
    write_skill(skills_dir, "one", "name: one\ndescription: The first.")
    assert "installed: one" in error(call("skills_read", name="two"), "not_found")
