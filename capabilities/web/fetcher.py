"""HTTP GET under the session's egress policy, with a size cap and a total time cap.

`PageFetcher.get` follows redirects itself (httpx's own following is off) so that every hop is
checked against the policy before a connection is made: a page that redirects to
169.254.169.254 is refused at that hop, named. Names are resolved for the check; the session's
firewall rejects the desktop user's packets to the same ranges whatever a name resolves to a
moment later (this server runs as that user).

Caps, both ending the read with a clear `cut_off` message rather than an error when part of the
body has arrived:
- size: at most `max_bytes` of the (decoded) body are kept, `CODEDESK_WEB_MAX_BYTES` (10 MiB);
- time: the whole fetch, redirects included, ends after `timeout` seconds (each call's own,
  30 s by default, at most 120).

Each call has its own cookie jar (none is kept between calls) and ignores proxy variables; the
connection pool is shared.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import httpx

from capabilities.egress import EgressConfigError, EgressPolicy, EgressRefused, check_url_async
from capabilities.session import SessionNotFound, read_session

from .errors import FetchFailed, InvalidUrl, Refused, TimedOut, Unreachable

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 120.0
MAX_REDIRECTS = 10
USER_AGENT = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/130.0 Safari/537.36 codedesk-web")

_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def max_bytes() -> int:
    """The body size cap, from `CODEDESK_WEB_MAX_BYTES`."""
    return int(os.environ.get("CODEDESK_WEB_MAX_BYTES", DEFAULT_MAX_BYTES))


def session_policy() -> EgressPolicy:
    """The session's egress policy (the defaults when no session is running).

    Raises:
        Refused: the session's egress entry is malformed (nothing is fetched then).
    """
    try:
        info = read_session()
    except SessionNotFound:
        return EgressPolicy()
    try:
        return EgressPolicy.from_session(info)
    except EgressConfigError as exc:
        raise Refused(f"the session's egress settings are invalid ({exc}), so nothing is fetched; the operator "
                      f"fixes the egress entry of {info.data_dir}/session.json") from exc


@dataclass(frozen=True, kw_only=True)
class Fetched:
    """A response: its body (perhaps cut off) and where it came from."""

    url: str
    final_url: str
    status: int
    headers: httpx.Headers
    body: bytes
    redirects: list[str] = field(default_factory=list)
    cut_off: str | None = None

    @property
    def media_type(self) -> str:
        """The Content-Type's media type, lower case ("" when absent)."""
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    def text(self) -> str:
        """The body decoded: the charset of the Content-Type, else of a `<meta charset>`, else
        UTF-8; undecodable bytes become U+FFFD."""
        charset = httpx.Response(200, headers=self.headers).charset_encoding
        if charset is None:
            found = _CHARSET.search(self.body[:4096])
            charset = found.group(1).decode("ascii") if found else "utf-8"
        try:
            return self.body.decode(charset, errors="replace")
        except LookupError:  # a charset Python does not know
            return self.body.decode("utf-8", errors="replace")


class PageFetcher:
    """The server's HTTP client: one connection pool, a fresh cookie jar per call."""

    def __init__(self, policy: Callable[[], EgressPolicy] = session_policy) -> None:
        self._policy = policy
        self._transport = httpx.AsyncHTTPTransport(retries=0)

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def get(self, url: str, *, timeout: float, accept: str, limit: int | None = None,
                  headers: dict[str, str] | None = None) -> Fetched:
        """GET `url`, following redirects, each checked against the egress policy.

        Raises:
            InvalidUrl, Refused, Unreachable, TimedOut (nothing arrived in time), FetchFailed.
        """
        limit = max_bytes() if limit is None else limit
        policy = self._policy()
        client = httpx.AsyncClient(transport=self._transport, trust_env=False, follow_redirects=False,
                                   timeout=httpx.Timeout(timeout),
                                   headers={"User-Agent": USER_AGENT, "Accept": accept, **(headers or {})})
        redirects: list[str] = []
        body = bytearray()
        reading: httpx.Response | None = None  # the response whose body is being read
        current = url
        with anyio.move_on_after(timeout):
            for _ in range(MAX_REDIRECTS + 1):
                await _check(policy, current, url, redirects)
                try:
                    response = await client.send(client.build_request("GET", current), stream=True)
                except httpx.InvalidURL as exc:
                    raise InvalidUrl(f"{current} is not a URL that can be fetched ({exc})") from exc
                except httpx.TimeoutException as exc:
                    raise TimedOut(f"{current} did not answer within {timeout:g} s",
                                   hint="try again later, or with a larger timeout") from exc
                except httpx.HTTPError as exc:
                    raise Unreachable(f"cannot reach {current}: {type(exc).__name__}: {exc or 'no detail'}",
                                      hint="check the URL; the host may be down or the name wrong") from exc
                try:
                    location = response.next_request.url if response.next_request is not None else None
                    if location is not None:
                        current = str(location)
                        redirects.append(current)
                        continue
                    reading = response
                    cut_off = await _read(response, body, limit)
                finally:
                    with anyio.CancelScope(shield=True):
                        await response.aclose()
                return _fetched(url, response, body, redirects, cut_off)
            raise FetchFailed(f"{url} redirected more than {MAX_REDIRECTS} times (last to {current})",
                              hint="the site loops; open it with browser_execute to see where it goes")
        if reading is None:
            raise TimedOut(f"{url} did not answer within {timeout:g} s (the whole fetch, redirects included)",
                           hint="try again later, or with a larger timeout")
        return _fetched(url, reading, body, redirects,
                        f"the page did not finish within {timeout:g} s: the content is the first "
                        f"{len(body):,} bytes that arrived by then (call again with a larger timeout for more)")


async def _check(policy: EgressPolicy, url: str, asked: str, redirects: list[str]) -> None:
    if _scheme(url) not in ("http", "https"):
        via = f" ({asked} redirected there)" if redirects else ""
        raise InvalidUrl(f"{url} is not an http:// or https:// URL{via}; only web pages are fetched",
                         hint="for files on the desktop use documents or exec")
    try:
        await check_url_async(policy, url)
    except EgressRefused as exc:
        if redirects:
            raise Refused(f"{asked} redirected to {url}, which is not followed: {exc}",
                          hint="nothing past the refused hop was fetched") from exc
        raise Refused(f"{url} is not fetched: {exc}") from exc
    except TimeoutError as exc:
        raise TimedOut(f"the host of {url} did not resolve in time, so it could not be checked against "
                       "the session's egress policy", hint="check the name and try again") from exc


def _scheme(url: str) -> str | None:
    try:
        return httpx.URL(url).scheme
    except httpx.InvalidURL:
        return None


async def _read(response: httpx.Response, body: bytearray, limit: int) -> str | None:
    """Read the body into `body`, at most `limit` bytes; the cut-off message when it is cut."""
    async for chunk in response.aiter_bytes():
        room = limit - len(body)
        if len(chunk) > room:
            body.extend(chunk[:room])
            return (f"the page is larger than the {limit:,}-byte cap (CODEDESK_WEB_MAX_BYTES): the content "
                    f"is its first {limit:,} bytes; the rest was not downloaded")
        body.extend(chunk)
    return None


def _fetched(url: str, response: httpx.Response, body: bytearray, redirects: list[str],
             cut_off: str | None) -> Fetched:
    return Fetched(url=url, final_url=str(response.url), status=response.status_code, headers=response.headers,
                   body=bytes(body), redirects=redirects, cut_off=cut_off)
