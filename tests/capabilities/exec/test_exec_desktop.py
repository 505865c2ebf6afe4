"""exec on the real desktop session: as its user, on its display, and through run_js."""

from __future__ import annotations

import json
import os
import subprocess
import time

import psutil
import pytest

pytestmark = pytest.mark.desktop

# The spec's JavaScript example, word for word ("Shell: exec").
SPEC_EXAMPLE = """\
const call = async (tool, args) => JSON.parse((await mcp.callTool("exec", tool, args)).content[0].text);
const { id } = await call("exec", { bin: "ls", args: ["-la", "/data/chrome/Downloads"], timeout: 60 });
let logs = "", offset = 0, status = "running";
while (status === "running") {
  const r = await call("stream_logs", { id, offset });
  logs += r.logs; offset = r.next_offset; status = r.status;
  if (status === "running") await new Promise((resolve) => setTimeout(resolve, 250));
}
console.log(status, logs); // "completed:0" and the listing
"""




def _windows_named(title: str, env: dict) -> list[str]:
    found = subprocess.run(
        ["xdotool", "search", "--name", title], env=env, capture_output=True, text=True, timeout=10
    )
    return found.stdout.split()


def test_programs_run_as_the_desktop_user_in_its_home(desktop_session, desktop_exec_server):
    """Programs run as the session's unprivileged user, in its home, with its environment."""
    info = desktop_session.info
    command_id = desktop_exec_server.run("sh", "-c", 'echo "$(id -un) $(pwd) $DISPLAY"')
    status, logs = desktop_exec_server.follow(command_id)
    assert status == "completed:0"
    assert logs == f"{info.user} {info.home} {info.display}\n"
    assert info.user != "root"


def test_a_program_opens_a_window_on_the_session_display(desktop_session, desktop_exec_server, gone):
    """A program started by exec shows its window on the session's screen, owned by the desktop user;
    kill closes it."""
    title = f"codedesk exec window {os.getpid()}"
    command_id = desktop_exec_server.run("xmessage", "-title", title, "hello from exec", timeout=120)
    x_env = {**os.environ, **desktop_session.info.env}
    deadline = time.monotonic() + 20
    while not (windows := _windows_named(title, x_env)):
        assert time.monotonic() < deadline, desktop_exec_server.ok("stream_logs", {"id": command_id, "offset": 0})
        time.sleep(0.2)
    wmctrl = subprocess.run(["wmctrl", "-l"], env=x_env, capture_output=True, text=True, timeout=10).stdout
    assert title in wmctrl
    # xmessage sets no _NET_WM_PID: the program is the command's own process, from its record.
    record = json.loads((desktop_session.data_dir / "exec" / f"{command_id}.json").read_text())
    pid = record["pid"]
    assert psutil.Process(pid).username() == desktop_session.info.user
    assert psutil.Process(pid).environ()["DISPLAY"] == desktop_session.info.display
    assert desktop_exec_server.ok("kill", {"id": command_id})["status"] == "cancelled"
    assert gone([pid])
    deadline = time.monotonic() + 10
    while _windows_named(title, x_env):
        assert time.monotonic() < deadline, "the window stayed after kill"
        time.sleep(0.2)


def test_spec_example_runs_through_run_js(desktop_session, desktop_runtime):
    """The spec's polling example, run through run_js, prints completed:0 and the listing.

    The example is the spec's text unchanged except its path: it lists /data/chrome/Downloads,
    the session disk inside a container; here the session's data dir is elsewhere, so the path
    is replaced by the session's `<data>/chrome/Downloads`.
    """
    downloads = desktop_session.info.downloads_dir
    downloads.mkdir(parents=True, exist_ok=True)
    marker = downloads / f"exec-spec-example-{os.getpid()}.txt"
    marker.write_text("listed\n")
    try:
        code = SPEC_EXAMPLE.replace("/data/chrome/Downloads", str(downloads))
        outcome = desktop_runtime.run_js(code, timeout_seconds=90)
        assert not outcome.is_error, outcome.text
        assert outcome.text.startswith("completed:0 ")
        assert marker.name in outcome.text
        assert "total " in outcome.text  # the `ls -la` listing itself
    finally:
        marker.unlink()
