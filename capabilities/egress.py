"""Where pages and programs of the desktop may connect: the session's egress policy.

Link-local and cloud metadata addresses (`DEFAULT_DENY`) are refused by default: a page or a
program that reaches 169.254.169.254 on a cloud machine reads the machine's credentials.
Loopback and private ranges stay reachable (the session's own servers live there). The
operator adds ranges in `session.json`:

    {"egress": {"deny": ["cidr", ...], "allow": ["cidr", ...]}}

An operator's deny always applies; an allow only lifts the default deny, for exactly the
ranges it lists. Absent, the defaults apply alone.

Two layers enforce it: the browser server checks each URL it is asked to open (`check_url`),
and the session's firewall (runtime/desktop/firewall.py) rejects the desktop user's packets to
the denied ranges, whatever a page or program does after that (redirects, sub-resources,
`location = ...`, DNS that changes its answer).

Errors: `EgressRefused` (a host is in a refused range; the message names the address, the
range and what the operator can do) and `EgressConfigError` (the session's `egress` entry is
malformed), both `ValueError`s.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

import anyio
import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str], Iterable[str]]

DEFAULT_DENY: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("169.254.0.0/16"),  # IPv4 link-local; AWS, GCP, Azure, ... metadata
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS metadata over IPv6
    ipaddress.ip_network("fe80::/10"),  # IPv6 link-local
)

ALLOW_FLAG = "codedesk desktop up --egress-allow"

RESOLVE_TIMEOUT_S = 10.0
"""How long `check_url_async` waits for a name to resolve before giving up (TimeoutError)."""

# Schemes whose URLs make Chromium open a connection to their host.
_NETWORK_SCHEMES = frozenset({"http", "https", "ws", "wss", "ftp"})
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


class EgressRefused(ValueError):
    """A host is, or resolves to, an address in a refused range.

    Attributes: host (as given), address (the refused one), network (the range it is in),
    by_default (True: the default deny; False: the operator's deny list).
    """

    def __init__(self, host: str, address: IPAddress, network: IPNetwork, by_default: bool) -> None:
        self.host, self.address, self.network, self.by_default = host, address, network, by_default
        named = "" if _same_host(host, address) else f" (the host {host} stands for {address})"
        if by_default:
            why = (f"it is in {network}, a link-local or cloud metadata range, refused by default so that "
                   "pages and programs cannot read the machine's credentials; if this session must reach it, "
                   f"the operator starts it with `{ALLOW_FLAG} {_single(address)}` (or a wider range)")
        else:
            why = (f"it is in {network}, which the session's operator denies (egress.deny in session.json); "
                   "only the operator can lift that, by starting the session without that --egress-deny range")
        super().__init__(f"connections to {address} are refused{named}: {why}")


class EgressConfigError(ValueError):
    """The `egress` entry of session.json (or a command-line range) is not valid."""


@dataclass(frozen=True)
class EgressPolicy:
    """The operator's deny and allow ranges; `DEFAULT_DENY` applies on top of them.

    `deny` always refuses; `allow` only lifts `DEFAULT_DENY` for the ranges it lists.
    """

    deny: tuple[IPNetwork, ...] = ()
    allow: tuple[IPNetwork, ...] = ()

    # ---- building

    @classmethod
    def parse(cls, deny: Iterable[str] = (), allow: Iterable[str] = ()) -> EgressPolicy:
        """A policy from CIDR strings (command line or session.json); host bits are dropped
        ("169.254.169.254/16" means 169.254.0.0/16).

        Raises:
            EgressConfigError: an entry is not an IP address or CIDR range.
        """
        return cls(deny=_networks(deny, "deny"), allow=_networks(allow, "allow"))

    @classmethod
    def from_config(cls, config: Any) -> EgressPolicy:
        """A policy from session.json's `egress` value: {"deny": [...], "allow": [...]}, or
        None for the defaults alone.

        Raises:
            EgressConfigError: the value is not of that shape.
        """
        if config is None:
            return cls()
        if not isinstance(config, dict):
            raise EgressConfigError(f'egress must be an object {{"deny": [...], "allow": [...]}}, not {config!r}')
        unknown = sorted(set(config) - {"deny", "allow"})
        if unknown:
            raise EgressConfigError(f"egress has unknown field {unknown[0]!r}; it takes only 'deny' and 'allow'")
        lists = {}
        for key in ("deny", "allow"):
            value = config.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise EgressConfigError(f"egress.{key} must be a list of CIDR strings, not {value!r}")
            lists[key] = value
        return cls.parse(deny=lists["deny"], allow=lists["allow"])

    @classmethod
    def from_session(cls, info: Any) -> EgressPolicy:
        """The policy of a session (`SessionInfo`): its `extra["egress"]`, defaults when absent.

        Raises:
            EgressConfigError: the session's egress entry is malformed.
        """
        return cls.from_config(info.extra.get("egress"))

    def to_config(self) -> dict[str, list[str]]:
        """The value to write as session.json's `egress` (the operator's ranges only)."""
        return {"deny": [str(n) for n in self.deny], "allow": [str(n) for n in self.allow]}

    # ---- deciding

    def refuses(self, ip: str | IPAddress) -> bool:
        """Whether connections to `ip` are refused."""
        return self._refusal(_address(ip)) is not None

    def check_address(self, address: str | IPAddress, host: str | None = None) -> None:
        """Raise `EgressRefused` if `address` (reached by the name `host`) is refused."""
        address = _address(address)
        found = self._refusal(address)
        if found is not None:
            raise EgressRefused(host or str(address), *found)

    def _refusal(self, address: IPAddress) -> tuple[IPAddress, IPNetwork, bool] | None:
        """(the address judged, the range refusing it, whether it is the default deny), or
        None. An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is judged as the IPv4 address too:
        the kernel connects to that one."""
        candidates = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)
        for candidate in candidates:
            hit = _first(self.deny, candidate)
            if hit is not None:
                return candidate, hit, False
        for candidate in candidates:
            if _first(self.allow, candidate) is not None:
                continue
            hit = _first(DEFAULT_DENY, candidate)
            if hit is not None:
                return candidate, hit, True
        return None

    def check_host(self, host: str, resolve: Resolver | None = None) -> tuple[IPAddress, ...]:
        """Check every address `host` stands for; returns them.

        `host` is a URL's host as written: an IP literal in any form a browser accepts
        (169.254.169.254, 0xa9fea9fe, 2852039166, 0251.0376.0251.0376, [::ffff:169.254.169.254],
        percent-escaped or full-width), or a name, resolved with `resolve` (default: the
        system's resolver, all addresses). A name that does not resolve returns () (the
        connection will fail by itself).

        Raises:
            EgressRefused: one of its addresses is refused.
        """
        name = canonical_host(host)
        if name is None:
            return ()
        literal = literal_address(name)
        if literal is not None:
            self.check_address(literal, host)
            return (literal,)
        addresses = []
        for text in (resolve or resolve_host)(name):
            try:
                address = ipaddress.ip_address(text)
            except ValueError:
                continue
            self.check_address(address, host)
            addresses.append(address)
        return tuple(addresses)

    def check_url(self, url: str, resolve: Resolver | None = None) -> tuple[IPAddress, ...]:
        """Check the host a URL would make a browser connect to (none for about:, data:,
        file:, ...); returns its addresses.

        Raises:
            EgressRefused: the host is, or resolves to, a refused address.
        """
        host = url_host(url)
        return () if host is None else self.check_host(host, resolve)


async def check_url_async(policy: EgressPolicy, url: str, timeout: float = RESOLVE_TIMEOUT_S) -> None:
    """`policy.check_url` for async servers: a literal address is judged at once, a name is
    resolved on a worker thread.

    Raises:
        EgressRefused: loading `url` would connect to a refused address.
        TimeoutError: the host did not resolve within `timeout` seconds.
    """
    host = url_host(url)
    name = canonical_host(host) if host is not None else None
    if name is None:
        return
    literal = literal_address(name)
    if literal is not None:
        policy.check_address(literal, host)
        return
    with anyio.fail_after(timeout):
        await anyio.to_thread.run_sync(policy.check_host, host, abandon_on_cancel=True)


# ---- hosts the way a browser reads them (WHATWG URL standard)


def url_host(url: str) -> str | None:
    """The host a browser connects to for `url`, as written (not yet canonical), or None when
    loading it opens no connection (about:, data:, file:, javascript:, blob:, ...).

    Follows the URL standard where Python's urllib does not: tabs and newlines are dropped,
    backslashes are slashes, `http:host` needs no slashes, and `view-source:` loads the URL
    it wraps."""
    text = url.strip("\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13"
                     "\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f ")
    text = re.sub(r"[\t\n\r]", "", text)
    while True:
        scheme, sep, rest = text.partition(":")
        if not sep or not _SCHEME.fullmatch(scheme):
            return None
        scheme = scheme.lower()
        if scheme == "view-source":
            text = rest
            continue
        break
    if scheme not in _NETWORK_SCHEMES:
        return None
    rest = rest.replace("\\", "/").lstrip("/")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    hostport = authority.rpartition("@")[2]
    if hostport.startswith("["):
        end = hostport.find("]")
        return hostport[: end + 1] if end != -1 else hostport
    return hostport.partition(":")[0]


def canonical_host(host: str) -> str | None:
    """A URL host as a browser canonicalises it: percent-escapes decoded, Unicode mapped
    (UTS #46: full-width digits and dots, ignored characters dropped), lower case, and an
    IPv4 host in any of its numeric forms written as a dotted quad. None for an empty host."""
    if host.startswith("[") and host.endswith("]"):
        return host.lower()
    try:
        text = unquote_to_bytes(host).decode("utf-8")
    except UnicodeDecodeError:
        text = host
    try:
        text = idna.uts46_remap(text, std3_rules=False, transitional=False)
    except (idna.IDNAError, UnicodeError, ValueError):
        pass  # a host the browser would refuse anyway; judged as written
    text = text.replace("\u3002", ".").lower()
    if not text:
        return None
    ipv4 = _whatwg_ipv4(text)
    return str(ipv4) if ipv4 is not None else text


def literal_address(host: str) -> IPAddress | None:
    """The address a canonical host names literally ([v6] or a dotted quad), else None."""
    if host.startswith("[") and host.endswith("]"):
        try:
            return ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return None
    try:
        return ipaddress.IPv4Address(host)
    except ValueError:
        return None


def resolve_host(name: str) -> list[str]:
    """All addresses the system resolver gives for `name` ([] when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError, OSError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _whatwg_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The URL standard's IPv4 parser: 1 to 4 parts, each decimal, 0x-hex or 0-octal, the
    last filling the remaining bytes ("169.254.43518", "0xa9fea9fe")."""
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not 1 <= len(parts) <= 4:
        return None
    numbers = []
    for part in parts:
        number = _ipv4_number(part)
        if number is None:
            return None
        numbers.append(number)
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        return None
    value = numbers[-1]
    for index, n in enumerate(numbers[:-1]):
        value += n * 256 ** (3 - index)
    return ipaddress.IPv4Address(value)


def _ipv4_number(part: str) -> int | None:
    if part[:2] in ("0x", "0X"):
        digits, base = part[2:], 16
    elif len(part) > 1 and part[0] == "0":
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    if digits == "":
        return 0 if base != 10 else None
    try:
        return int(digits, base) if digits.isascii() and digits.isalnum() else None
    except ValueError:
        return None


def _networks(values: Iterable[str], which: str) -> tuple[IPNetwork, ...]:
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except (ValueError, TypeError) as exc:
            raise EgressConfigError(
                f"egress {which} range {value!r} is not an IP address or CIDR range "
                "(such as 169.254.169.254/32 or fd00::/8)") from exc
    return tuple(networks)


def _address(ip: str | IPAddress) -> IPAddress:
    return ipaddress.ip_address(ip) if isinstance(ip, str) else ip


def _first(networks: Iterable[IPNetwork], address: IPAddress) -> IPNetwork | None:
    return next((n for n in networks if n.version == address.version and address in n), None)


def _single(address: IPAddress) -> str:
    return f"{address}/{address.max_prefixlen}"


def _same_host(host: str, address: IPAddress) -> bool:
    return host.strip("[]").lower() == str(address)
