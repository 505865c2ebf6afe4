"""Fixtures of the documents tests: a root folder of real documents, an in-process workspace
over it, and `call`, which runs a tool exactly as the server does (validation, worker thread,
result builder), checks the result against the tool's output schema, and returns the MCP
`CallToolResult`.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import anyio
import pytest

from capabilities.contract import ERROR_KINDS
from tests.fixtures.contract import check_contract as shared_check_contract
from capabilities.documents.libreoffice import OfficeConverter
from capabilities.documents.paths import Roots
from capabilities.documents.server import REGISTRY, call_tool
from capabilities.documents.tooling import Workspace

from . import builders

_counter = itertools.count()


@pytest.fixture(scope="session")
def docs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A document root holding one real file of each kind (shared: tests must not change them)."""
    root = tmp_path_factory.mktemp("documents-root")
    builders.text_pdf(root / "report.pdf", pages=3)
    builders.text_pdf(root / "long.pdf", pages=50)
    builders.table_pdf(root / "table.pdf")
    builders.text_image(root / "invoice.png")
    builders.scanned_pdf(root / "scanned.pdf", root / "invoice.png")
    builders.encrypted_pdf(root / "locked.pdf")
    builders.corrupt_file(root / "broken.pdf")
    builders.workbook(root / "sales.xlsx", root / "invoice.png")
    builders.word_document(root / "annual.docx")
    builders.presentation(root / "kickoff.pptx")
    return root


@pytest.fixture(scope="session")
def office():
    converter = OfficeConverter()
    yield converter
    converter.close()


@pytest.fixture(scope="session")
def workspace(docs_dir: Path, office: OfficeConverter) -> Workspace:
    return Workspace(office=office, fixed_roots=Roots((docs_dir,)))


@pytest.fixture
def scratch(docs_dir: Path) -> Path:
    """A fresh folder inside the root for a test that writes files."""
    folder = docs_dir / f"scratch-{next(_counter)}"
    folder.mkdir()
    return folder


def check_contract(tool: str, result) -> None:
    """The result keeps the one contract (`tests.fixtures.contract.check_contract`)."""
    shared_check_contract(REGISTRY, tool, result)


@pytest.fixture
def call(workspace: Workspace):
    """Call a tool in-process; returns the CallToolResult, its contract checked."""

    def run(tool: str, **arguments):
        result = anyio.run(call_tool, workspace, tool, arguments)
        check_contract(tool, result)
        return result

    return run


def ok(result) -> dict:
    """The structured content of a successful result (fails the test with the error otherwise)."""
    assert not result.is_error, result.content[0].text
    assert "error" not in result.structured_content
    return result.structured_content


def error(result, kind: str | None = None) -> str:
    """The text of an error result, `Error: <message> (<hint>)` (fails the test if the call
    succeeded, or if its error kind is not `kind`)."""
    assert result.is_error, f"expected an error, got {result.content[0].text[:300]}"
    problem = result.structured_content["error"]
    assert problem["kind"] in ERROR_KINDS
    if kind is not None:
        assert problem["kind"] == kind, problem
    text = result.content[0].text
    assert text.startswith("Error: ") and problem["message"] in text
    return text


def copy_into(folder: Path, source: Path) -> Path:
    target = folder / source.name
    shutil.copyfile(source, target)
    return target


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"
