"""The exec server's errors: every one becomes an `isError` result (capabilities.contract) whose
message says what to do; the class decides the error's kind and the field at fault.

    ExecError            kind           field
    ├── RequestRefused   not_found      cwd      the call cannot run as asked (e.g. cwd missing)
    ├── UnknownCommand   not_found      id       no command with this id (never returned by exec,
    │                                            or pruned after 7 days)
    ├── OffsetPastEnd    invalid_arguments offset  an offset beyond the end of the log
    ├── PatternTooSlow   timeout        pattern  search_logs gave up on a slow pattern
    └── StoreUnavailable unavailable             the log store cannot be used (no session)

Arguments that do not fit a tool's model never get this far: they are refused from the
pydantic validation error (see `requests.refusal`).
"""


from capabilities.contract import CapabilityError


class ExecError(CapabilityError):
    """A call the exec server refuses; the message names the field and the way forward."""


class RequestRefused(ExecError):
    kind, field = "not_found", "cwd"


class UnknownCommand(ExecError):
    kind, field = "not_found", "id"


class OffsetPastEnd(ExecError):
    kind, field = "invalid_arguments", "offset"


class PatternTooSlow(ExecError):
    kind, field = "timeout", "pattern"


class StoreUnavailable(ExecError):
    kind = "unavailable"
