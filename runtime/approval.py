"""What a person approves: the call's arguments, and the target they act on as it was when shown.

An approval is bound to both. The arguments cannot change (what runs is what was shown); the
target can, between the moment a person saw the request and the moment they said yes, so it is
read again after the yes and a change refuses the call (`approval_stale`):

- an `exec`: the program file and every argument naming an existing file (relative to the
  call's `cwd`, else the desktop user's home), by their SHA-256 (a script edited after it was
  shown is not what was approved);
- a `desktop_execute` batch: the screen around each point its mouse steps act on (a 32 px
  square, grabbed through the same server), so a window that moved under the pointer, or a
  dialog that appeared there, is not clicked on an old yes.

- a `browser_execute` batch: the elements its steps act on (by selector or ref) before its first
  step that loads another page: how many match, and the first one's tag, text, box and markup,
  read in the batch's own tab (a tab not open yet is opened blank, as the batch would open it).
  A Playwright-only selector (`text=`, `role=`, `>>`) cannot be read outside Playwright and binds
  nothing but the tab's URL.

Other calls are bound to their arguments alone. What the person is shown with the request: the
script's line that made the call (the guest says it: `sandbox.CALL_LINE`), and a screenshot of
the target (the screen around a desktop batch's first point, the tab of a browser batch with its
elements' boxes).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio


CallTool = Callable[[str, str, Any], Awaitable[dict[str, Any]]]
REGION = 32
PREVIEW = (480, 300)  # the screen shown around a desktop batch's first point
PAGE_CHANGING = frozenset({"navigate", "back", "forward", "reload", "setContent"})
_HASH_LIMIT = 256 << 20  # a larger file is bound by its size, time and inode instead


@dataclass(frozen=True)
class ApprovalRequest:
    """One call the operator's policy asks a person about."""

    server: str
    tool: str
    arguments: Any
    rule: str
    target: dict[str, Any] = field(default_factory=dict)  # what the call acts on, as shown
    line: int | None = None  # the script's line that made the call, as the guest said

    def question(self) -> str:
        """The request in words, for a client's user (MCP elicitation)."""
        shown = json.dumps(self.arguments, ensure_ascii=False, indent=1)
        if len(shown) > 4000:
            shown = shown[:4000] + "\n… (cut)"
        where = f" from line {self.line} of its script" if self.line is not None else ""
        return (f"A script asks{where} to run {self.server}.{self.tool} (policy rule {self.rule!r}: ask). "
                f"Approve this call, with exactly these arguments?\n{shown}")

    def shown(self) -> dict[str, Any]:
        """The request for a viewer's dialog (its arguments are redacted by the viewer's end)."""
        from .oversight import step_summary, targets

        return {"server": self.server, "tool": self.tool, "rule": self.rule, "arguments": self.arguments,
                "step": step_summary(self.tool, self.arguments), "points": targets(self.tool, self.arguments),
                "files": sorted(self.target.get("files", {})), "line": self.line,
                "elements": [{k: e.get(k) for k in ("selector", "count", "tag", "text", "box")}
                             for e in self.target.get("elements", ())],
                "preview": self.target.get("preview")}


async def read_target(call: CallTool, server: str, tool: str, args: Any, *,
                      preview: bool = False) -> dict[str, Any]:
    """The state of what the call acts on (see above); {} when it is bound to its arguments alone.
    With `preview`, also a screenshot of it for the person (`preview`: PNG data, its place on the
    screen or page), which `changed` does not compare."""
    if not isinstance(args, dict):
        return {}
    if tool == "exec" and isinstance(args.get("bin"), str):
        return {"files": await anyio.to_thread.run_sync(_exec_files, args)}  # hashing: off the loop
    if tool == "desktop_execute":
        from .oversight import targets

        points = targets(tool, args)
        if points:
            return await _screen_regions(call, server, points, preview)
    if tool == "browser_execute":
        selectors = element_targets(args)
        if selectors or preview:
            return await _page_elements(call, server, args, selectors, preview)
    return {}


def changed(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """What changed between two readings, in words; None when nothing did."""
    for name in sorted(set(before.get("files", {})) | set(after.get("files", {}))):
        if before.get("files", {}).get(name) != after.get("files", {}).get(name):
            return f"the file {name} changed after it was shown"
    for old, new in zip(before.get("regions", ()), after.get("regions", ()), strict=False):
        if old != new:
            return f"the screen at ({old['x']}, {old['y']}) changed after it was shown"
    if before.get("url") != after.get("url"):
        return f"the tab went from {before.get('url')} to {after.get('url')} after it was shown"
    for old, new in zip(before.get("elements", ()), after.get("elements", ()), strict=False):
        if old != new:
            what = next((k for k in ("count", "tag", "text", "box", "markup") if old.get(k) != new.get(k)), "state")
            return f"the element {old['selector']!r} changed after it was shown (its {what})"
    return None


def element_targets(args: dict[str, Any]) -> list[str]:
    """The elements a browser batch acts on before it loads another page, as CSS selectors (a
    ref is its attribute), in order, each once."""
    found: list[str] = []
    ops = args.get("operations")
    for op in ops if isinstance(ops, list) else ():
        if not isinstance(op, dict):
            continue
        if op.get("type") in PAGE_CHANGING:
            break
        params = op.get("params") if isinstance(op.get("params"), dict) else {}
        for place in (params, params.get("from"), params.get("to")):
            if not isinstance(place, dict):
                continue
            if isinstance(place.get("ref"), str):
                found.append(f'[data-codedesk-ref="{place["ref"]}"]')
            elif isinstance(place.get("selector"), str):
                found.append(place["selector"])
    return list(dict.fromkeys(found))[:20]


# Read in the page: a Playwright-only selector is a syntax error to querySelectorAll, so it binds
# nothing (its state reads "unreadable" both times). Markup is hashed in the page, kept short.
_READ_ELEMENTS = """(() => {
  const hash = (s) => { let h = 5381; for (let i = 0; i < s.length; i++) h = (h * 33 + s.charCodeAt(i)) | 0; return h; };
  return {url: location.href, elements: SELECTORS.map((selector) => {
    let all;
    try { all = document.querySelectorAll(selector); } catch (e) { return {selector, count: null, tag: "unreadable"}; }
    const el = all[0];
    if (!el) return {selector, count: 0};
    const r = el.getBoundingClientRect(), z = devicePixelRatio || 1;  // the box in screenshot pixels
    return {selector, count: all.length, tag: el.tagName.toLowerCase(),
            text: String(el.innerText || el.value || el.getAttribute("aria-label") || "").slice(0, 200),
            box: [r.x, r.y, r.width, r.height].map((n) => Math.round(n * z)),
            markup: hash(el.outerHTML)};
  })};
})()"""


async def _page_elements(call: CallTool, server: str, args: dict[str, Any], selectors: list[str],
                         preview: bool) -> dict[str, Any]:
    tab = args.get("tab") if isinstance(args.get("tab"), str) else "default"
    steps: list[dict[str, Any]] = []
    if selectors:  # bound to the page they are on, and to themselves
        steps.append({"type": "evaluate",
                      "params": {"script": _READ_ELEMENTS.replace("SELECTORS", json.dumps(selectors))}})
    if preview:
        steps.append({"type": "screenshot"})
    result = await call(server, "browser_execute", {"tab": tab, "operations": steps})
    state: dict[str, Any] = {}
    if selectors:
        structured = result.get("structuredContent") if isinstance(result, dict) else None
        steps_done = structured.get("results") if isinstance(structured, dict) else None
        read = steps_done[0].get("result") if isinstance(steps_done, list) and steps_done else None
        if result.get("isError") or not isinstance(read, dict):
            read = {"url": "unreadable", "elements": []}
        said = read.get("elements") if isinstance(read.get("elements"), list) else []
        state = {"url": str(read.get("url"))[:2000],
                 "elements": [_element_state(selector, said[i] if i < len(said) else None)
                              for i, selector in enumerate(selectors)]}
    images = _images(result)
    if preview and images:
        state["preview"] = {"image": images[0], "space": "page"}
    return state


def _element_state(selector: str, said: Any) -> dict[str, Any]:
    """What the page said of one element, in the shape the binding compares and a person is shown:
    the page may be hostile and say anything (other fields, huge text), so only these are kept,
    typed and cut short; nothing it said is an element reads as unreadable."""
    if not isinstance(said, dict):
        return {"selector": selector, "count": None, "tag": "unreadable", "text": "", "box": None, "markup": None}
    count, box, markup = said.get("count"), said.get("box"), said.get("markup")
    numbers = isinstance(box, list) and len(box) == 4 and all(
        isinstance(n, int | float) and not isinstance(n, bool) and abs(n) < 1e7 for n in box)
    return {"selector": selector,
            "count": count if isinstance(count, int) and not isinstance(count, bool) else None,
            "tag": str(said.get("tag") or "")[:40], "text": str(said.get("text") or "")[:200],
            "box": [round(n) for n in box] if numbers else None,
            "markup": markup if isinstance(markup, int) and not isinstance(markup, bool) else None}


async def _screen_regions(call: CallTool, server: str, points: list[dict[str, Any]],
                          preview: bool) -> dict[str, Any]:
    """A hash of the 32 px square around each point, and with `preview` the screen around the
    first one, in one batch (the squares kept inside the screen, whose size is read first)."""
    sizes = await call(server, "desktop_execute", {"operations": [{"type": "screen.width"}, {"type": "screen.height"}]})
    try:
        width, height = (int(step["result"]) for step in sizes["structuredContent"]["results"])
    except (KeyError, TypeError, ValueError):
        return {"regions": [{"x": p["x"], "y": p["y"], "pixels": "unreadable"} for p in points]}
    boxes = [_box(p["x"], p["y"], REGION, REGION, width, height) for p in points]
    if preview:
        boxes.append(_box(points[0]["x"], points[0]["y"], *PREVIEW, width, height))
    result = await call(server, "desktop_execute", {"operations": [
        {"type": "screen.grabRegion", "params": dict(zip(("left", "top", "width", "height"), box, strict=True))}
        for box in boxes]})
    images = _images(result) if not result.get("isError") else []
    regions = [{"x": p["x"], "y": p["y"],
                "pixels": hashlib.sha256(images[i].encode()).hexdigest() if i < len(images) else "unreadable"}
               for i, p in enumerate(points)]
    state: dict[str, Any] = {"regions": regions}
    if preview and len(images) > len(points):
        left, top, w, h = boxes[-1]
        state["preview"] = {"image": images[len(points)], "space": "screen", "left": left, "top": top,
                            "width": w, "height": h}
    return state


def _box(x: float, y: float, width: int, height: int, screen_w: int, screen_h: int) -> tuple[int, int, int, int]:
    """A `width` x `height` box centred on (x, y) as far as the screen lets it, inside the screen."""
    width, height = max(1, min(width, screen_w)), max(1, min(height, screen_h))
    left = min(max(0, int(x) - width // 2), screen_w - width)
    top = min(max(0, int(y) - height // 2), screen_h - height)
    return left, top, width, height


def _images(result: Any) -> list[str]:
    """The base64 PNG data of a result's image blocks, in order."""
    content = result.get("content", ()) if isinstance(result, dict) else ()
    return [block.get("data", "") for block in content if isinstance(block, dict) and block.get("type") == "image"]


def _exec_files(args: dict[str, Any]) -> dict[str, str]:
    """The program and the files its arguments name, found as the exec server finds them."""
    # imported when an exec is asked about: not on the runtime's way to its first answer
    from capabilities.exec.confinement import DEFAULT_PATH, default_cwd, desktop_identity, resolve_program

    who = desktop_identity()
    cwd = args.get("cwd") if isinstance(args.get("cwd"), str) else default_cwd(who)
    env = {**who.env, **(args.get("env") if isinstance(args.get("env"), dict) else {})}
    path = env.get("PATH") if isinstance(env.get("PATH"), str) else DEFAULT_PATH
    program = resolve_program(args["bin"], cwd, path)
    files = {args["bin"]: _digest(program) if program else "absent"}
    for arg in args.get("args") or ():
        if isinstance(arg, str) and arg and not arg.startswith("-") and len(arg) < 4096:
            candidate = os.path.join(cwd, arg)
            if os.path.isfile(candidate):
                files[arg] = _digest(candidate)
    return files


def _digest(path: str) -> str:
    """A regular file's SHA-256 (its size, time and inode past _HASH_LIMIT); anything else is
    named, never read: a script may name /dev/zero or a FIFO, which would hold a thread forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return f"not a regular file (mode {st.st_mode:o}, inode {st.st_ino})"
        if st.st_size > _HASH_LIMIT:
            return f"size {st.st_size}, modified {st.st_mtime_ns}, inode {st.st_ino}"
        digest, left = hashlib.sha256(), st.st_size  # what is there now: a file that keeps growing ends too
        try:
            while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                digest.update(chunk)
                left -= len(chunk)
        except OSError as exc:
            return f"unreadable ({exc.strerror})"
        return f"{digest.hexdigest()} ({st.st_size} bytes)"
