"""The skills family: `skills_list` and `skills_read`.

The installed skills' names and one-line descriptions are also written into `skills_list`'s
own description (`listing_description`), which the runtime puts in run_js's description; the
server tells its clients when they change (`server.py`).
"""

from __future__ import annotations

from pydantic import Field

from capabilities.contract import OutputModel

from .skills import SKILL_FILE, Skill, installed, read_file, read_skill
from .tooling import Args, MemoryState, memory_tool

LISTED_IN_DESCRIPTION = 30
DESCRIPTION_CHARS = 160

BASE_DESCRIPTION = "The session's skills (instructions and scripts for a task): read one with skills_read before its task."


def listing_description(skills: list[Skill]) -> str:
    """skills_list's description, naming the installed skills (its first paragraph is what
    run_js's description shows)."""
    skills = [s for s in skills if not s.problem]
    if not skills:
        return BASE_DESCRIPTION + " None is installed now."
    shown = [f"- {s.name}: {_one_line(s.description)}" for s in skills[:LISTED_IN_DESCRIPTION]]
    more = [f"- ... and {len(skills) - LISTED_IN_DESCRIPTION} more"] if len(skills) > LISTED_IN_DESCRIPTION else []
    return BASE_DESCRIPTION + " Installed now:\n" + "\n".join([*shown, *more])


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= DESCRIPTION_CHARS else text[: DESCRIPTION_CHARS - 1].rstrip() + "…"


class SkillSummary(OutputModel):
    name: str
    description: str
    folder: str = Field(description="Where the skill lives (its scripts run from there with exec).")
    problem: str | None = Field(None, description=f"Why its {SKILL_FILE} could not be read, when it could not.")


class ListSkillsArgs(Args):
    pass


class ListSkillsOutput(OutputModel):
    skills: list[SkillSummary]
    roots: list[str] = Field(description="The folders searched for skills, in order.")


def skills_list(state: MemoryState, args: ListSkillsArgs) -> tuple[ListSkillsOutput, str]:
    skills = installed(state.roots)
    listed = [SkillSummary(name=s.name, description=s.description, folder=str(s.folder), problem=s.problem)
              for s in skills]
    return (ListSkillsOutput(skills=listed, roots=[str(root) for root in state.roots]),
            f"{len(listed)} skills: {', '.join(s.name for s in listed) or 'none'}")


class ReadSkillArgs(Args):
    name: str = Field(min_length=1, max_length=64, description="The skill's name (skills_list lists them).")
    file: str | None = Field(None, min_length=1, max_length=500, description=(
        f"A file of the skill's folder to read instead of its {SKILL_FILE} (a path relative to the folder)."))


class SkillFileOutput(OutputModel):
    path: str
    bytes: int | None = None
    refused: str | None = Field(None, description="Why the file is not read (a symbolic link), when it is not.")


class ReadSkillOutput(OutputModel):
    name: str
    description: str
    folder: str
    content: str = Field(description=f"The instructions ({SKILL_FILE} without its front matter), or the file asked for.")
    file: str = Field(description=f"What content holds: {SKILL_FILE} or the file asked for.")
    files: list[SkillFileOutput] = Field(description="The files of the skill's folder.")


def skills_read(state: MemoryState, args: ReadSkillArgs) -> tuple[ReadSkillOutput, str]:
    skill = read_skill(state.roots, args.name)
    content = read_file(skill, args.file) if args.file else skill.body
    files = [SkillFileOutput(path=f.path, bytes=f.bytes, refused=f.refused) for f in skill.files]
    return (ReadSkillOutput(name=skill.name, description=skill.description, folder=str(skill.folder), content=content,
                            file=args.file or SKILL_FILE, files=files),
            f"skill {skill.name!r}: {args.file or SKILL_FILE}, {len(content):,} characters, {len(files)} files")


TOOLS = [
    memory_tool(name="skills_list", description=BASE_DESCRIPTION, args=ListSkillsArgs, output=ListSkillsOutput,
                run=skills_list),
    memory_tool(name="skills_read", description=(
        f"A skill's instructions ({SKILL_FILE}) and its files' list, or one of its files.\n\n"
        "file: a path inside the skill's folder. Symbolic links are never followed."),
        args=ReadSkillArgs, output=ReadSkillOutput, run=skills_read),
]
