"""The exec tools' arguments: one pydantic model per tool, which both validates a call and
gives the JSON schema the caller sees, so the two cannot drift.

Every model forbids unknown fields and is strict about types (`"60"` is not a timeout), and
`refusal()` turns a validation failure into a message that names the fields and says what to do.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from capabilities.contract import OutputModel

# A timeout longer than the logs are kept would outlive its own record.
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600

# `<UTC date>-<UTC time>-<random hex>`: sortable, unique across restarts, safe as a file name.
ID_RE = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{8}$")
ID_HELP = "ids look like 20260101-120000-1a2b3c4d and are returned by exec"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _whole_number(value: Any) -> Any:
    # A JavaScript number crossing a bridge may arrive as 60.0; a whole one is still an integer.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _no_nul(value: str, what: str) -> str:
    if "\0" in value:
        raise ValueError(f"{what} cannot contain a NUL character")
    return value


class ExecRequest(_Request):
    """Start a program on the desktop, as the desktop's user, and return at once with
    {id, status: "started"}; follow it with stream_logs, search_logs and kill.

    No shell: `bin` is run directly and every item of `args` arrives exactly as written
    ("*.csv" and "$HOME" are not expanded). For pipes, redirection or globs run a shell as
    the program: {bin: "sh", args: ["-c", "ls *.csv | wc -l"], timeout: 10}.
    stdout and stderr share one log, kept 7 days. Programs get no keyboard input (stdin is
    empty). A program that cannot start reads failed:<reason> in stream_logs (e.g. failed:not found).
    Programs run unprivileged (no_new_privs, no capabilities, no sudo), with the desktop's
    environment plus `env`, and per-command caps: a log cap, 1024 processes and threads, 8 GiB
    of memory (past it: failed:out_of_memory).
    A command owns everything it starts: what it leaves running in the background is ended a
    second after its program exits, unless `detach` is true (for a program that hands its work
    to a background process, such as a launcher); then it runs until kill or the timeout, and
    stream_logs lists it in still_running.
    """

    bin: str = Field(min_length=1, description="The program: a name found on PATH, or a path")
    args: list[str] = Field(default_factory=list, description="Its arguments, each passed exactly as written")
    timeout: int = Field(
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        description="Seconds. Then the command and everything it started are killed",
    )
    cwd: str | None = Field(
        default=None, description="Working directory, an absolute path. Default: the home directory"
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Variables added to the desktop's environment"
    )
    detach: bool = Field(
        default=False,
        description="Keep what the program leaves running after it exits, until kill or the timeout",
    )

    _timeout = field_validator("timeout", mode="before")(_whole_number)

    @field_validator("bin")
    @classmethod
    def _bin(cls, value: str) -> str:
        return _no_nul(value, "bin")

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[str]) -> list[str]:
        for item in value:
            _no_nul(item, "an argument")
        return value

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, value: str | None) -> str | None:
        if value is None:
            return None
        _no_nul(value, "cwd")
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path (starting with /), got {value!r}")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, val in value.items():
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"{name!r} is not a valid variable name")
            _no_nul(val, f"the value of {name}")
        return value


class _ById(_Request):
    id: str = Field(description="The command's id, as returned by exec")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not ID_RE.match(value):
            raise ValueError(f"{value!r} is not an exec id ({ID_HELP})")
        return value


class StreamLogsRequest(_ById):
    """Read the command's output (stdout and stderr, one log) from a byte offset on.

    Returns {logs, next_offset, status, more}. Call again with offset=next_offset while status
    is "running"; `more: true` means the chunk was cut at its size limit and more is already on
    disk, so call again from next_offset even if the status is final.
    status is running, completed:<exit code>, timeout, cancelled or failed:<reason>.
    A command's log is capped (256 MiB unless the server was configured otherwise): past the cap
    the program runs on but its output is dropped, and the answer carries log_cut_at (the size
    the log was cut at) and a hint.
    """

    offset: int = Field(ge=0, description="Byte offset to read from: 0, then the previous next_offset")

    _offset = field_validator("offset", mode="before")(_whole_number)


class SearchLogsRequest(_ById):
    """Find the lines of the command's log that match a regular expression (Python syntax).

    Returns {matches: [{line, offset}], truncated}: each matching line's text and the byte
    offset where it starts (give it to stream_logs to read on from there). A search stops with
    an error after 5 seconds of matching (a pattern like (a+)+$ can take exponential time).
    When the log was cut at its size cap, log_cut_at says at how many bytes.
    """

    pattern: str = Field(min_length=1, description="A regular expression, searched in each line")

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        try:
            regex.compile(value)
        except regex.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class KillRequest(_ById):
    """Stop a running command and everything it started; its status becomes "cancelled".

    Returns {id, status}; a command that already ended keeps (and returns) its status, and
    what it left running in the background is stopped too.
    """


def refusal(tool: str, model: type[BaseModel], exc: ValidationError) -> str:
    """A message naming every bad field of a call and what the tool accepts."""
    accepted = ", ".join(
        name if field.is_required() else f"{name}?" for name, field in model.model_fields.items()
    )
    problems: list[str] = []
    unknown = False
    for err in exc.errors():
        field = ".".join(str(part) for part in err["loc"]) or "(arguments)"
        if err["type"] == "extra_forbidden":
            unknown = True
            problems.append(f"unknown field '{field}'")
        elif err["type"] == "missing":
            problems.append(f"missing required field '{field}'")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"field '{field}': {msg}")
    message = f"{tool} refused: {'; '.join(problems)}. {tool} accepts {{{accepted}}}."
    if tool == "exec" and unknown:
        message += (
            " There is no shell: put the program in bin and its arguments in args, or run a shell"
            ' as the program: {bin: "sh", args: ["-c", "ls *.csv | wc -l"], timeout: 10}.'
        )
    return message


# -- results: what each tool answers (its structured content and its JSON text) ---------------

Status = str
STATUS_DOC = "running, completed:<exit code>, timeout, cancelled or failed:<reason>"


class _Result(OutputModel):
    """An answer: optional fields are left out when unset (the contract's OutputModel)."""


class ExecResult(_Result):
    id: str = Field(description="The command's id: give it to stream_logs, search_logs and kill")
    status: Literal["started"] = Field(description="Always \"started\": the program's fate is read with stream_logs")


class _LogCut(_Result):
    log_cut_at: int | None = Field(default=None, description="Set when the log reached its cap: the size it was cut at, in bytes")
    hint: str | None = Field(default=None, description="What to do about a cut log or a truncated answer")


class StreamLogsResult(_LogCut):
    logs: str = Field(description="The output from offset on (stdout and stderr, one log)")
    next_offset: int = Field(description="The offset to read from next")
    status: Status = Field(description=STATUS_DOC)
    more: bool = Field(description="The chunk was cut at its size limit: call again from next_offset")
    still_running: list[str] | None = Field(
        default=None, description="Once the status is final: what the command left running, \"pid name\" each",
    )


class Match(_Result):
    line: str = Field(description="The matching line's text")
    offset: int = Field(description="The byte offset where the line starts (for stream_logs)")


class SearchLogsResult(_LogCut):
    matches: list[Match] = Field(description="The matching lines, in order")
    truncated: bool = Field(description="Only the first matches are listed")


class KillResult(_Result):
    id: str = Field(description="The command's id")
    status: Status = Field(description="\"cancelled\", or the status it had already ended with")
