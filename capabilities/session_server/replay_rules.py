"""How a replayed call is compared with its record: one rule per tool, a general one for the rest.

Every rule first compares the status (`isError`) and, for two failures, the error's kind and
step. Then the fields of the structured result that say what happened, not how long it took or
where it was drawn: for `browser_execute` each step's URL, title, HTTP status, text found,
element clicked or typed into, value read; for `exec` the command's status (`completed:0`); for
the others the same fields wherever they occur. Text is compared with its white space
collapsed. A record kept as its summary only (a large answer) is compared by status alone.
"""

from __future__ import annotations

import json
import re
from typing import Any

COMPARED_FIELDS = frozenset({
    "url", "title", "status", "text", "visible", "clicked", "value", "values", "checked", "found", "count",
    "exit_code", "typed", "selector", "operation", "page_count", "matches", "exists",
})
"""Fields that say what a call did, compared wherever they occur in a structured result."""
PER_TOOL_FIELDS = {
    ("exec", "exec"): frozenset({"status", "exit_code"}),
    ("exec", "run"): frozenset({"status", "exit_code"}),
}
SHOWN_CHARS = 120


def compare(server: str, tool: str, recorded: dict[str, Any], replayed: dict[str, Any]) -> str | None:
    """Why `replayed` (a CallToolResult as a camelCase dict) differs from the `recorded` entry
    (`status`, `error_kind`, `result`), or None when it matches."""
    recorded_error = recorded.get("status") == "error"
    replayed_error = bool(replayed.get("isError"))
    if recorded_error != replayed_error:
        if replayed_error:
            return f"it failed now ({_error_text(replayed)}) and succeeded when recorded"
        return f"it succeeded now and failed when recorded ({recorded.get('error_kind')}: " \
               f"{_short(recorded.get('error_message'))})"
    whole = recorded.get("result")
    if recorded_error:
        now = _error(replayed)
        if recorded.get("error_kind") and now.get("kind") != recorded.get("error_kind"):
            return f"it failed with kind {now.get('kind')!r} now and {recorded.get('error_kind')!r} when recorded"
        before = _error(whole) if isinstance(whole, dict) else {}
        if before.get("step") != now.get("step"):
            return f"it failed at step {now.get('step')} now and at step {before.get('step')} when recorded"
        return None
    if not isinstance(whole, dict):
        return None  # kept as a summary only: the status is all there is to compare
    fields = PER_TOOL_FIELDS.get((server, tool), COMPARED_FIELDS)
    return _differ(whole.get("structuredContent"), replayed.get("structuredContent"), fields, "")


def _differ(before: Any, now: Any, fields: frozenset[str], where: str) -> str | None:
    if isinstance(before, dict) and isinstance(now, dict):
        for key, value in before.items():
            path = f"{where}.{key}" if where else key
            if key in fields and not isinstance(value, dict | list):
                if not _same(value, now.get(key)):
                    return f"{_step(path)}{path}: {_show(now.get(key))} now, {_show(value)} when recorded"
            elif isinstance(value, dict | list):
                found = _differ(value, now.get(key), fields, path)
                if found:
                    return found
        return None
    if isinstance(before, list) and isinstance(now, list):
        if where.endswith("results") and len(before) != len(now):
            return f"{where}: {len(now)} steps now, {len(before)} when recorded"
        for index, (a, b) in enumerate(zip(before, now, strict=False)):
            found = _differ(a, b, fields, f"{where}[{index}]")
            if found:
                return found
    return None


def _step(path: str) -> str:
    match = re.match(r"results\[(\d+)\]", path)
    return f"step {int(match.group(1)) + 1}: " if match else ""


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return " ".join(a.split()) == " ".join(b.split())
    return a == b


def _error(result: dict[str, Any] | None) -> dict[str, Any]:
    structured = (result or {}).get("structuredContent")
    error = structured.get("error") if isinstance(structured, dict) else None
    return error if isinstance(error, dict) else {}


def _error_text(result: dict[str, Any]) -> str:
    error = _error(result)
    if error:
        return f"{error.get('kind')}: {_short(error.get('message'))}"
    text = " ".join(b.get("text", "") for b in result.get("content", ()) if isinstance(b, dict))
    return _short(text)


def _short(text: Any) -> str:
    text = str(text or "")
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"


def _show(value: Any) -> str:
    return _short(json.dumps(value, ensure_ascii=False))
