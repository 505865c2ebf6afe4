"""Compact signatures of capability tools, generated from their JSON input schemas.

`typescript(name, schema)` gives `echo({text: string, tag?: string})` for run_js;
`python(name, schema)` gives `echo(text: str, tag: str = ...)` for run_py. Both stay short:
nested structures deeper than a few levels, and very long renderings, are elided with `…`
(the full schema is one `mcp.listTools(server)` away).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 5
MAX_CHARS = 400
_IDENT = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def typescript(name: str, schema: dict[str, Any] | None) -> str:
    """`name(args)` with the argument object written as a TypeScript type."""
    root = schema or {}
    text = _ts(root, root, 0) if _has_properties(root) else "{}"
    return f"{name}({_clip(text)})"


def python(name: str, schema: dict[str, Any] | None) -> str:
    """`name(a: T, b: U = ...)`: the argument dict's keys as Python keyword parameters."""
    root = schema or {}
    props: dict[str, Any] = root.get("properties") or {}
    required = set(root.get("required") or [])
    params = [
        f"{key}: {python_type(_resolve(root, sub), root, 1)}" + ("" if key in required else " = ...")
        for key, sub in sorted(props.items(), key=lambda item: item[0] not in required)
    ]
    return f"{name}({_clip(', '.join(params))})"


def _has_properties(schema: dict[str, Any]) -> bool:
    return bool(schema.get("properties")) or bool(schema.get("additionalProperties"))


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


def _resolve(root: dict[str, Any], schema: Any) -> dict[str, Any]:
    """Follow a local `$ref` (`#/$defs/X` or `#/definitions/X`) once; anything else as is."""
    if not isinstance(schema, dict):
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        if isinstance(target, dict):
            merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            return merged
    return schema


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind]
    return [kind] if isinstance(kind, str) else []


def _ts(schema: Any, root: dict[str, Any], depth: int) -> str:
    schema = _resolve(root, schema)
    if depth > MAX_DEPTH:
        return "…"
    if "const" in schema:
        return json.dumps(schema["const"])
    if isinstance(schema.get("enum"), list):
        return " | ".join(json.dumps(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(dict.fromkeys(_ts(s, root, depth + 1) for s in schema[key]))
    if isinstance(schema.get("allOf"), list):
        return " & ".join(_ts(s, root, depth + 1) for s in schema["allOf"])
    kinds = _types(schema)
    if len(kinds) > 1:
        return " | ".join(dict.fromkeys(_ts({**schema, "type": k}, root, depth) for k in kinds))
    kind = kinds[0] if kinds else ("object" if "properties" in schema else None)
    if kind in ("string", "boolean", "number", "null"):
        return kind
    if kind == "integer":
        return "number"
    if kind == "array":
        item = _ts(schema.get("items", {}), root, depth + 1)
        return f"({item})[]" if ("|" in item or "&" in item) else f"{item}[]"
    if kind == "object":
        props: dict[str, Any] = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        if not props:
            extra = schema.get("additionalProperties")
            value = _ts(extra, root, depth + 1) if isinstance(extra, dict) else "any"
            return f"Record<string, {value}>"
        if depth >= MAX_DEPTH:
            return "{…}"
        fields = []
        for key, sub in props.items():
            label = key if _IDENT.match(key) else json.dumps(key)
            fields.append(f"{label}{'' if key in required else '?'}: {_ts(sub, root, depth + 1)}")
        return "{" + ", ".join(fields) + "}"
    return "any"


def python_type(schema: Any, root: dict[str, Any], depth: int = 1) -> str:
    """A Python type for `schema` (its `$ref`s resolved against `root`), cut past MAX_DEPTH."""
    schema = _resolve(root, schema)
    if depth > MAX_DEPTH:
        return "..."
    if "const" in schema:
        return f"Literal[{schema['const']!r}]"
    if isinstance(schema.get("enum"), list):
        return f"Literal[{', '.join(repr(v) for v in schema['enum'])}]"
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(dict.fromkeys(python_type(s, root, depth + 1) for s in schema[key]))
    kinds = _types(schema)
    if len(kinds) > 1:
        return " | ".join(dict.fromkeys(python_type({**schema, "type": k}, root, depth) for k in kinds))
    kind = kinds[0] if kinds else ("object" if "properties" in schema else None)
    simple = {"string": "str", "boolean": "bool", "number": "float", "integer": "int", "null": "None"}
    if kind in simple:
        return simple[kind]
    if kind == "array":
        return f"list[{python_type(schema.get('items', {}), root, depth + 1)}]"
    if kind == "object":
        props: dict[str, Any] = schema.get("properties") or {}
        if not props:
            extra = schema.get("additionalProperties")
            return f"dict[str, {python_type(extra, root, depth + 1) if isinstance(extra, dict) else 'Any'}]"
        if depth >= MAX_DEPTH:
            return "dict"
        required = set(schema.get("required") or [])
        fields = [f"{key!r}: {python_type(sub, root, depth + 1)}" + ("" if key in required else " (optional)") for key, sub in props.items()]
        return "{" + ", ".join(fields) + "}"
    return "Any"
