"""`search`: ripgrep over the desktop user's files, with context, sorted and paged.

ripgrep (`rg`, Debian's package) does the walking and matching, with its own semantics: a
Rust regular expression, hidden files and what `.gitignore` files exclude are skipped, binary
files are skipped. Its JSON output is read as it comes; the matches are sorted by path and line
so that pages (`offset`) follow one another whatever order ripgrep's threads found them in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from pydantic import Field

from capabilities.contract import current_cancellation

from .errors import InvalidRequest, NotFound, Unavailable
from .tooling import PATH_DOC, READ_ONLY, Answer, Args, FilesState, Output, files_tool

SEARCH_CAP = 20_000
"""Matches read from ripgrep at most; past it the answer says the count is a floor."""
SEARCH_SECONDS = 60
ERRORS_SHOWN = 10
LINE_CHARS = 500
"""A matching or context line longer than this is shown cut."""


class SearchArgs(Args):
    """Search file contents with ripgrep, with context lines, a page at a time.

    pattern is a regular expression (Rust syntax); hidden and .gitignored files are skipped, as
    ripgrep does; matches come sorted by path and line."""

    pattern: str = Field(min_length=1, description="A regular expression, e.g. 'def \\w+\\('.")
    root: str = Field("~", description="The folder (or file) to search. " + PATH_DOC)
    glob: str | None = Field(None, min_length=1, description="Only files whose path (relative to root) matches, "
                             "e.g. '*.py' or 'src/**' ('!' first to exclude).")
    context: int = Field(0, ge=0, le=20, description="Lines shown before and after each match.")
    max: int = Field(100, ge=1, le=1000, description="Matches per page.")
    offset: int = Field(0, ge=0, description="Matches to skip: 0, or a page's next_offset.")
    case_insensitive: bool = Field(False, description="Ignore case.")


class Match(Output):
    path: str
    line: int
    text: str = Field(description="The matching line.")
    before: list[str] | None = Field(None, description="The context lines before it.")
    after: list[str] | None = Field(None, description="The context lines after it.")


class SearchResult(Output):
    root: str
    matches: list[Match]
    total: int = Field(description=f"Matches found (at most {SEARCH_CAP}).")
    files: int = Field(description="Files with a match.")
    next_offset: int | None = Field(None, description="Present when matches follow: pass it as offset.")
    truncated: bool | None = Field(None, description=f"ripgrep found more than {SEARCH_CAP}: narrow the search.")
    skipped: list[str] | None = Field(None, description="What ripgrep could not read (e.g. permission denied).")


def _text(data: dict) -> str:
    text = data.get("text")
    if text is None:  # not UTF-8: ripgrep sends the bytes in base64
        return "(not UTF-8)"
    text = text.rstrip("\n").removesuffix("\r")
    return text if len(text) <= LINE_CHARS else text[:LINE_CHARS] + " […]"


def search(state: FilesState, args: SearchArgs) -> Answer:
    root = state.path(args.root, "root")
    program = shutil.which("rg")
    if program is None:
        raise Unavailable("ripgrep (rg) is not installed", hint="install the Debian package ripgrep (make install)")
    if not root.exists():
        raise NotFound(f"{str(root)!r} does not exist", hint="give an existing folder as root", field="root")
    command = [program, "--json", "--no-config", "--context", str(args.context)]
    if args.case_insensitive:
        command.append("--ignore-case")
    if args.glob:
        command += ["--glob", args.glob]
    # Run in the root (or a file's folder) so globs match paths relative to it, as written.
    folder, target = (root, ".") if root.is_dir() else (root.parent, root.name)
    command += ["--regexp", args.pattern, "--", target]
    matches, truncated, said, refused = _run(command, args.context, folder)
    if refused:
        raise InvalidRequest(f"ripgrep refused the search: {' '.join(said)[:1000]}",
                             hint="check the pattern's syntax (Rust regex) and the glob", field="pattern")
    matches.sort(key=lambda m: (m.path, m.line))
    page = matches[args.offset:args.offset + args.max]
    following = args.offset + args.max if args.offset + args.max < len(matches) else None
    result = SearchResult(root=str(root), matches=page, total=len(matches), files=len({m.path for m in matches}),
                          next_offset=following, truncated=truncated or None,
                          skipped=said[:ERRORS_SHOWN] or None)
    more = f"; more from offset {following}" if following else ""
    return Answer(result, f"{args.pattern!r} in {root}: {len(matches)} matches in {result.files} files{more}")


def _run(command: list[str], context: int, folder: Path) -> tuple[list[Match], bool, list[str], bool]:
    """Run ripgrep and gather its matches with their context: (matches, cut at the cap, what it
    said on stderr, whether it refused the request itself)."""
    cancellation = current_cancellation()
    matches: list[Match] = []
    truncated = False
    # In the current file: the context lines since the last match, and that match (for its after).
    recent: list[tuple[int, str]] = []
    last: Match | None = None
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: many complaints cannot stall it
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                                   cwd=folder)
        assert process.stdout is not None
        with process.stdout, cancellation.on_cancel(process.kill):
            for raw in process.stdout:
                if raw.startswith((b'{"type":"begin"', b'{"type":"end"')):
                    recent, last = [], None
                    continue
                is_match = raw.startswith(b'{"type":"match"')
                if not is_match and not raw.startswith(b'{"type":"context"'):
                    continue
                data = json.loads(raw)["data"]
                number = data.get("line_number") or 0
                text = _text(data["lines"])
                if not is_match:
                    if last is not None and number - last.line <= context:
                        last.after = [*(last.after or []), text]
                    recent.append((number, text))
                    continue
                before = [line for n, line in recent if number - n <= context]
                last = Match(path=os.path.normpath(folder / data["path"].get("text", "(not UTF-8)")), line=number, text=text,
                             before=before or None)
                recent = []
                matches.append(last)
                if len(matches) >= SEARCH_CAP:
                    truncated = True
                    process.kill()
                    break
            try:
                process.wait(timeout=SEARCH_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        cancellation.check()
        stderr.seek(0)
        said = [line for line in stderr.read().decode("utf-8", "replace").splitlines() if line.strip()]
    # 0: matches, 1: none, 2: an error: a request it refused, or files it could not read.
    refused = process.returncode == 2 and any("regex" in line or "glob" in line for line in said)
    return matches, truncated, said, refused


TOOLS = [
    files_tool(name="search", description=SearchArgs.__doc__ or "", args=SearchArgs, output=SearchResult, run=search,
               annotations=READ_ONLY),
]
