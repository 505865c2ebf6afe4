"""The declarations the model reads: complete, type-correct, within budget, and true.

Against the real runtime and session: every operation and field of every built-in tool appears in
the generated declarations with its result type; the `tools/list` answer stays under its budget;
the declarations type-check with `tsc`, and so do the example scripts in `examples/`, which then
run against the real session.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runtime.declarations import GUEST_TS_PRELUDE, success_schema, typescript_server, typescript_tool
from runtime.descriptions import DOC_CHARS

pytestmark = pytest.mark.desktop

EXAMPLES = Path(__file__).parent / "examples"
BUILTIN = ("browser", "exec", "documents")
TOOLS_LIST_BUDGET = 40 * 1024
DECLARATIONS_HEADING = "Declarations of the servers' tools:\n"


@pytest.fixture(scope="module")
def listing(desktop_runtime) -> dict[str, Any]:
    """What the model sees (tools/list) and what the servers declare (their schemas)."""
    tools = {tool.name: tool for tool in desktop_runtime.list_tools()}
    outcome = desktop_runtime.run_js("JSON.stringify(await mcp.listTools())", timeout_seconds=120)
    assert not outcome.is_error, outcome.text
    return {"tools": tools, "servers": json.loads(outcome.text)}


def _names(schema: Any, found: set[str]) -> set[str]:
    """Every property name and constant in a JSON schema, however deep."""
    if isinstance(schema, dict):
        for key, value in (schema.get("properties") or {}).items():
            found.add(key)
            _names(value, found)
        if "const" in schema:
            found.add(json.dumps(schema["const"]))  # as TypeScript writes it: "navigate", true, 3
        for key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "$defs"):
            if key in schema:
                _names(schema[key] if key != "$defs" else list(schema[key].values()), found)
    elif isinstance(schema, list):
        for item in schema:
            _names(item, found)
    return found


def _declares(name: str, declared: str) -> bool:
    if name.startswith('"') or not re.match(r"\w", name):
        return name in declared
    return re.search(rf"\b{re.escape(name)}\b", declared) is not None


def test_every_operation_and_field_of_every_builtin_tool_is_declared(listing):
    """A field the model cannot see is a field it cannot use: nothing may be cut."""
    description = listing["tools"]["run_js"].description
    for server in BUILTIN:
        assert listing["servers"].get(server), f"{server} listed no tools"
        assert typescript_server(server, listing["servers"][server], DOC_CHARS).rstrip() in description, \
            f"{server} is not declared in full in the run_js description"
        for tool in listing["servers"][server]:
            declared = typescript_tool(tool, DOC_CHARS)
            assert tool["declaration"] == typescript_tool(tool), "mcp.describe gives the full form"
            for name in _names(tool["inputSchema"], set()):
                assert _declares(name, declared), f"{server}.{tool['name']}: {name} missing"
            output = success_schema(tool.get("outputSchema"))
            if output is not None:
                assert "Promise<any>" not in declared, f"{server}.{tool['name']} declares no result type"
                for name in _names(output, set()):
                    assert _declares(name, declared), \
                        f"{server}.{tool['name']}: result field {name} missing"


def test_every_builtin_tool_declares_its_result_type(listing):
    """The model must know what a call returns, not guess it from text."""
    missing = [f"{server}.{tool['name']}" for server in BUILTIN for tool in listing["servers"][server]
               if success_schema(tool.get("outputSchema")) is None]
    assert not missing, f"tools without an output schema: {missing}"


def test_the_tools_list_answer_stays_within_its_budget(listing):
    """Both descriptions, declarations included, must fit a model's tool budget."""
    size = sum(len(json.dumps(tool.model_dump(by_alias=True, exclude_none=True, mode="json")))
               for tool in listing["tools"].values())
    assert size <= TOOLS_LIST_BUDGET, f"tools/list is {size} bytes, over {TOOLS_LIST_BUDGET}"


@pytest.fixture(scope="module")
def declarations_file(listing, tmp_path_factory) -> Path:
    description = listing["tools"]["run_js"].description
    declared = description.split(DECLARATIONS_HEADING, 1)[1]
    path = tmp_path_factory.mktemp("tsc") / "codedesk.d.ts"
    path.write_text(GUEST_TS_PRELUDE + declared)
    return path


def _tsc(*files: Path) -> subprocess.CompletedProcess:
    tsc = shutil.which("tsc")
    assert tsc, "tsc is missing: `make test` installs node-typescript"
    return subprocess.run([tsc, "--noEmit", "--strict", "--target", "es2022", "--module", "es2022",
                           "--moduleDetection", "force", "--lib", "es2022", *map(str, files)],
                          capture_output=True, text=True, timeout=300)


def test_the_declarations_type_check(declarations_file):
    """Declarations that do not compile teach the model nothing it can rely on."""
    done = _tsc(declarations_file)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_script_fails_to_type_check(declarations_file, tmp_path):
    """The check has teeth: an unknown operation and a misspelt field are caught."""
    bad = tmp_path / "bad.ts"
    bad.write_text('await tools.browser.browser_execute({operations: [{type: "navigat", params: {url: "x"}}]});\n'
                   'await tools.exec.exec({bin: "ls", timout: 5});\n')
    done = _tsc(declarations_file, bad)
    assert done.returncode != 0
    assert "navigat" in done.stdout and "timout" in done.stdout, done.stdout


# -- the examples: one script per capability family, type-checked, then run for real -----------

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.ts"))


def test_the_examples_type_check_against_the_declarations(declarations_file):
    """Scripts written from the declarations compile: the declarations say what the servers take."""
    assert len(EXAMPLE_FILES) >= 10
    done = _tsc(declarations_file, *EXAMPLE_FILES)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda path: path.stem)
def test_an_example_runs_against_the_real_session(example, desktop_runtime, pages_server):
    """...and does what the declarations promise, against the real desktop."""
    code = example.read_text()
    expected = json.loads(code.splitlines()[0].removeprefix("// expect: "))
    outcome = desktop_runtime.run_js(code.replace("__PAGES__", pages_server.url("").rstrip("/")),
                                     timeout_seconds=120)
    assert not outcome.is_error, outcome.text
    assert expected in outcome.text, outcome.text
