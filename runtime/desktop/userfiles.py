"""Files the session writes for the desktop user before starting: XFCE configuration, the
browser wrapper that is the desktop's default browser, Chromium's preferences, the X cookie.

Everything is rewritten on each `up` except what the user may have changed since (Chromium's
profile is only amended, never replaced). The supervisor calls these as the desktop user
(`DesktopUser.run_as`): they write into folders that user controls.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import struct
from pathlib import Path

from .layout import SessionLayout, image_dir

# Launcher plugin id -> the .desktop file it shows (ids match desktop-image/xfce/xfce4-panel.xml).
_APP_LAUNCHERS = {
    4: "xfce4-terminal.desktop",
    5: "thunar.desktop",
    6: "org.xfce.mousepad.desktop",
    7: "org.xfce.ristretto.desktop",
}
_BROWSER_LAUNCHER = 3
_BROWSER_DESKTOP = "codedesk-browser.desktop"


def write_xauthority(path: Path, cookie: bytes, display_num: int | None = None) -> None:
    """An Xauthority file holding the session's MIT-MAGIC-COOKIE-1.

    Before Xvfb has picked its display number (`-displayfd`) the file has one FamilyWild entry
    that matches any display (Xvfb reads it at start, libXau clients accept it); once the number
    is known, a FamilyLocal entry for this host and display is added for clients that do not
    understand FamilyWild (python-xlib).
    """
    def field(b: bytes) -> bytes:
        return struct.pack(">H", len(b)) + b

    def entry(family: int, address: bytes, number: bytes) -> bytes:
        return (struct.pack(">H", family) + field(address) + field(number)
                + field(b"MIT-MAGIC-COOKIE-1") + field(cookie))

    data = b""
    if display_num is not None:
        data += entry(256, socket.gethostname().encode(), str(display_num).encode())  # FamilyLocal
    data += entry(0xFFFF, b"", b"")  # FamilyWild
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o600)
    os.replace(tmp, path)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def browser_desktop_entry(wrapper: Path) -> str:
    return (
        "[Desktop Entry]\n"
        "Version=1.0\n"
        "Type=Application\n"
        "Name=Web Browser\n"
        "Comment=Chromium in the session's profile\n"
        f"Exec={wrapper} %U\n"
        "Icon=chromium\n"
        "Terminal=false\n"
        "Categories=Network;WebBrowser;\n"
        "MimeType=text/html;x-scheme-handler/http;x-scheme-handler/https;\n"
        "StartupNotify=true\n"
        "StartupWMClass=chromium\n"
    )


def prepare_home(layout: SessionLayout, browser_argv: list[str]) -> None:
    """Write the desktop user's configuration into `<data>/home`."""
    home = layout.home
    conf = home / ".config"
    xfconf = conf / "xfce4" / "xfconf" / "xfce-perchannel-xml"
    xfconf.mkdir(parents=True, exist_ok=True)
    src = image_dir() / "xfce"
    for name in ("xfce4-panel.xml", "xfwm4.xml", "xfce4-desktop.xml", "xfce4-session.xml"):
        _write(xfconf / name, (src / name).read_text())

    # The wrapper every "open a browser" path goes through: same binary, flags, profile and
    # DevTools port as the session's Chromium, so a link opens in the already-running instance.
    wrapper = layout.browser_wrapper
    _write(wrapper, "#!/bin/sh\n# codedesk: Chromium in the session's profile.\n"
                    f"exec {shlex.join(browser_argv)} \"$@\"\n", 0o755)
    entry = browser_desktop_entry(wrapper)
    apps = home / ".local" / "share" / "applications"
    _write(apps / _BROWSER_DESKTOP, entry)
    _write(conf / "mimeapps.list", "[Default Applications]\n" + "".join(
        f"{m}={_BROWSER_DESKTOP}\n"
        for m in ("x-scheme-handler/http", "x-scheme-handler/https", "text/html",
                  "application/xhtml+xml")
    ))
    # exo-open (what xdg-open runs under XFCE) asks the XFCE preferred-applications helper.
    _write(conf / "xfce4" / "helpers.rc", (src / "helpers.rc").read_text())
    _write(home / ".local" / "share" / "xfce4" / "helpers" / "codedesk-browser.desktop", (
        "[Desktop Entry]\nVersion=1.0\nType=X-XFCE-Helper\nName=Web Browser\nIcon=chromium\n"
        "X-XFCE-Category=WebBrowser\n"
        f"X-XFCE-Commands={wrapper}\n"
        f"X-XFCE-CommandsWithParameter={wrapper} \"%s\"\n"
    ))

    panel = conf / "xfce4" / "panel"
    _write(panel / f"launcher-{_BROWSER_LAUNCHER}" / _BROWSER_DESKTOP, entry)
    for plugin_id, desktop in _APP_LAUNCHERS.items():
        system = Path("/usr/share/applications") / desktop
        if system.exists():
            _write(panel / f"launcher-{plugin_id}" / desktop, system.read_text())


def prepare_chrome_profile(layout: SessionLayout) -> None:
    """Point downloads at `<data>/chrome/Downloads` and skip first-run prompts, keeping the rest."""
    layout.downloads.mkdir(parents=True, exist_ok=True)
    prefs_path = layout.chrome / "Default" / "Preferences"
    prefs_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        prefs = json.loads(prefs_path.read_text())
    except (OSError, ValueError):
        prefs = {}
    prefs.setdefault("download", {}).update({
        "default_directory": str(layout.downloads),
        "prompt_for_download": False,
        "directory_upgrade": True,
    })
    prefs.setdefault("browser", {})["has_seen_welcome_page"] = True
    prefs.setdefault("translate", {})["enabled"] = False
    prefs.setdefault("profile", {})["exit_type"] = "Normal"  # no "restore pages?" bubble
    prefs_path.write_text(json.dumps(prefs))
    # A stale DevTools port from the previous run would mislead the readiness check.
    (layout.chrome / "DevToolsActivePort").unlink(missing_ok=True)
