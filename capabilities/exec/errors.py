"""The exec server's errors: every one becomes an `isError` result whose message says what to do.

    ExecError
    ├── RequestRefused   the call is well-formed but cannot run as asked (e.g. cwd missing)
    ├── UnknownCommand   no command with this id (never returned by exec, or pruned after 7 days)
    ├── OffsetPastEnd    stream_logs asked for an offset beyond the end of the log
    └── PatternTooSlow   search_logs gave up on a pattern that took too long to match

Arguments that do not fit a tool's model never get this far: they are refused from the
pydantic validation error (see `requests.refusal`).
"""


class ExecError(Exception):
    """A call the exec server refuses; the message names the field and the way forward."""


class RequestRefused(ExecError):
    pass


class UnknownCommand(ExecError):
    pass


class OffsetPastEnd(ExecError):
    pass


class PatternTooSlow(ExecError):
    pass
