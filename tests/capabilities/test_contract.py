"""The one result contract every capability server answers by (capabilities/contract.py)."""

from __future__ import annotations

import json

import anyio
import jsonschema
import pytest
from pydantic import BaseModel, ConfigDict

from capabilities.contract import (ERROR_KINDS, Image, OutputModel, ToolError, ToolRegistry, ToolSpec, clean_schema, failure,
                                   output_schema, success)


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    children: list[Node] = []


class Point(BaseModel):
    x: int
    y: int


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    at: Point
    tree: Node | None = None


class Answer(BaseModel):
    total: int
    image_index: int | None = None


async def _add(state: dict, args: Args):
    if args.at.x < 0:
        raise ToolError("refused", "x must not be negative", field="at.x", hint="pass x >= 0")
    if args.at.x == 13:
        raise RuntimeError("unlucky")
    state["calls"] += 1
    return success({"total": args.at.x + args.at.y, "image_index": 0}, f"total {args.at.x + args.at.y}",
                   [Image(b"\x89PNG fake")])


REGISTRY = ToolRegistry("demo", [ToolSpec(name="add", description="Adds.", args=Args, output=Answer, run=_add)])


def _call(name: str, arguments: dict):
    state = {"calls": 0}
    result = anyio.run(REGISTRY.call, state, name, arguments)
    schema = REGISTRY.list_tools()[0].output_schema
    jsonschema.validate(result.structured_content, schema)  # success and failure alike
    return result, state


def test_schemas_inline_references_and_keep_recursive_ones_resolvable():
    """Models read inlined schemas best; a recursive type must still validate, not loop."""
    schema = clean_schema(Args)
    assert schema["properties"]["at"]["properties"]["x"] == {"type": "integer"}
    assert "title" not in schema and "title" not in schema["properties"]["at"]
    out = output_schema(Args)
    jsonschema.validate({"at": {"x": 1, "y": 2}, "tree": {"name": "a", "children": [{"name": "b"}]}}, out)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"at": {"x": 1, "y": 2}, "tree": {"name": "a", "children": [{"nom": "b"}]}}, out)


def test_a_success_carries_structured_content_text_and_images_by_index():
    """Scripts read structuredContent; people read the text; images follow, pointed at by index."""
    result, state = _call("add", {"at": {"x": 2, "y": 3}})
    assert not result.is_error and state["calls"] == 1
    assert result.structured_content == {"total": 5, "image_index": 0}
    assert [block.type for block in result.content] == ["text", "image"]
    assert result.content[0].text == 'total 5\n{"total": 5, "image_index": 0}'


def test_the_text_carries_the_whole_result_for_clients_that_read_only_text():
    """A plain MCP client shows its model the text block: it must hold what structuredContent holds."""
    for result in (success({"a": [1, "é"]}), success({"a": 1}, "one"), success({"a": 1}, ""),
                   failure(ToolError("failed", "no", field="f"), extra={"done": [1]}),
                   failure(ToolError("refused", "no"), summary="")):
        last = result.content[0].text.split("\n")[-1]
        assert json.loads(last) == result.structured_content
    assert success({"a": 1}).content[0].text == '{"a": 1}'  # JSON alone: exec's and desktop_execute's text
    assert failure(ToolError("refused", "no"), summary="").content[0].text == \
        '{"error": {"kind": "refused", "message": "no"}}'


def test_unknown_fields_are_refused_by_name_and_nothing_runs():
    """A wrong call must say which field is wrong and which exist, before acting."""
    result, state = _call("add", {"at": {"x": 1, "y": 1}, "cmd": "rm -rf /"})
    assert result.is_error and state["calls"] == 0
    error = result.structured_content["error"]
    assert error["kind"] == "invalid_arguments"
    assert "unknown field 'cmd'" in error["message"] and "at, tree" in error["message"]
    assert result.content[0].text.startswith("Error: ")


def test_a_tool_error_keeps_its_kind_field_and_hint():
    """The model fixes a call from kind, field and hint: they must survive to the result."""
    result, _ = _call("add", {"at": {"x": -1, "y": 1}})
    assert result.structured_content["error"] == {"kind": "refused", "message": "x must not be negative",
                                                  "field": "at.x", "hint": "pass x >= 0"}


def test_an_unexpected_exception_is_an_internal_error_and_the_server_goes_on():
    """A bug in one tool must not take the server down; it says what failed."""
    result, _ = _call("add", {"at": {"x": 13, "y": 1}})
    assert result.structured_content["error"]["kind"] == "internal"
    assert "RuntimeError: unlucky" in result.structured_content["error"]["message"]
    again, _ = _call("add", {"at": {"x": 1, "y": 1}})
    assert not again.is_error


def test_an_unknown_tool_names_the_tools_there_are():
    """A typo in a tool name must be answered with the list to choose from."""
    result = anyio.run(REGISTRY.call, {"calls": 0}, "ad", {})
    assert result.structured_content["error"]["kind"] == "unknown_tool"
    assert "add" in result.structured_content["error"]["message"]
    assert "unknown_tool" in ERROR_KINDS


class Shot(OutputModel):
    image_index: int
    note: str | None = None
    caption: str | None  # required, may be null: sent as null


def test_an_output_model_leaves_out_unset_optional_fields_and_its_schema_says_so():
    """Declarations read `note?: string`: the answer must never carry note: null."""
    assert Shot(image_index=0, caption=None).model_dump() == {"image_index": 0, "caption": None}
    schema = clean_schema(Shot)
    assert schema["properties"]["note"] == {"type": "string"}
    jsonschema.validate(Shot(image_index=1, caption="c").model_dump(), schema)


def test_a_tools_own_hooks_word_its_refusals_and_failures():
    """exec words refusals its way and browser_execute keeps the spec's text on failure."""
    async def failed(state, error, arguments):
        return failure(error, summary=f"custom: {error.kind}")

    spec = ToolSpec(name="add", description="", args=Args, output=Answer, run=_add,
                    invalid=lambda exc, raw: ToolError("invalid_arguments", f"bad call with {sorted(raw)}"),
                    failed=failed)
    registry = ToolRegistry("demo", [spec])
    refused = anyio.run(registry.call, {"calls": 0}, "add", {"nope": 1})
    assert refused.structured_content["error"]["message"] == "bad call with ['nope']"
    assert refused.content[0].text.split("\n")[0] == "custom: invalid_arguments"
    raised = anyio.run(registry.call, {"calls": 0}, "add", {"at": {"x": -1, "y": 0}})
    assert raised.content[0].text.split("\n")[0] == "custom: refused" and raised.is_error


def test_text_that_is_not_valid_unicode_leaves_every_result_as_a_replacement_character():
    """A lone surrogate read from a page or the desktop becomes U+FFFD in the text and the
    structured content of a success and a failure, so the result can be sent."""
    ok = success({"text": "a\ud800", "items": [{"k\udc00": "\udbff"}], "n": 1}, "t\ud800")
    assert ok.structured_content == {"text": "a\ufffd", "items": [{"k\ufffd": "\ufffd"}], "n": 1}
    assert ok.content[0].text.split("\n")[0] == "t\ufffd"
    failed = failure(ToolError("failed", "m\udfff", hint="h\ud800"), extra={"done": ["\ud83d"]})
    assert failed.structured_content == {"done": ["\ufffd"], "error": {"kind": "failed", "message": "m\ufffd",
                                                                       "hint": "h\ufffd"}}
    assert failed.content[0].text.split("\n")[0] == "Error: m\ufffd (h\ufffd)"
    for result in (ok, failed):
        result.model_dump_json(by_alias=True, exclude_none=True)  # what a transport does
    clean = {"text": "\U0001F600 fine"}
    assert success(clean, "fine").structured_content is clean  # nothing to replace: nothing copied
