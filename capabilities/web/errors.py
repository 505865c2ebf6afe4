"""The errors the web tools raise: one root, one subclass per kind of failure.

    WebError               the root: a failure the caller can act on        kind
    ├── InvalidUrl         not an http(s) URL                               invalid_arguments
    ├── Refused            the egress policy refuses the URL or a redirect  refused
    ├── Unreachable        DNS, connection or TLS failure; Chromium down    unavailable
    ├── TimedOut           nothing arrived within the time cap              timeout
    ├── NotThisKind        the body is not what the tool reads (an image    failed
    │                      for fetch, a page for fetch_image)
    ├── FetchFailed        too many redirects, a broken response            failed
    └── NoSearchProvider   no search provider is configured                 unavailable

Lower-layer exceptions (httpx, Playwright, Pillow, the MCP client) are translated into these
with `raise ... from exc`; `web_tool` in `tooling.py` turns a `WebError` into the contract's
`ToolError` in one place.
"""

from __future__ import annotations

from capabilities.contract import CapabilityError


class WebError(CapabilityError):
    """A failure the caller can act on; `message` and `hint` are shown to the model as they are."""

    field = "url"


class InvalidUrl(WebError):
    kind = "invalid_arguments"


class Refused(WebError):
    kind = "refused"


class Unreachable(WebError):
    kind = "unavailable"


class TimedOut(WebError):
    kind = "timeout"


class NotThisKind(WebError):
    kind = "failed"


class FetchFailed(WebError):
    kind = "failed"


class NoSearchProvider(WebError):
    kind = "unavailable"
    field = None
