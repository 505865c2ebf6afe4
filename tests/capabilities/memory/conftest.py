"""Fixtures of the memory tests: a fresh store and skills folder per test, and `call`, which
runs a tool in-process exactly as the server does and checks its result's contract."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from capabilities.memory.server import REGISTRY, call_tool, open_state
from tests.fixtures.contract import check_contract, error, ok  # noqa: F401 - the tests import them from here


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "skills"
    folder.mkdir()
    return folder


@pytest.fixture
def state(tmp_path: Path, skills_dir: Path):
    opened = open_state(tmp_path / "memory", [skills_dir])
    yield opened
    opened.close()


def calling(state):
    def run(tool: str, **arguments):
        result = anyio.run(call_tool, state, tool, arguments)
        check_contract(REGISTRY, tool, result)
        return result

    return run


@pytest.fixture
def call(state):
    return calling(state)


def write_skill(root: Path, folder: str, front: str, body: str = "Do the thing.\n") -> Path:
    skill = root / folder
    skill.mkdir()
    (skill / "SKILL.md").write_text(f"---\n{front}\n---\n{body}")
    return skill
