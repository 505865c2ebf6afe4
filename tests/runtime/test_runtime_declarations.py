"""Typed declarations generated from tool schemas (runtime/declarations.py)."""

from __future__ import annotations

from runtime.declarations import python_tool, success_schema, typescript_server, typescript_tool

LONG = "Path of the file, absolute or under ~. It must be inside the document roots, which are the home and /data."
READ = {
    "name": "read", "description": "Read a file.\n\nLonger text the declaration restates.",
    "inputSchema": {"type": "object", "required": ["path"], "properties": {
        "path": {"type": "string", "description": LONG},
        "pages": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "description": "Pages"}}},
    "outputSchema": {"type": "object", "anyOf": [
        {"type": "object", "required": ["text"], "properties": {
            "text": {"type": "string", "description": "The text read."},
            "tree": {"$ref": "#/$defs/Node"}}},
        {"type": "object", "required": ["error"], "properties": {"error": {"type": "object"}}}],
        "$defs": {"Node": {"type": "object", "properties": {
            "name": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}},
}
STAT = {"name": "stat", "description": "Stat a file.",
        "inputSchema": {"type": "object", "required": ["path"],
                        "properties": {"path": {"type": "string", "description": LONG}}}}


def test_the_full_declaration_keeps_every_doc_and_the_result_type():
    """mcp.describe must give everything: whole docs, optional fields, the result without the error branch."""
    text = typescript_tool(READ)
    assert "/** Read a file. */" in text and "Longer text" not in text
    assert f"path: string;  // {LONG}" in text
    assert "pages?: string;  // Pages" in text  # optional: no `| null`
    assert "text: string;  // The text read." in text
    assert "error" not in text
    assert "type Read_Node = {" in text and "kids?: Read_Node[]" in text  # recursive: an alias


def test_the_compact_form_cuts_docs_says_each_once_and_drops_result_docs():
    """The description's form must fit the budget without losing a field."""
    text = typescript_server("files", [READ, STAT], doc_chars=70)
    assert "path: string;  // Path of the file, absolute or under ~." in text
    assert text.count("Path of the file") == 1  # said once per server
    assert "The text read" not in text and "text: string" in text


def test_python_stubs_in_full_and_compact():
    """run_py's description names fields and types; describe() gives the whole stub with docs."""
    full = python_tool(READ)
    assert "def read(*, path: str, pages: str | None = ...) -> {'text': str" in full
    assert LONG in full
    compact = python_tool(READ, docs=False)
    assert compact == "def read(*, path, pages=...) -> dict: ..."


def test_the_error_branch_is_not_part_of_the_success_type():
    """Typed calls throw on isError, so the error object never appears as a return type."""
    branch = success_schema(READ["outputSchema"])
    assert set(branch["properties"]) == {"text", "tree"} and "$defs" in branch
    assert success_schema(None) is None


def test_a_union_tagged_by_a_constant_names_each_tag_once():
    """Per-operation results are the bulk of the declarations: `Tagged<...>` says each tag once."""
    step = lambda op, result: {"type": "object", "required": ["operation", "result"], "properties": {  # noqa: E731
        "operation": {"const": op}, "result": result}}
    tool = {"name": "batch", "inputSchema": {"type": "object"}, "outputSchema": {
        "type": "object", "properties": {"results": {"type": "array", "items": {"anyOf": [
            step("url", {"type": "object", "required": ["url"], "properties": {"url": {"type": "string"}}}),
            step("wait", {"type": "null"}),
            step("text", {"type": "string"})]}}}}}
    text = typescript_tool(tool, doc_chars=0)
    assert 'Tagged<"operation", "result", {' in text
    assert '"url": {url: string};' in text and '"wait": null;' in text and '"text": string;' in text
    assert text.count('"operation"') == 1


def test_a_tool_named_by_a_reserved_word_is_declared_as_valid_typescript() -> None:
    """files.delete is called as tools.files.delete(...); `function delete` would not type-check."""
    remove = {"name": "delete", "description": "Trash it.", "inputSchema": STAT["inputSchema"]}
    text = typescript_server("files", [STAT, remove], doc_chars=0)
    assert "function delete_(args" in text and "export { delete_ as delete };" in text
    assert "export function stat(" in text  # with an explicit export, every function is marked
    assert "export" not in typescript_server("files", [STAT], doc_chars=0)
