"""Who may send input to the screen now: the agent, or a person at a control viewer.

The session's supervisor (root) keeps `<data>/input-lease.json`, readable by the desktop user
and written by nobody else: a person's pointer move or key in a control viewer makes the lease
theirs (`holder` "person", `last_input` its time); the viewer's hand-back button, or
`idle_seconds` without their input, gives it back to the agent. The agent's input steps
(`desktop_execute`'s mouse and keyboard operations, `browser_execute`'s clicks, typing, keys,
hovering, dragging, scrolling and uploads) wait while a person holds it, up to a limit, then
fail with `human_has_control`. View-only viewers never take it.

    {"holder": "person" | "agent", "last_input": <unix time>, "idle_seconds": 15, "inputs": N}
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from .contract import OutputModel, ToolError

FILE_NAME = "input-lease.json"
IDLE_ENV = "CODEDESK_LEASE_IDLE_SECONDS"
"""Seconds without a person's input after which the lease goes back to the agent (default 15)."""
DEFAULT_IDLE_SECONDS = 15.0
WAIT_ENV = "CODEDESK_LEASE_WAIT_SECONDS"
"""How long an agent's input step waits for a person to hand back, unless the call says (default 10)."""
DEFAULT_WAIT_SECONDS = 10.0


class LeaseReport(OutputModel):
    """In a result with input steps: who held the screen, and how long the steps waited for it."""

    holder: Literal["agent", "person"] = Field(description="Who held the screen")
    waitedMs: int


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


def verdict(data: Path, waited: float, wait: float, longer: str | None = "config.humanWaitMs",
            ) -> tuple[dict[str, Any], Any] | None:
    """One look at the lease for input steps that have waited `waited` of `wait` seconds: the
    report and None when the agent may go on, the report and a `human_has_control` ToolError
    when the person kept the screen past the wait, None to keep waiting (look again shortly).
    `longer` names the call's setting for a longer wait, if it has one."""
    lease = read(data)
    if not lease.person_holds():
        return {"holder": "agent", "waitedMs": round(waited * 1000)}, None
    if waited < wait:
        return None
    return {"holder": "person", "waitedMs": round(waited * 1000)}, ToolError(
        "human_has_control",
        f"a person is using the screen from the viewer (their last input {time.time() - lease.last_input:.1f} s "
        f"ago); no step ran",
        hint=f"wait until they hand back (the viewer's button, or {lease.idle_seconds:g} s without their "
             f"input)" + (f", or wait longer with {longer}" if longer else ""))


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
