"""The documents server over stdio with the real SDK client, as the runtime reaches it."""

from __future__ import annotations

import base64
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from . import builders

REPO = Path(__file__).resolve().parents[3]
EXPECTED_TOOLS = {
    "read_pdf", "ocr_pdf", "ocr_image", "read_excel", "read_word", "read_powerpoint", "read_image",
    "get_image_metadata", "render_document_page", "render_document_thumbnail",
    "read_document_pages_as_images", "convert_document", "get_file_overview", "image_crop",
    "image_resize", "image_zoom", "image_rotate", "image_annotate", "image_convert", "image_get_info",
}


@asynccontextmanager
async def documents_server(data_dir: Path):
    """`python -m capabilities.documents` with CODEDESK_DATA set and the default roots."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "capabilities.documents"],
        env={"CODEDESK_DATA": str(data_dir)},
        cwd=str(REPO),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("documents-data")
    builders.text_pdf(folder / "report.pdf", pages=3)
    return folder


@pytest.fixture(scope="module")
async def session(data_dir):
    """One server for the module: starting Python with pymupdf and the SDK takes a while."""
    async with documents_server(data_dir) as client:
        yield client


@pytest.mark.anyio
async def test_lists_every_tool_with_strict_schemas(session):
    """All twenty tools are listed; every schema refuses unknown fields and keeps the reference defaults."""
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == EXPECTED_TOOLS
    assert all(tool.input_schema.get("additionalProperties") is False for tool in tools.values())
    read_pdf = tools["read_pdf"].input_schema
    assert read_pdf["required"] == ["path"]
    assert read_pdf["properties"]["pages"]["default"] == "all"
    assert read_pdf["properties"]["extract_tables"]["default"] is False
    assert tools["render_document_page"].input_schema["properties"]["scale"]["default"] == 2.0
    assert tools["read_document_pages_as_images"].input_schema["properties"]["max_pages"]["default"] == 20
    assert "ocr_pdf" in tools["read_pdf"].description
    assert all(tool.output_schema is not None and tool.output_schema["type"] == "object" for tool in tools.values())
    assert tools["image_crop"].annotations.read_only_hint is False
    assert tools["read_pdf"].annotations.read_only_hint is True


@pytest.mark.anyio
async def test_reads_a_pdf_in_the_data_dir_and_renders_a_page(session, data_dir):
    """With no roots configured the data dir is a root: a PDF there is read and rendered."""
    result = await session.call_tool("read_pdf", {"path": str(data_dir / "report.pdf"), "pages": "2"})
    assert not result.is_error
    assert result.structured_content["pages"][0]["text"].strip() == builders.page_text(2)
    assert result.content[0].text.startswith("read_pdf: report.pdf, page 2 of 3, ")

    rendered = await session.call_tool("render_document_page", {"path": str(data_dir / "report.pdf"), "scale": 0.5})
    assert not rendered.is_error
    assert [block.type for block in rendered.content] == ["text", "image"]
    assert rendered.structured_content["image_index"] == 0
    assert rendered.content[1].mime_type == "image/png"
    assert base64.b64decode(rendered.content[1].data)[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.anyio
async def test_refusals_are_results_and_the_server_keeps_serving(session, data_dir):
    """An unknown field and a path outside the roots are error results naming the cause; the next call works."""
    unknown = await session.call_tool("read_pdf", {"path": "report.pdf", "page": "1"})
    assert unknown.is_error and "unknown field 'page'" in unknown.content[0].text
    assert unknown.structured_content["error"]["kind"] == "invalid_arguments"
    outside = await session.call_tool("get_file_overview", {"path": "/etc/hostname"})
    assert outside.is_error and "outside the document roots" in outside.content[0].text
    assert outside.structured_content["error"]["kind"] == "refused"
    missing_tool = await session.call_tool("read_pdff", {"path": "report.pdf"})
    assert missing_tool.is_error and "read_pdf" in missing_tool.content[0].text
    assert missing_tool.structured_content["error"]["kind"] == "unknown_tool"
    again = await session.call_tool("get_file_overview", {"path": str(data_dir / "report.pdf")})
    assert not again.is_error and again.structured_content["page_count"] == 3
