"""The session's egress policy for the pages `browser_execute` opens.

`refuse_egress` checks every `navigate` of a request before anything runs: a URL whose host is,
or resolves to, a refused address (link-local and cloud metadata ranges by default; see
`capabilities.egress`) refuses the whole request, naming the step, the address and the range.

This covers the URLs the model asks for. What a page does by itself (redirects, sub-resources,
`location = ...`, a name that resolves differently a moment later) is not seen here: the
session's firewall rejects the desktop user's packets to the same ranges (see
runtime/desktop/firewall.py), and Chromium runs as that user.
"""

from __future__ import annotations

from typing import Any

from capabilities.egress import RESOLVE_TIMEOUT_S, EgressConfigError, EgressPolicy, EgressRefused
from capabilities.egress import check_url_async as check_url
from capabilities.session import SessionInfo

from . import page_ops as ops
from .errors import Refused


async def refuse_egress(operations: list[Any], info: SessionInfo) -> Refused | None:
    """Why the request's navigations cannot run (a refused host, every one named), or None."""
    navigations = [(n, op.params.url) for n, op in enumerate(operations, start=1) if isinstance(op, ops.Navigate)]
    if not navigations:
        return None
    try:
        policy = EgressPolicy.from_session(info)
    except EgressConfigError as exc:
        return Refused(f"the session's egress settings are invalid ({exc}), so no page is opened; the operator "
                       f"fixes the egress entry of {info.data_dir}/session.json or starts the session again",
                       step=navigations[0][0], field="params.url")
    problems = []
    first: int | None = None
    for number, url in navigations:
        try:
            await check_url(policy, url)
        except EgressRefused as exc:
            problems.append(f"step {number} (navigate): {url} is not opened: {exc}")
            first = first or number
        except TimeoutError:
            problems.append(
                f"step {number} (navigate): the host of {url} did not resolve within {RESOLVE_TIMEOUT_S:g} s, "
                "so it could not be checked against the session's egress policy; check the name and try again")
            first = first or number
    if first is None:
        return None
    return Refused("; ".join(problems), step=first, field="params.url",
                   hint="nothing ran; the session's egress policy decides which addresses pages may reach")
