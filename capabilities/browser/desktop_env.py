"""The environment of the programs the browser server starts on the desktop (Chromium when it
starts it again, the xclip that owns the clipboard).

Built from the session's `env` alone, never from this server's own environment, which may hold
the runtime's secrets (its HTTP token): these programs run as the desktop user, who can read
their environment in /proc.
"""

from __future__ import annotations

from capabilities.session import SessionInfo

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def desktop_env(session: SessionInfo) -> dict[str, str]:
    """The environment for a program started on the session's desktop."""
    env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "HOME": str(session.home), "DISPLAY": session.display}
    env.update(session.env)
    return env
