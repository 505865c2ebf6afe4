"""Compact tool signatures generated from input schemas, for the run_js and run_py descriptions."""

from __future__ import annotations

from runtime import signatures

SCHEMA = {
    "type": "object",
    "properties": {
        "url": {"type": "string"},
        "count": {"type": "integer"},
        "mode": {"enum": ["fast", "slow"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "target": {"$ref": "#/$defs/Target"},
        "maybe": {"anyOf": [{"type": "number"}, {"type": "null"}]},
    },
    "required": ["url", "target"],
    "$defs": {"Target": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x"]}},
}


def test_typescript_signature_marks_optional_fields_and_types() -> None:
    """run_js shows the argument object as a TypeScript type: optional keys get `?`."""
    assert signatures.typescript("open", SCHEMA) == (
        'open({url: string, count?: number, mode?: "fast" | "slow", tags?: string[], '
        "env?: Record<string, string>, target: {x: number, y?: number}, maybe?: number | null})"
    )


def test_python_signature_lists_required_first() -> None:
    """run_py shows keyword parameters with Python types, optional ones defaulted."""
    assert signatures.python("open", SCHEMA) == (
        "open(url: str, target: {'x': float, 'y': float (optional)}, count: int = ..., "
        "mode: Literal['fast', 'slow'] = ..., tags: list[str] = ..., env: dict[str, str] = ..., "
        "maybe: float | None = ...)"
    )


def test_empty_schema_gives_empty_arguments() -> None:
    """A tool without parameters reads as taking an empty object."""
    assert signatures.typescript("pid", {"type": "object"}) == "pid({})"
    assert signatures.python("pid", None) == "pid()"


def test_long_and_deep_schemas_are_elided() -> None:
    """Huge schemas do not flood the description; the rest is one listTools call away."""
    deep: dict = {"type": "string"}
    for i in range(10):
        deep = {"type": "object", "properties": {f"k{i}": deep}, "required": [f"k{i}"]}
    assert "…" in signatures.typescript("deep", deep)
    wide = {"type": "object", "properties": {f"field_{i}": {"type": "string"} for i in range(100)}}
    rendered = signatures.typescript("wide", wide)
    assert len(rendered) <= signatures.MAX_CHARS + len("wide()") and rendered.endswith("…)")


def test_self_referencing_schema_terminates() -> None:
    """Recursive $refs stop at the depth limit instead of looping."""
    schema = {"$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}},
              "type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}}}
    assert signatures.typescript("tree", schema).startswith("tree({root?: {child?: {child?:")
