"""Who may send input to the screen now: the agent, or a person at a control viewer.

The session's supervisor (root) keeps `<data>/input-lease.json`, readable by the desktop user
and written by nobody else: a person's pointer move or key in a control viewer makes the lease
theirs (`holder` "person", `last_input` its time); the viewer's hand-back button, or
`idle_seconds` without their input, gives it back to the agent. The agent's input steps
(`desktop_execute`'s mouse and keyboard operations) wait while a person holds it, up to a
limit, then fail with `human_has_control`. View-only viewers never take it.

    {"holder": "person" | "agent", "last_input": <unix time>, "idle_seconds": 15, "inputs": N}
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "input-lease.json"
IDLE_ENV = "CODEDESK_LEASE_IDLE_SECONDS"
"""Seconds without a person's input after which the lease goes back to the agent (default 15)."""
DEFAULT_IDLE_SECONDS = 15.0
WAIT_ENV = "CODEDESK_LEASE_WAIT_SECONDS"
"""How long an agent's input step waits for a person to hand back, unless the call says (default 10)."""
DEFAULT_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class Lease:
    holder: str = "agent"
    last_input: float = 0.0
    idle_seconds: float = DEFAULT_IDLE_SECONDS
    inputs: int = 0  # a person's input messages counted since the session started

    def person_holds(self, now: float | None = None) -> bool:
        """Whether a person holds the screen right now (their last input within the idle period)."""
        now = time.time() if now is None else now
        return self.holder == "person" and now - self.last_input < self.idle_seconds


def read(data: Path) -> Lease:
    """The lease of the session at `data`; the agent's when there is none (no viewer, no file)."""
    try:
        raw = json.loads((data / FILE_NAME).read_text(encoding="utf-8"))
        return Lease(holder=str(raw["holder"]), last_input=float(raw["last_input"]),
                     idle_seconds=float(raw["idle_seconds"]), inputs=int(raw.get("inputs", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return Lease()


def write(data: Path, lease: Lease) -> None:
    """Replace the lease file at once (readers never see half of it)."""
    tmp = data / f".{FILE_NAME}.{os.getpid()}"
    tmp.write_text(json.dumps({"holder": lease.holder, "last_input": lease.last_input,
                               "idle_seconds": lease.idle_seconds, "inputs": lease.inputs}), encoding="utf-8")
    tmp.chmod(0o644)
    os.replace(tmp, data / FILE_NAME)


def idle_seconds() -> float:
    return _seconds(IDLE_ENV, DEFAULT_IDLE_SECONDS)


def wait_seconds() -> float:
    return _seconds(WAIT_ENV, DEFAULT_WAIT_SECONDS)


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if 0 <= value <= 3600 else default
