"""Every tool of the documents server keeps the one result contract, over stdio with the real
SDK client: structured content valid against the output schema it lists, on success and on
failure; a one-line summary first, then the whole result as JSON; every image block referenced by one `image_index`.

The walk covers exactly the tools the server lists: a new tool without a case here fails
`test_every_listed_tool_is_walked`.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from capabilities.contract import ERROR_KINDS
from tests.fixtures.contract import image_indices

from . import builders

REPO = Path(__file__).resolve().parents[3]

# One good input per tool, given the root folder holding the documents built below.
GOOD: dict[str, Callable[[Path], dict]] = {
    "read_pdf": lambda root: {"path": str(root / "table.pdf"), "extract_tables": True},
    "ocr_pdf": lambda root: {"path": str(root / "scanned.pdf"), "pages": "1"},
    "ocr_image": lambda root: {"path": str(root / "invoice.png")},
    "read_excel": lambda root: {"path": str(root / "sales.xlsx")},
    "read_word": lambda root: {"path": str(root / "annual.docx")},
    "read_powerpoint": lambda root: {"path": str(root / "kickoff.pptx")},
    "read_image": lambda root: {"path": str(root / "invoice.png")},
    "get_image_metadata": lambda root: {"path": str(root / "invoice.png")},
    "image_get_info": lambda root: {"path": str(root / "invoice.png")},
    "render_document_page": lambda root: {"path": str(root / "report.pdf"), "page": 2, "scale": 0.5},
    "render_document_thumbnail": lambda root: {"path": str(root / "report.pdf"), "max_pages": 2},
    "read_document_pages_as_images": lambda root: {"path": str(root / "report.pdf"), "pages": "1-3",
                                                   "scale": 0.3, "max_pages": 2},
    "convert_document": lambda root: {"path": str(root / "report.pdf"), "to": "png", "page": "1"},
    "get_file_overview": lambda root: {"path": str(root / "sales.xlsx")},
    "image_crop": lambda root: {"path": str(root / "invoice.png"), "left": 0, "top": 0, "right": 100, "bottom": 50},
    "image_resize": lambda root: {"path": str(root / "invoice.png"), "width": 90},
    "image_zoom": lambda root: {"path": str(root / "invoice.png"),
                                "region": {"left": 10, "top": 10, "width": 40, "height": 20}, "zoom_factor": 2},
    "image_rotate": lambda root: {"path": str(root / "invoice.png"), "angle": 90},
    "image_annotate": lambda root: {"path": str(root / "invoice.png"),
                                    "annotations": [{"type": "rectangle", "x": 5, "y": 5, "width": 20, "height": 10}]},
    "image_convert": lambda root: {"path": str(root / "invoice.png"), "format": "webp"},
}
IMAGE_MAGIC = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The only document root: one real file of each kind the good inputs use."""
    return builders.one_of_each(tmp_path_factory.mktemp("documents-contract"))


class _StrayOutput(logging.Handler):
    """Collects the client's complaints about lines on the server's stdout that are not JSON-RPC."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "Failed to parse JSONRPC message" in record.getMessage():
            self.lines.append(str(record.exc_info[1]) if record.exc_info else record.getMessage())


@pytest.fixture(scope="module")
async def session(root):
    """`python -m capabilities.documents` over stdio, its roots the module's folder.

    At the end, nothing but protocol messages may have reached stdout (pymupdf prints there
    unless told not to, and the server flushes it as it exits).
    """
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "capabilities.documents"], cwd=str(REPO),
        env={"CODEDESK_DATA": str(root), "CODEDESK_DOCUMENT_ROOTS": str(root)},
    )
    stray = _StrayOutput()
    logger = logging.getLogger("mcp.client.stdio")
    logger.addHandler(stray)
    try:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            yield client
    finally:
        logger.removeHandler(stray)
    assert stray.lines == [], "the server wrote other things than JSON-RPC to stdout"


@pytest.fixture(scope="module")
async def tools(session) -> dict:
    return {tool.name: tool for tool in (await session.list_tools()).tools}


def _check(tool, result) -> dict:
    """The contract, whatever the outcome; returns the structured content."""
    jsonschema.Draft202012Validator.check_schema(tool.output_schema)
    jsonschema.validate(result.structured_content, tool.output_schema)
    assert result.content and result.content[0].type == "text"
    images = result.content[1:]
    assert all(block.type == "image" for block in images), [block.type for block in result.content]
    assert sorted(image_indices(result.structured_content)) == list(range(len(images)))
    for block in images:
        assert base64.b64decode(block.data).startswith(IMAGE_MAGIC[block.mime_type])
    return result.structured_content


def _error(tool, result, kind: str) -> dict:
    assert result.is_error, result.content[0].text
    problem = _check(tool, result)["error"]
    assert problem["kind"] == kind and problem["kind"] in ERROR_KINDS, problem
    assert result.content[0].text.startswith("Error: " + problem["message"])
    return problem


def _listing(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


@pytest.mark.anyio
async def test_every_listed_tool_is_walked(tools):
    """The walk below must cover every tool the server lists, and only those."""
    assert set(tools) == set(GOOD)


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(GOOD))
async def test_a_good_call_returns_its_output_schema_a_summary_and_the_result_as_text(session, tools, root, name):
    """Scripts read structuredContent by the declared schema; people read a one-line summary;
    a client that reads only text gets the whole result as JSON after it."""
    result = await session.call_tool(name, GOOD[name](root))
    assert not result.is_error, result.content[0].text
    data = _check(tools[name], result)
    assert "error" not in data
    summary, whole = result.content[0].text.split("\n")
    assert summary.startswith(f"{name}: ") and not summary.lstrip().startswith("{")
    assert json.loads(whole) == data, "the text carries the whole result for clients that read only text"
    if name in ("read_image", "render_document_page", "render_document_thumbnail", "read_document_pages_as_images"):
        assert len(result.content) > 1, "a tool that renders must return its images"


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(GOOD))
async def test_an_unknown_field_is_refused_by_name_and_nothing_is_done(session, tools, root, name):
    """A misspelt argument is named with the tool's fields, in the error shape, before anything runs."""
    before = _listing(root)
    result = await session.call_tool(name, {**GOOD[name](root), "bogus_field": 1})
    problem = _error(tools[name], result, "invalid_arguments")
    assert "unknown field 'bogus_field'" in problem["message"] and "path" in problem["message"]
    assert problem["field"] == "bogus_field"
    assert _listing(root) == before


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(GOOD))
async def test_a_missing_file_is_not_found_naming_the_path(session, tools, root, name):
    """A path to nothing is `not_found` on field `path`, with a hint, not a crash or a refusal."""
    missing = root / f"missing-{name}.pdf"
    result = await session.call_tool(name, {**GOOD[name](root), "path": str(missing)})
    problem = _error(tools[name], result, "not_found")
    assert str(missing) in problem["message"] and problem["field"] == "path" and problem["hint"]


@pytest.mark.anyio
async def test_descriptions_say_what_they_return_in_one_line(tools):
    """The output schema carries the detail; the description names the return in one line and
    makes no promise about where images go (in code mode they go to the script)."""
    for tool in tools.values():
        returns = [line for line in tool.description.splitlines() if line.startswith("Returns:")]
        assert len(returns) == 1, tool.name
        assert "vision context" not in tool.description, tool.name
        assert "{" not in returns[0], f"{tool.name} spells out its output in the description"
        for name, prop in tool.input_schema["properties"].items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
