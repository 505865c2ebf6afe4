"""The documents tools from scripts: `run_js` in the real runtime, which starts the documents server."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.fixtures.runtime import runtime_env, start_runtime
from tests.fixtures.session import make_data_dir

from . import builders


@pytest.fixture(scope="module")
def documents_runtime():
    """A runtime whose data dir holds a 50-page PDF (the documents server's default root).

    A runtime running as root starts the server as the desktop user: the data dir is one that
    user can read, not pytest's private temporary folder.
    """
    data = make_data_dir("codedesk-documents-")
    try:
        builders.text_pdf(data / "long.pdf", pages=50)
        (data / "long.pdf").chmod(0o644)
        env = runtime_env(data)
        env.pop("CODEDESK_DOCUMENT_ROOTS", None)
        with start_runtime(env) as client:
            yield client, data
    finally:
        shutil.rmtree(data, ignore_errors=True)


def test_run_js_returns_only_the_pages_containing_a_word(documents_runtime):
    """Code mode: the script reads 50 pages and the model sees just the matching page numbers."""
    runtime, data = documents_runtime
    code = f"""
const result = await mcp.callTool("documents", "read_pdf", {{path: {json.dumps(str(data / "long.pdf"))}}});
result.structuredContent.pages.filter(p => p.text.includes("{builders.NEEDLE}")).map(p => p.page)
"""
    outcome = runtime.run_js(code, timeout_seconds=60)
    assert not outcome.is_error, outcome.text
    assert json.loads(outcome.text) == builders.NEEDLE_PAGES
    assert "This is page" not in outcome.text


def test_run_js_gets_refusals_as_results_and_images_as_artifacts(documents_runtime):
    """A refused path comes back as isError with its error kind (not a throw); a rendered page,
    found by its image_index, can be shown with artifact()."""
    runtime, data = documents_runtime
    code = f"""
const refused = await mcp.callTool("documents", "read_pdf", {{path: "/etc/hostname"}});
const page = await mcp.callTool("documents", "render_document_page",
                                {{path: {json.dumps(str(data / "long.pdf"))}, page: 2, scale: 0.5}});
const images = page.content.filter(b => b.type === "image");
artifact(images[page.structuredContent.image_index]);
({{refused: refused.isError, error: refused.structuredContent.error, size: page.structuredContent.width}})
"""
    outcome = runtime.run_js(code, timeout_seconds=60)
    assert not outcome.is_error, outcome.text
    answer = json.loads(outcome.text)
    assert answer["refused"] is True and answer["error"]["kind"] == "refused"
    assert "outside the document roots" in answer["error"]["message"]
    assert answer["size"] == 306
    assert len(outcome.images) == 1 and outcome.images[0].mime_type == "image/png"


def test_documents_server_is_in_the_default_runtime(runtime):
    """The shared runtime fixture lists the documents server and its tools."""
    outcome = runtime.run_js(
        'const t = await mcp.listTools("documents"); JSON.stringify(t)', timeout_seconds=60
    )
    assert not outcome.is_error, outcome.text
    assert "read_pdf" in outcome.text and "convert_document" in outcome.text
