"""The timeline as a file: JSON Lines (one entry a line), or a self-contained HTML report whose
screenshots are inline as data URLs, readable with no server and no network."""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable
from typing import Any

from .store import BASE64_SUFFIX, TimelineReader

MAX_INLINE_IMAGES = 200
"""Screenshots past this many are named in the report, not inlined (the file stays openable)."""


def jsonl(entries: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(entry, ensure_ascii=False) + "\n" for entry in entries)


def html_report(reader: TimelineReader, entries: list[dict[str, Any]], title: str,
                videos: list[tuple[str, float, float]] = ()) -> str:
    """The report: one section a run, one row a step (its arguments, answer and screenshots);
    `videos` (path, start, end) are the screen video's segments of the same time, linked."""
    inlined = 0
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>", _CSS, "</style></head><body>", f"<h1>{html.escape(title)}</h1>",
             f"<p class='meta'>{len(entries)} entries</p>"]
    if videos:
        parts.append("<p class='video'>Screen video: " + ", ".join(
            f"<a href='file://{html.escape(path)}'>{html.escape(path.rsplit('/', 1)[-1])}</a> "
            f"({time.strftime('%H:%M:%S', time.localtime(start))}–{time.strftime('%H:%M:%S', time.localtime(end))})"
            for path, start, end in videos) + "</p>")
    for entry in entries:
        kind = entry["kind"]
        if kind == "input":
            detail = entry.get("detail", {})
            parts.append(f"<p class='input'>A person used the screen at the viewer: {detail.get('inputs', 0)} "
                         f"input event(s) · {entry['iso_time']}</p>")
            continue
        if kind == "run_start":
            detail = entry.get("detail", {})
            parts.append(f"<section class='run' id='run-{html.escape(entry['run'])}'><h2>Run {html.escape(entry['run'])}"
                         f" <small>{html.escape(detail.get('language', ''))} · {entry['iso_time']}"
                         f"{' · replay of ' + html.escape(str(detail['replay_of'])) if detail.get('replay_of') else ''}"
                         f"</small></h2>")
            if detail.get("script"):
                parts.append(f"<details><summary>script</summary><pre class='script'>"
                             f"{html.escape(detail['script'])}</pre></details>")
            continue
        if kind == "run_end":
            detail = entry.get("detail", {})
            outcome = detail.get("outcome", "")
            parts.append(f"<p class='end {html.escape(outcome)}'>Run {html.escape(entry['run'])} ended: "
                         f"<b>{html.escape(outcome)}</b> after {detail.get('calls', 0)} calls"
                         f"{': ' + html.escape(entry.get('error_message', '')) if entry.get('error_message') else ''}"
                         f"</p>")
            continue
        if kind == "approval":
            detail = entry.get("detail", {})
            parts.append(f"<p class='approval'>#{entry['seq']} {html.escape(entry.get('server', ''))}."
                         f"{html.escape(entry.get('tool', ''))}: approval <b>{html.escape(str(detail.get('answer', '')))}"
                         f"</b> (policy rule {html.escape(str(detail.get('rule', '')))}) · {entry['iso_time']}</p>")
            continue
        status = entry.get("status", "")
        shots = []
        for path in entry.get("screenshots", []):
            data = reader.image_base64(path) if inlined < MAX_INLINE_IMAGES else None
            if data is None:
                shots.append(f"<span class='missing'>{html.escape(path)}</span>")
                continue
            inlined += 1
            mime = "image/jpeg" if path.removesuffix(BASE64_SUFFIX).endswith(".jpg") else "image/png"
            shots.append(f"<img class='shot' alt='{html.escape(path)}' src='data:{mime};base64,{data}'>")
        error = (f"<div class='error'>{html.escape(entry.get('error_kind', ''))}: "
                 f"{html.escape(entry.get('error_message', ''))}</div>") if status == "error" else ""
        parts.append(
            f"<div class='step {html.escape(status)}' data-run='{html.escape(entry['run'])}' data-seq='{entry['seq']}'>"
            f"<div class='head'><span class='seq'>#{entry['seq']}</span> "
            f"<span class='tool'>{html.escape(entry.get('server', ''))}.{html.escape(entry.get('tool', ''))}</span> "
            f"<span class='status'>{html.escape(status)}</span> <span class='time'>{entry['iso_time']}"
            f"{' · %.0f ms' % entry['duration_ms'] if entry.get('duration_ms') is not None else ''}"
            f" · controls: {html.escape(entry.get('controls', ''))}"
            f"{' · line %d of the script' % entry['detail']['line'] if isinstance((entry.get('detail') or {}).get('line'), int) else ''}"
            f"</span></div>"
            f"<pre class='args'>{html.escape(json.dumps(entry.get('arguments'), ensure_ascii=False, indent=1))}</pre>"
            f"{error}<pre class='summary'>{html.escape(entry.get('summary', ''))}</pre>{''.join(shots)}</div>")
    parts.append("</body></html>")
    return "".join(parts)


_CSS = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h2{border-bottom:1px solid #ccc;margin-top:2em}h2 small{color:#777;font-weight:normal}
.step{border-left:4px solid #4a4;padding:.3em .8em;margin:.6em 0;background:#f8f8f8}
.step.error{border-color:#c33}.step.pending{border-color:#aa3}
.head .seq{font-weight:bold}.head .tool{font-family:monospace}.head .time{color:#777}
pre{white-space:pre-wrap;max-height:16em;overflow:auto;margin:.3em 0;font-size:12px}
.error{color:#c33}.shot{max-width:640px;display:block;border:1px solid #ccc;margin:.3em 0}
.end.error{color:#c33}.meta{color:#777}.input{color:#a50}
"""
