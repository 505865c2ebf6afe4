"""Typed declarations of the capability servers' tools, generated from their JSON schemas.

For `run_js`, TypeScript: one `declare namespace tools.<server>` per server, one function per
tool taking its argument object and returning (a promise of) its structured result (plus
`images`, the result's image blocks that `image_index` fields point at), with every field's
description as a doc comment. The guest's `tools.<server>.<tool>(args)` matches it: it resolves
to the result's `structuredContent` and throws a `ToolError` when the call fails, so
the error branch of an output schema is never part of the return type. For `run_py`, Python
stubs of the same functions (keyword arguments, blocking).

The text is what the model reads to write a script, so it is complete (no field is elided) and
plain; a script that uses it type-checks with `tsc --noEmit` against `GUEST_TS_PRELUDE` plus the
servers' declarations.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .signatures import python_type

ToolsByServer = Mapping[str, Sequence[Mapping[str, Any]]]
"""`{server: [{name, description, inputSchema, outputSchema?}]}`."""

_IDENT = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
_INDENT = "  "

GUEST_TS_PRELUDE = """\
/** A content block of a raw MCP result. */
type ContentBlock = {type: "text", text: string} | {type: "image", data: string, mimeType: string};
/** A union of objects told apart by the constant field D, each with its own field P:
 * Tagged<"operation", "result", {url: {url: string}}> is {operation: "url", result: {url: string}}. */
type Tagged<D extends string, P extends string, M> = {[K in keyof M]: {[k in D]: K} & {[k in P]: M[K]}}[keyof M];
/** The image blocks of a result; its structured fields point at them by `image_index`. */
type WithImages = {images?: {type: "image", data: string, mimeType: string}[]};
/** The raw result of mcp.callTool. */
interface CallToolResult { content: ContentBlock[]; isError?: boolean; structuredContent?: any }
/** Thrown by tools.<server>.<tool>() when the tool answers isError: the server's error object. */
declare class ToolError extends Error {
  kind: string; step?: number; field?: string; hint?: string; server: string; tool: string; result: CallToolResult;
}
declare const mcp: {
  callTool(server: string, tool: string, args?: object): Promise<CallToolResult>;
  listTools(server?: string): Promise<Record<string, {name: string, description: string, inputSchema: object, outputSchema?: object, declaration: string}[]>>;
  /** The full typed declaration of a server's tools (or one tool), as text. */
  describe(server: string, tool?: string): Promise<string>;
};
/** Attach an image block (or text) to the run's result: the only way an image reaches the model. */
declare function artifact(x: ContentBlock | string | {type: "image", data: string, mimeType?: string}): void;
/** Helpers of the guest API beside the servers' own tools. */
declare namespace tools.exec {
  /** Start a program and wait for it: its status ("completed:0" on success) and its whole log. */
  function run(args: {bin: string, args?: string[], timeout: number, cwd?: string, env?: Record<string, string>}):
    Promise<{id: string, status: string, logs: string}>;
}
declare const console: {log(...a: any[]): void; info(...a: any[]): void; warn(...a: any[]): void;
                        error(...a: any[]): void; debug(...a: any[]): void};
declare function setTimeout(fn: (...a: any[]) => void, ms?: number, ...a: any[]): number;
declare function clearTimeout(id?: number): void;
declare function setInterval(fn: (...a: any[]) => void, ms?: number, ...a: any[]): number;
declare function clearInterval(id?: number): void;
declare function atob(data: string): string;
declare function btoa(data: string): string;
declare class TextEncoder { encode(text?: string): Uint8Array }
declare class TextDecoder { constructor(label?: string); decode(data?: Uint8Array): string }
"""


def typescript_declarations(tools: ToolsByServer, doc_chars: int | None = None) -> str:
    """`declare namespace tools.<server> {...}` for every server with known tools."""
    return "\n".join(typescript_server(server, listed, doc_chars) for server, listed in tools.items() if listed)


def typescript_server(server: str, listed: Sequence[Mapping[str, Any]], doc_chars: int | None = None) -> str:
    seen: set[tuple[str, str]] = set()  # in the compact form, a field's doc is said once per server
    # A tool named by a reserved word (`delete`) is exported under its name from a function of
    # another (`export { delete_ as delete }`); a namespace with such an export exports only what
    # it marks, so then every function is marked.
    exported = any(tool["name"] in _TS_RESERVED for tool in listed)
    body = "\n".join(_indent(typescript_tool(tool, doc_chars, seen, exported), 1) for tool in listed)
    return f"declare namespace tools.{_ts_name(server)} {{\n{body}\n}}\n"


def typescript_tool(tool: Mapping[str, Any], doc_chars: int | None = None,
                    seen: set[tuple[str, str]] | None = None, exported: bool = False) -> str:
    """One tool's function declaration, with its own type aliases for recursive types.

    `doc_chars` cuts each field's doc to its first sentence within that many characters (the
    run_js description's compact form); None keeps every doc whole (`mcp.describe`). `exported`
    marks the function `export` (a namespace holding a tool named by a reserved word)."""
    name = tool["name"]
    args_schema = tool.get("inputSchema") or {"type": "object"}
    result_schema = success_schema(tool.get("outputSchema"))
    ctx = _Render(prefix=_alias_prefix(name), doc_chars=doc_chars,
                  seen=seen if seen is not None and doc_chars is not None else set())
    args = _ts(args_schema, args_schema, 0, ctx)
    if doc_chars is not None:  # the compact form: a result's fields by name and type only
        ctx = _Render(prefix=ctx.prefix, doc_chars=0, seen=ctx.seen, aliases=ctx.aliases)
    result = (_ts(result_schema, result_schema, 0, ctx) + " & WithImages" if result_schema else "any")
    optional = "" if args_schema.get("required") else "?"
    doc = _doc(summary(tool.get("description") or ""))
    function = f"function {_ts_name(name)}(args{optional}: {args}): Promise<{result}>;"
    if name in _TS_RESERVED:  # `tools.files.delete(...)` is valid JavaScript; `function delete` is not
        function += f"\nexport {{ {_ts_name(name)} as {name} }};"
    elif exported:
        function = "export " + function
    lines = [*ctx.aliases.values(), doc + function]
    return "\n".join(line for line in lines if line)


@dataclass
class _Render:
    """What one rendering carries along: aliases made so far, their prefix, the doc length."""

    prefix: str
    doc_chars: int | None = None
    seen: set[tuple[str, str]] = field(default_factory=set)
    aliases: dict[str, str] = field(default_factory=dict)

    def doc(self, key: str, text: str) -> str:
        """A field's doc as this rendering shows it: cut, and said once per server when compact."""
        if self.doc_chars == 0:
            return ""
        text = _clip(text, self.doc_chars)
        if self.doc_chars is not None and text:
            if (key, text) in self.seen:
                return ""
            self.seen.add((key, text))
        return text


def _clip(text: str, limit: int | None) -> str:
    """`text`, or its first sentence cut to `limit` characters."""
    if limit is None or len(text) <= limit:
        return text
    first = re.split(r"(?<=[.;])\s", text, maxsplit=1)[0]
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


def python_stubs(tools: ToolsByServer, docs: bool = True) -> str:
    """Python stubs: `class tools: class <server>: def <tool>(*, field: T, ...) -> Result`.
    Without `docs` (the run_py description's form), each stub is one line: the keyword arguments."""
    out = ["class tools:"]
    for server, listed in tools.items():
        if not listed:
            continue
        out.append(f"{_INDENT}class {_py_name(server)}:")
        for tool in listed:
            out.append(_indent(python_tool(tool, docs), 2))
    return "\n".join(out) + "\n"


def python_tool(tool: Mapping[str, Any], docs: bool = True) -> str:
    schema = tool.get("inputSchema") or {}
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    # the compact form (run_py's description) names the keyword arguments; their types and the
    # result's shape are in run_js's TypeScript declarations, and in the full stub
    params = [(f"{_py_name(key)}: {python_type(sub, schema, 1)}" if docs else _py_name(key))
              + ("" if key in required else " = ..." if docs else "=...")
              for key, sub in sorted(props.items(), key=lambda item: item[0] not in required)]
    result_schema = success_schema(tool.get("outputSchema"))
    result = (python_type(result_schema, result_schema, 1) if docs else "dict") if result_schema else "Any"
    signature = f"def {_py_name(tool['name'])}({', '.join(['*', *params]) if params else ''}) -> {result}: ..."
    field_docs = [f"{key}: {_describe(sub)}" for key, sub in props.items()
                  if docs and isinstance(sub, dict) and _describe(sub)]
    doc = "\n".join([summary(tool.get("description") or ""), *field_docs]).strip()
    if not docs:  # what the tool does is said in run_js's declarations, beside this one
        return signature
    if not doc:
        return f"@staticmethod\n{signature}"
    return f'@staticmethod\n{signature.removesuffix(" ...")}\n{_INDENT}"""{_escape_py_doc(doc)}"""'


def summary(description: str) -> str:
    """A tool description's first paragraph: what the tool does. The rest of a long description
    restates what its declaration already says field by field."""
    return description.strip().split("\n\n", 1)[0].strip()


def success_schema(output: Any) -> dict[str, Any] | None:
    """The success branch of an output schema (an error branch, `{error: ...}` alone, dropped)."""
    if not isinstance(output, dict):
        return None
    branches = output.get("anyOf") or output.get("oneOf")
    if isinstance(branches, list):
        kept = [b for b in branches if not _is_error_branch(b)]
        if len(kept) == 1:
            merged = dict(kept[0])
            if "$defs" in output:
                merged.setdefault("$defs", output["$defs"])
            return merged
        if kept:
            return {**{k: v for k, v in output.items() if k not in ("anyOf", "oneOf", "type")}, "anyOf": kept}
    return output


def _is_error_branch(schema: Any) -> bool:
    return (isinstance(schema, dict) and set((schema.get("properties") or {})) == {"error"}
            and schema.get("required") == ["error"])


# ---- TypeScript rendering

ONE_LINE = 120
"""An object type is written on one line when it fits in this many characters."""


def _ts(schema: Any, root: dict[str, Any], depth: int, ctx: _Render, optional: bool = False) -> str:
    """A TypeScript type for `schema`; multi-line renderings indent their later lines relatively."""
    if not isinstance(schema, dict):
        return "any"
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        name = ctx.prefix + ref.rsplit("/", 1)[1]
        if name not in ctx.aliases:
            ctx.aliases[name] = ""  # placeholder: a recursive reference resolves to the name
            target = _pointer(root, ref)
            ctx.aliases[name] = f"type {name} = {_ts(target, root, 0, ctx)};"
        return name
    if "const" in schema:
        return json.dumps(schema["const"])
    if isinstance(schema.get("enum"), list):
        return " | ".join(json.dumps(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            branches = [b for b in schema[key] if not (optional and b == {"type": "null"})]
            common, rests = _factor(branches)
            if common:  # `{shared fields} & (| {rest of each} ...)`: each shared field said once
                shared = _ts({"type": "object", "properties": common[0], "required": common[1]}, root, depth, ctx)
                union = _ts({key: rests}, root, depth, ctx)
                return f"{shared} & ({union}\n)" if "\n" in union else f"{shared} & ({union})"
            tagged = _tagged(branches)
            if tagged:  # `Tagged<"operation", "result", {navigate: T, ...}>`: each tag said once
                tag, payload, members = tagged
                lines = [f"{json.dumps(name)}: {_ts(sub, root, depth + 1, ctx)};".replace("\n", "\n  ")
                         for name, sub in members]
                return (f"Tagged<{json.dumps(tag)}, {json.dumps(payload)}, {{\n"
                        + "\n".join("  " + line for line in lines) + "\n}>")
            parts = list(dict.fromkeys(_ts(b, root, depth, ctx) for b in branches))
            if len(parts) == 1:
                return parts[0]
            if len(parts) > 3 or any("\n" in p for p in parts) or sum(map(len, parts)) > ONE_LINE:
                return "\n" + "\n".join("| " + p.replace("\n", "\n  ") for p in parts)
            return " | ".join(parts)
    if isinstance(schema.get("allOf"), list):
        return " & ".join(_ts(s, root, depth, ctx) for s in schema["allOf"])
    kinds = _types(schema)
    if optional and len(kinds) > 1 and "null" in kinds:
        kinds = [k for k in kinds if k != "null"]
    if len(kinds) > 1:
        return " | ".join(dict.fromkeys(_ts({**schema, "type": k}, root, depth, ctx) for k in kinds))
    kind = kinds[0] if kinds else ("object" if "properties" in schema else None)
    if kind in ("string", "boolean", "number", "null"):
        return kind
    if kind == "integer":
        return "number"
    if kind == "array":
        item = _ts(schema.get("items", {}), root, depth, ctx)
        if "\n" in item:
            return "Array<" + item.replace("\n", "\n  ") + "\n>"
        return f"Array<{item}>" if ("|" in item or "&" in item) else f"{item}[]"
    if kind == "object":
        props: dict[str, Any] = schema.get("properties") or {}
        if not props:
            extra = schema.get("additionalProperties")
            value = _ts(extra, root, depth + 1, ctx) if isinstance(extra, dict) else "any"
            return f"Record<string, {value}>"
        required = set(schema.get("required") or [])
        fields = []
        for key, sub in props.items():
            label = (key if _IDENT.match(key) else json.dumps(key)) + ("" if key in required else "?")
            rendered = _ts(sub, root, depth + 1, ctx, optional=key not in required)
            doc = ctx.doc(key, _describe(sub)) if isinstance(sub, dict) else ""
            fields.append((label, rendered, doc))
        one_line = "{" + ", ".join(f"{label}: {rendered}" for label, rendered, _ in fields) + "}"
        if not any(doc for *_, doc in fields) and "\n" not in one_line and len(one_line) <= ONE_LINE:
            return one_line
        lines = []
        for label, rendered, doc in fields:
            comment = f"  // {doc}" if doc else ""
            lines.append(f"{label}: {rendered};{comment}".replace("\n", "\n  "))
        return "{\n" + "\n".join("  " + line for line in lines) + "\n}"
    return "any"


def _factor(branches: list[Any]) -> tuple[tuple[dict[str, Any], list[str]] | None, list[dict[str, Any]]]:
    """For a union of three or more object types that share fields (same name, schema and
    requiredness in every branch): the shared fields, and each branch without them."""
    objects = [b for b in branches if isinstance(b, dict) and isinstance(b.get("properties"), dict)
               and set(b) <= {"type", "properties", "required", "additionalProperties", "description"}]
    if len(branches) < 3 or len(objects) != len(branches):
        return None, branches
    first = objects[0]
    shared = [k for k, v in first["properties"].items()
              if all(b["properties"].get(k) == v and ((k in b.get("required", [])) == (k in first.get("required", [])))
                     for b in objects[1:])]
    if not shared or any(len(b["properties"]) == len(shared) for b in objects):
        return None, branches
    common = ({k: first["properties"][k] for k in shared}, [k for k in shared if k in first.get("required", [])])
    rests = [{**b, "properties": {k: v for k, v in b["properties"].items() if k not in shared},
              "required": [k for k in b.get("required", []) if k not in shared]} for b in objects]
    return common, rests


def _tagged(branches: list[Any]) -> tuple[str, str, list[tuple[str, Any]]] | None:
    """For a union of three or more objects of two required fields, one a distinct string
    constant (the tag) and the other the same name in each (the payload): the tag's name, the
    payload's, and each tag with its payload's schema."""
    if len(branches) < 3:
        return None
    names: set[tuple[str, str]] = set()
    members: list[tuple[str, Any]] = []
    for branch in branches:
        props = branch.get("properties") if isinstance(branch, dict) else None
        if not isinstance(props, dict) or len(props) != 2 or set(branch.get("required", [])) != set(props):
            return None
        tags = [k for k, v in props.items() if isinstance(v, dict) and isinstance(v.get("const"), str)]
        if len(tags) != 1:
            return None
        (payload,) = [k for k in props if k != tags[0]]
        names.add((tags[0], payload))
        members.append((props[tags[0]]["const"], props[payload]))
    if len(names) != 1 or len({name for name, _ in members}) != len(members):
        return None
    (tag, payload), = names
    return tag, payload, members


def _describe(schema: dict[str, Any]) -> str:
    text = " ".join((schema.get("description") or "").split())
    if "default" in schema and schema["default"] not in (None, {}, []) and "default" not in text.lower():
        default = schema["default"]
        if isinstance(default, float) and default.is_integer():
            default = int(default)  # as a script sees it: 2, not 2.0
        text = (text.rstrip(".") + "; " if text else "") + f"default {json.dumps(default)}"
    return text


def _doc(text: str) -> str:
    text = text.strip().replace("*/", "* /")
    if not text:
        return ""
    if "\n" not in text and len(text) < 100:
        return f"/** {text} */\n"
    return "/**\n" + "\n".join(f" * {line}".rstrip() for line in text.splitlines()) + "\n */\n"


def _indent(text: str, level: int) -> str:
    pad = _INDENT * level
    return "\n".join(pad + line if line.strip() else line for line in text.splitlines())


def _pointer(root: dict[str, Any], ref: str) -> Any:
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    return target


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind]
    return [kind] if isinstance(kind, str) else []


_TS_RESERVED = frozenset(
    "break case catch class const continue debugger default delete do else enum export extends false finally "
    "for function if import in instanceof new null return super switch this throw true try typeof var void "
    "while with".split())
"""Words TypeScript refuses as a function's name (a property's name, as scripts call tools, may be any)."""


def _ts_name(name: str) -> str:
    clean = name if _IDENT.match(name) else re.sub(r"\W", "_", name)
    return clean + "_" if clean in _TS_RESERVED else clean


def _alias_prefix(tool: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"\W|_", tool) if part) + "_"


# ---- Python rendering


def _py_name(name: str) -> str:
    clean = re.sub(r"\W", "_", name)
    return clean + "_" if keyword.iskeyword(clean) else clean


def _escape_py_doc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
