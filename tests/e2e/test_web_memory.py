"""The web and memory servers from scripts: run_js in the real runtime over the real desktop
session, which starts both as the desktop user."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from tests.fixtures.runtime import start_runtime

pytestmark = pytest.mark.desktop


def test_run_js_fetches_a_page_and_returns_only_what_matters(desktop_runtime, pages_server):
    """Code mode: the page is read as markdown in the script; the model sees one table row."""
    code = f"""
const page = await tools.web.fetch({{url: {json.dumps(pages_server.url("/web_article.html"))}}});
const rendered = await tools.web.fetch_rendered({{url: {json.dumps(pages_server.url("/web_article.html"))}}});
({{title: page.title, row: page.content.split("\\n").find(l => l.includes("Apples")),
   scripted: rendered.content.includes("7 plums"), plain: page.content.includes("7 plums")}})
"""
    outcome = desktop_runtime.run_js(code, timeout_seconds=60)
    assert not outcome.is_error, outcome.text
    assert json.loads(outcome.text) == {"title": "Fruit report", "row": "| Apples | 42     |",
                                        "scripted": True, "plain": False}


def test_run_js_gets_a_refused_redirect_as_a_tool_error(desktop_runtime, pages_server):
    url = pages_server.url("/redirect?to=http://169.254.169.254/latest/meta-data/")
    outcome = desktop_runtime.run_js(f"""
try {{ await tools.web.fetch({{url: {json.dumps(url)}}}); "fetched" }}
catch (e) {{ `${{e.kind}}: ${{e.message}}` }}""", timeout_seconds=30)
    assert outcome.text.startswith("refused: ") and "169.254.169.254" in outcome.text


def test_what_one_run_remembers_another_recalls_after_the_runtime_restarts(desktop_session):
    """Memory lives on the session's disk: a new runtime (new memory server) recalls it."""
    with start_runtime(dict(desktop_session.env)) as first:
        outcome = first.run_js("""
await tools.memory.remember({key: "e2e-word", text: "The launch code word is heliotrope", tags: ["e2e"]});
await tools.memory.remember({key: "e2e-other", text: "The canteen opens at noon", tags: ["e2e"]});
"kept" """, timeout_seconds=30)
        assert outcome.text == "kept", outcome.text
    with start_runtime(dict(desktop_session.env)) as second:
        outcome = second.run_js("""
const found = await tools.memory.recall({query: "what is the launch code word", tags: ["e2e"]});
found.results.map(r => r.key)""", timeout_seconds=30)
        assert json.loads(outcome.text)[0] == "e2e-word", outcome.text


def test_a_skill_dropped_in_the_folder_appears_in_the_run_js_description(desktop_runtime, desktop_session):
    """The runtime's description follows the skills folder: the memory server announces the change."""
    folder = desktop_session.data_dir / "skills" / "invoice-check"
    try:
        desktop_runtime.run_js("await tools.memory.skills_list({})", timeout_seconds=30)  # the server is up
        folder.mkdir()
        (folder / "SKILL.md").write_text("---\nname: invoice-check\ndescription: Check an invoice's totals.\n---\n"
                                         "Add the lines; compare with the total.\n")
        os.chmod(folder, 0o755)
        deadline = time.monotonic() + 15
        while True:
            description = next(t.description for t in desktop_runtime.list_tools() if t.name == "run_js")
            if "invoice-check: Check an invoice's totals." in description:
                break
            assert time.monotonic() < deadline, "the skill never appeared in run_js's description"
            time.sleep(0.5)
        outcome = desktop_runtime.run_js(
            '(await tools.memory.skills_read({name: "invoice-check"})).content', timeout_seconds=30)
        assert outcome.text == "Add the lines; compare with the total.\n"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
