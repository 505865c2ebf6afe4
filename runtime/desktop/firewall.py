"""The session's egress policy in the kernel: nftables rules for the desktop user's packets.

The browser server refuses URLs whose host is denied (`capabilities.egress`), but a page can
still navigate itself, redirect, load sub-resources or rebind a name, and a program `exec`
starts connects wherever it likes. These rules are the backstop: every packet a process of
the desktop user sends (`meta skuid`) to a denied range is rejected (TCP with a reset, so a
connection fails at once with "connection refused"; anything else with ICMP
admin-prohibited).

Layout, all in one table of its own (`inet codedesk_egress`, so nothing else of the host's
firewall is touched):

    chain output   hook output; `meta skuid vmap @uid_chains`: each filtered uid jumps to its chain
    chain uid_<N>  the user's servers' replies pass (ct direction reply); then the operator's
                   deny ranges are rejected, the allow ranges return, and the default deny
                   ranges are rejected; every packet, not only a connection's first.

Applying is one atomic `nft -f` transaction that flushes the uid's chain and writes it anew, so
applying again replaces the rules. Root's and other users' packets are not filtered.

Neither function raises for an environment that cannot have the rules (not root, no `nft`, no
CAP_NET_ADMIN): they return a one-line reason for the caller to log or print.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterable

from capabilities.egress import DEFAULT_DENY, EgressPolicy, IPNetwork

TABLE = "codedesk_egress"
NFT_TIMEOUT_S = 15
PACKAGE = "nftables"


def apply_egress_firewall(uid: int, policy: EgressPolicy) -> str | None:
    """Install (or replace) the rules refusing the desktop user `uid` the policy's denied
    ranges. Returns None when applied, else why not, in one line."""
    problem = _cannot_run()
    if problem is not None:
        return problem
    return _nft(nft_script(uid, policy), "apply the egress firewall")


def remove_egress_firewall(uid: int) -> str | None:
    """Remove the rules of `uid` (and the table, once no uid is filtered). Returns None when
    removed or there was nothing to remove, else why not, in one line."""
    problem = _cannot_run()
    if problem is not None:
        return problem
    if not egress_firewall_installed(uid):
        return None
    chain = _chain(uid)
    failed = _nft(
        f"delete element inet {TABLE} uid_chains {{ {int(uid)} }}\n"
        f"delete chain inet {TABLE} {chain}\n",
        "remove the egress firewall",
    )
    if failed is not None:
        return failed
    if not _filtered_uids():
        return _nft(f"delete table inet {TABLE}\n", "remove the egress firewall's table")
    return None


def egress_firewall_installed(uid: int) -> bool:
    """Whether rules for `uid` are in place now."""
    if _cannot_run() is not None:
        return False
    return int(uid) in _filtered_uids()


def nft_script(uid: int, policy: EgressPolicy) -> str:
    """The `nft -f` transaction that installs the rules of `uid` for `policy`."""
    uid = int(uid)
    chain = _chain(uid)
    lines = [
        f"add table inet {TABLE}",
        f"add map inet {TABLE} uid_chains {{ type uid : verdict ; }}",
        f"add chain inet {TABLE} output {{ type filter hook output priority filter ; policy accept ; }}",
        f"flush chain inet {TABLE} output",
        f"add rule inet {TABLE} output meta skuid vmap @uid_chains",
        f"add chain inet {TABLE} {chain}",
        f"flush chain inet {TABLE} {chain}",
        # Replies of the user's own servers (a dev server, Chromium's DevTools endpoint) pass
        # whoever asked. Every packet of a connection the user opened meets the rules below,
        # so one opened while a range was allowed is cut when the range is denied again.
        f"add rule inet {TABLE} {chain} ct direction reply return",
    ]
    rule = f"add rule inet {TABLE} {chain}"
    for family, networks in _by_family(policy.deny):
        lines += _reject(rule, family, networks)
    for family, networks in _by_family(policy.allow):
        lines.append(f"{rule} {family} daddr {networks} return")
    for family, networks in _by_family(DEFAULT_DENY):
        lines += _reject(rule, family, networks)
    lines.append(f"add element inet {TABLE} uid_chains {{ {uid} : jump {chain} }}")
    return "\n".join(lines) + "\n"


def _reject(rule: str, family: str, networks: str) -> list[str]:
    return [
        f"{rule} {family} daddr {networks} meta l4proto tcp reject with tcp reset",
        f"{rule} {family} daddr {networks} reject with icmpx admin-prohibited",
    ]


def _by_family(networks: Iterable[IPNetwork]) -> list[tuple[str, str]]:
    """Per address family, the ranges as one nft set ('ip', '{ a, b }'); overlapping ranges
    are merged (nft refuses overlapping intervals in a set)."""
    out = []
    for version, family in ((4, "ip"), (6, "ip6")):
        merged = list(ipaddress.collapse_addresses(n for n in networks if n.version == version))
        if merged:
            out.append((family, "{ " + ", ".join(str(n) for n in merged) + " }"))
    return out


def _chain(uid: int) -> str:
    return f"uid_{int(uid)}"


def _cannot_run() -> str | None:
    if os.geteuid() != 0:
        return ("not root: the egress firewall needs root with CAP_NET_ADMIN, so the desktop user's "
                "programs are not kept from link-local and metadata addresses by the kernel")
    if shutil.which("nft") is None:
        return f"nft not found: install the {PACKAGE} package to enforce the egress policy for programs"
    return None


def _filtered_uids() -> set[int]:
    """The uids the table filters now (empty when the table does not exist)."""
    try:
        done = subprocess.run(
            ["nft", "-j", "list", "map", "inet", TABLE, "uid_chains"],
            capture_output=True, text=True, timeout=NFT_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return set()
    if done.returncode != 0:
        return set()
    try:
        items = json.loads(done.stdout).get("nftables", [])
    except ValueError:
        return set()
    uids: set[int] = set()
    for item in items:
        for element in (item.get("map") or {}).get("elem", []) or []:
            key = element[0] if isinstance(element, list) else element
            if isinstance(key, int):
                uids.add(key)
    return uids


def _nft(script: str, doing: str) -> str | None:
    try:
        done = subprocess.run(
            ["nft", "-f", "-"], input=script, capture_output=True, text=True, timeout=NFT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"could not {doing}: nft did not finish within {NFT_TIMEOUT_S} s"
    except OSError as exc:
        return f"could not {doing}: cannot run nft ({exc})"
    if done.returncode == 0:
        return None
    message = " ".join((done.stderr or done.stdout or f"nft exited with {done.returncode}").split())
    if "Operation not permitted" in message or "Permission denied" in message:
        return (f"no permission to {doing} ({message[:200]}); the session needs CAP_NET_ADMIN "
                "(in a container: --cap-add NET_ADMIN)")
    return f"could not {doing}: {message[:300]}"
