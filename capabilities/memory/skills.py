"""Skills: folders holding a `SKILL.md` (YAML front matter with `name` and `description`, then
the instructions) and any scripts or files the instructions use.

They are looked for in `<data>/skills/` (the desktop user's: a script can add one with exec),
then in each folder of `$CODEDESK_SKILLS_PATH` (separated by `:`); the first skill of a name
wins. A skill's files are read only when they are regular files inside its folder: a symbolic
link (to /etc/shadow, or to another skill) is listed as refused and never opened, and a file
past `MAX_FILE_BYTES` is refused, so a skill folder cannot make this server read something
else or hang on a FIFO.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from capabilities.session import data_dir

from .errors import NotFound, Refused, TooLarge

SKILL_FILE = "SKILL.md"
SKILLS_PATH_ENV = "CODEDESK_SKILLS_PATH"
MAX_FILE_BYTES = 1024 * 1024
MAX_FILES_LISTED = 200
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, kw_only=True)
class SkillFile:
    path: str
    bytes: int | None = None
    refused: str | None = None


@dataclass(frozen=True, kw_only=True)
class Skill:
    name: str
    description: str
    folder: Path
    body: str = ""
    files: list[SkillFile] = field(default_factory=list)
    problem: str | None = None


def skill_roots() -> list[Path]:
    """Where skills are looked for, in order."""
    extra = [Path(p).expanduser() for p in os.environ.get(SKILLS_PATH_ENV, "").split(os.pathsep) if p.strip()]
    return [data_dir() / "skills", *extra]


def signature(roots: list[Path]) -> tuple:
    """What changes when a skill is added, removed or edited (cheap: stats only)."""
    seen = []
    for root, entry in _candidates(roots):
        try:
            st = os.stat(os.path.join(entry.path, SKILL_FILE), follow_symlinks=False)
        except OSError:
            continue
        seen.append((str(root), entry.name, st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(seen)


def installed(roots: list[Path]) -> list[Skill]:
    """Every skill found (name, one-line description, folder), first of each name, by name."""
    found: dict[str, Skill] = {}
    for _, entry in _candidates(roots):
        skill = _load(Path(entry.path), with_files=False)
        if skill is not None and skill.name not in found:
            found[skill.name] = skill
    return sorted(found.values(), key=lambda s: s.name)


def read_skill(roots: list[Path], name: str) -> Skill:
    """The skill `name` whole: its instructions and the list of its files."""
    for _, entry in _candidates(roots):
        skill = _load(Path(entry.path), with_files=False)
        if skill is not None and skill.name == name:
            if skill.problem:
                raise Refused(f"the skill {name!r} cannot be read: {skill.problem}", field="name")
            return _load(Path(entry.path), with_files=True) or skill
    names = ", ".join(s.name for s in installed(roots)) or "none"
    raise NotFound(f"no skill is named {name!r} (installed: {names})", field="name",
                   hint=f"a skill is a folder with a {SKILL_FILE} under {roots[0]}")


def read_file(skill: Skill, relative: str) -> str:
    """A file of a skill's folder, as text: a regular file inside the folder, never a link."""
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or ".." in parts:
        raise Refused(f"{relative!r} is not a path inside the skill's folder", field="file")
    folder = os.path.realpath(skill.folder)
    path = os.path.join(folder, *parts)
    current = folder
    for part in parts[:-1]:  # no component may be a link: the file must be in the folder itself
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise Refused(f"{relative!r} goes through a symbolic link; skill files are read only inside "
                          "the skill's folder", field="file")
    return _read_text(path, relative)


def _candidates(roots: list[Path]) -> Iterator[tuple[Path, os.DirEntry]]:
    for root in roots:
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            # A skill is a real folder: a link to a folder elsewhere is not followed.
            if entry.is_dir(follow_symlinks=False):
                yield root, entry


def _load(folder: Path, *, with_files: bool) -> Skill | None:
    try:
        text = _read_text(str(folder / SKILL_FILE), SKILL_FILE)
    except NotFound:
        return None
    except (Refused, TooLarge) as exc:
        return Skill(name=folder.name, description="", folder=folder, problem=exc.message) if NAME.match(
            folder.name) else None
    meta, body = _front_matter(text)
    name = str(meta.get("name") or folder.name).strip()
    if not NAME.match(name):
        name = folder.name
        if not NAME.match(name):
            return None
    description = " ".join(str(meta.get("description") or _first_line(body)).split())
    files = _files(folder) if with_files else []
    return Skill(name=name, description=description, folder=folder, body=body, files=files)


def _front_matter(text: str) -> tuple[dict, str]:
    if not text.startswith("---"):
        return {}, text
    lines = text.splitlines(keepends=True)
    for index in range(1, len(lines)):
        if lines[index].rstrip() == "---":
            try:
                meta = yaml.safe_load("".join(lines[1:index])) or {}
            except yaml.YAMLError:
                meta = {}
            return (meta if isinstance(meta, dict) else {}), "".join(lines[index + 1:]).lstrip("\n")
    return {}, text


def _first_line(body: str) -> str:
    return next((line.strip("# ").strip() for line in body.splitlines() if line.strip()), "")


def _files(folder: Path) -> list[SkillFile]:
    listed: list[SkillFile] = []
    for root, dirs, files in os.walk(folder):  # does not descend into linked folders
        for name in sorted(dirs):
            if os.path.islink(os.path.join(root, name)):
                listed.append(SkillFile(path=_relative(folder, root, name), refused="a symbolic link: not followed"))
        for name in sorted(files):
            path = os.path.join(root, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                listed.append(SkillFile(path=_relative(folder, root, name), refused="a symbolic link: not read"))
            elif stat.S_ISREG(st.st_mode):
                listed.append(SkillFile(path=_relative(folder, root, name), bytes=st.st_size))
            if len(listed) >= MAX_FILES_LISTED:
                return listed
        dirs.sort()
    return listed


def _relative(folder: Path, root: str, name: str) -> str:
    return os.path.relpath(os.path.join(root, name), folder)


def _read_text(path: str, shown: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotFound(f"{shown} is not there", field="file") from None
    except OSError as exc:
        if os.path.islink(path):
            raise Refused(f"{shown} is a symbolic link; skill files are read only when they are regular files "
                          "inside the skill's folder", field="file") from exc
        raise Refused(f"{shown} cannot be read ({exc.strerror})", field="file") from exc
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{shown} is not a regular file", field="file")
        if st.st_size > MAX_FILE_BYTES:
            raise TooLarge(f"{shown} is {st.st_size:,} bytes, past the {MAX_FILE_BYTES:,}-byte cap for skill files",
                           field="file", hint="read it with exec or documents instead")
        data = f.read(MAX_FILE_BYTES + 1)
    if b"\x00" in data[:8192]:
        raise Refused(f"{shown} is a binary file ({len(data):,} bytes); run it with exec", field="file")
    return data.decode("utf-8", errors="replace")
