"""Containment, as a hostile script meets it through `run_js` on the real session: a command owns
every process it starts, a fork bomb or a memory hog is cut off at its command's caps, and
capability servers that die come back by themselves.

Where the session delegates control groups (root here: `codedesk desktop up` hands a sub-tree
to the desktop user) the commands run in groups of their own; `test_without_control_groups_*`
checks the fallback (an exec server with no delegation, as in a container whose cgroup file
system is read-only).
"""

from __future__ import annotations

import json
import os
import pwd
import select
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.capabilities.exec.conftest import ExecServer
from tests.fixtures.runtime import RuntimeClient, start_runtime

pytestmark = pytest.mark.desktop


def wait_until(condition: Callable[[], bool], limit: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


def processes_named(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (zombies have died)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(proc.info["cmdline"] or ()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def user_tasks(uid: int) -> int:
    """Processes and threads of `uid`: what a fork bomb takes from the desktop user."""
    count = 0
    for proc in psutil.process_iter(["uids", "num_threads", "status"]):
        try:
            if proc.info["uids"].real == uid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                count += proc.info["num_threads"] or 1
        except (psutil.Error, AttributeError):
            continue
    return count


def server_pid(name: str, data: Path, mark: str | None = None) -> int | None:
    """The capability server `name` serving the session at `data` (for the runtime started with
    `CODEDESK_TEST_RUNTIME=<mark>`, which reaches its servers), if one runs."""
    for proc in psutil.process_iter(["cmdline"]):
        try:
            environ = proc.environ() if f"capabilities.{name}" in (proc.info["cmdline"] or ()) else {}
            if environ.get("CODEDESK_DATA") == str(data) and (mark is None or environ.get("CODEDESK_TEST_RUNTIME") == mark):
                return proc.pid
        except psutil.Error:
            continue
    return None


def kill_and_wait(pid: int) -> None:
    """SIGKILL `pid` and return once it has ended: every thread gone, its pipes closed."""
    pidfd = os.pidfd_open(pid)
    try:
        os.kill(pid, signal.SIGKILL)
        assert select.select([pidfd], [], [], 10.0)[0], f"{pid} still running 10 s after SIGKILL"
    finally:
        os.close(pidfd)


def value(out) -> object:
    assert not out.is_error, out.text
    return json.loads(out.text)


RUN = 'const r = await tools.exec.run({bin: "bash", args: ["-c", %s], timeout: %d%s}); ({status: r.status, logs: r.logs})'


def run_command(rt: RuntimeClient, script: str, timeout: int = 30, extra: str = "") -> dict:
    return value(rt.run_js(RUN % (json.dumps(script), timeout, extra), timeout_seconds=timeout + 30))


MARK = "containment"
"""This module's runtime, told from the others serving the same session (`server_pid`)."""


@pytest.fixture(scope="module")
def session_runtime(desktop_session):
    """A runtime of this module's own on the real session (these tests kill its servers)."""
    with start_runtime({**desktop_session.env, "CODEDESK_TEST_RUNTIME": MARK}) as rt:
        yield rt


# -- a command owns its processes ------------------------------------------------------------


def test_background_children_end_with_their_command(session_runtime, desktop_session):
    """`sleep &` in a command that completes does not run on for ever: its leftovers are ended."""
    result = run_command(session_runtime, "sleep 777 & sleep 777 & echo started")
    assert result == {"status": "completed:0", "logs": "started\n"}
    assert wait_until(lambda: not processes_named("sleep 777"), 5.0), processes_named("sleep 777")


def test_detached_children_are_listed_and_killed(session_runtime):
    """With detach the leftovers run on, stream_logs lists them, and kill ends them all."""
    out = value(session_runtime.run_js("""
        const started = await tools.exec.exec({bin: "bash", args: ["-c", "sleep 778 & sleep 778 & echo started"],
                                               timeout: 120, detach: true});
        let r;
        do { await new Promise((ok) => setTimeout(ok, 100));
             r = await tools.exec.stream_logs({id: started.id, offset: 0}); } while (r.status === "running");
        await new Promise((ok) => setTimeout(ok, 2000));  // past the grace a non-detached command gets
        const later = await tools.exec.stream_logs({id: started.id, offset: 0});
        ({id: started.id, status: later.status, still_running: later.still_running})
    """, timeout_seconds=60))
    assert out["status"] == "completed:0"
    assert len(processes_named("sleep 778")) == 2
    assert sorted(entry.split()[1] for entry in out["still_running"]) == ["sleep", "sleep"]
    killed = value(session_runtime.run_js(f'await tools.exec.kill({{id: "{out["id"]}"}})'))
    assert killed["status"] == "completed:0"  # an ended command keeps its status
    assert wait_until(lambda: not processes_named("sleep 778"), 5.0)


def test_nothing_a_command_started_outlives_the_runtime(desktop_session):
    """When the runtime exits, its exec server ends every process it started, detached or not."""
    with start_runtime(dict(desktop_session.env)) as rt:
        out = rt.run_js("""
            await tools.exec.exec({bin: "bash", args: ["-c", "sleep 779 & sleep 779; echo never"], timeout: 600});
            await tools.exec.exec({bin: "bash", args: ["-c", "setsid sleep 779 & echo ok"], timeout: 600, detach: true});
            await new Promise((ok) => setTimeout(ok, 1500));
        """)
        assert not out.is_error, out.text
        assert len(processes_named("sleep 779")) == 4
    assert wait_until(lambda: not processes_named("sleep 779"), 5.0), processes_named("sleep 779")


def test_fork_bomb_is_cut_off_and_leaves_nothing(session_runtime, desktop_session):
    """A fork bomb stops at its command's cap, another command still runs meanwhile, and once the
    bomb's command is over the desktop user holds what it held before."""
    uid = desktop_session.info.uid
    before = user_tasks(uid)
    out = value(session_runtime.run_js("""
        const bomb = await tools.exec.exec({bin: "bash", args: ["-c", "b(){ b|b& };b"], timeout: 8});
        await new Promise((ok) => setTimeout(ok, 1500));
        const echo = await tools.exec.run({bin: "echo", args: ["still here"], timeout: 10});
        let r;
        do { r = await tools.exec.stream_logs({id: bomb.id, offset: 0});
             await new Promise((ok) => setTimeout(ok, 200)); } while (r.status === "running");
        ({bomb: r.status, echo: echo.status, logs: echo.logs})
    """, timeout_seconds=60))
    assert out["echo"] == "completed:0" and out["logs"] == "still here\n", out
    assert wait_until(lambda: abs(user_tasks(uid) - before) <= 30, 10.0), (before, user_tasks(uid))


def test_command_past_its_memory_cap_ends_out_of_memory(desktop_session, pages_server):
    """A command that allocates past its cap reads failed:out_of_memory, and the session, the
    browser and the next command work."""
    env = {**desktop_session.env, "CODEDESK_EXEC_MAX_MEMORY_BYTES": str(256 << 20)}
    with start_runtime(env) as rt:
        hog = run_command(rt, "python3 -c \"x = b'x' * (600 << 20); print('allocated')\"")
        assert hog["status"] == "failed:out_of_memory", hog
        assert run_command(rt, "echo fine") == {"status": "completed:0", "logs": "fine\n"}
        page = value(rt.run_js(f"""
            const r = await tools.browser.browser_execute({{tab: "oom", operations: [
              {{type: "navigate", params: {{url: "{pages_server.url("/index.html")}"}}}}, {{type: "getText"}}]}});
            r.results[1].result.text.length > 0
        """, timeout_seconds=60))
        assert page is True


def test_without_control_groups_commands_still_own_their_processes(desktop_session):
    """The fallback (no delegated groups: a read-only cgroup file system): leftovers are still
    ended, and a fork bomb leaves another command room to run."""
    desktop = pwd.getpwuid(desktop_session.info.uid)
    data = Path(tempfile.mkdtemp(prefix="codedesk-fallback-", dir="/tmp"))
    os.chown(data, desktop.pw_uid, desktop.pw_gid)
    data.chmod(0o755)
    with ExecServer(data, user=desktop) as server:
        assert json.loads((data / "exec").exists() and "true")  # a server of the desktop user, on its own
        command = server.run("bash", "-c", "sleep 780 & echo started")
        assert server.follow(command) == ("completed:0", "started\n")
        assert wait_until(lambda: not processes_named("sleep 780"), 5.0)
        bomb = server.run("bash", "-c", "b(){ b|b& };b", timeout=6)
        time.sleep(1.5)
        echo = server.run("echo", "room")
        assert server.follow(echo) == ("completed:0", "room\n")
        server.follow(bomb)
        assert wait_until(lambda: user_tasks(desktop.pw_uid) < 1500, 10.0)
    shutil.rmtree(data, ignore_errors=True)


# -- servers come back by themselves -----------------------------------------------------------

CALLS = {
    "exec": '(await tools.exec.run({bin: "echo", args: ["back"], timeout: 10})).logs',
    # A refused call is still an answer of the server's own.
    "documents": '(await mcp.callTool("documents", "read_pdf", {})).structuredContent.error.kind',
    "browser": '(await tools.browser.desktop_execute({operations: [{type: "mouse.getPosition"}]})).results.length',
}
ANSWERS = {"exec": "back\n", "documents": "invalid_arguments", "browser": "1"}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_server_killed_between_runs_answers_the_next_call(session_runtime, desktop_session, name):
    """A capability server killed with SIGKILL between two runs: the next call succeeds."""
    assert session_runtime.run_js(CALLS[name], timeout_seconds=60).text == ANSWERS[name]
    pid = server_pid(name, desktop_session.data_dir, MARK)
    assert pid is not None
    kill_and_wait(pid)
    out = session_runtime.run_js(CALLS[name], timeout_seconds=60)
    assert not out.is_error and out.text == ANSWERS[name], out.text
    assert server_pid(name, desktop_session.data_dir, MARK) not in (None, pid)


def test_server_killed_during_a_call_answers_unavailable(session_runtime, desktop_session):
    """The call in flight when its server dies fails as `unavailable` and says it may have
    happened; the next call succeeds."""
    assert session_runtime.run_js(CALLS["browser"], timeout_seconds=60).text == ANSWERS["browser"]
    pid = server_pid("browser", desktop_session.data_dir, MARK)
    assert pid is not None
    killer = threading.Timer(1.5, os.kill, (pid, signal.SIGKILL))
    killer.start()
    try:
        out = value(session_runtime.run_js("""
            try { await tools.browser.desktop_execute({operations: [{type: "sleep", params: {ms: 8000}}]});
                  ({thrown: false}) }
            catch (e) { ({thrown: true, kind: e.kind, message: e.message}) }
        """, timeout_seconds=60))
    finally:
        killer.join()
    assert out["thrown"] and out["kind"] == "unavailable", out
    assert "stopped during the call to 'desktop_execute'" in out["message"]
    assert "may have taken effect" in out["message"]
    assert session_runtime.run_js(CALLS["browser"], timeout_seconds=60).text == ANSWERS["browser"]


def test_a_server_killed_again_and_again_is_reported_crash_looping(desktop_session):
    """A server killed ten times in a row: the next call says it is crash-looping and shows its
    last stderr lines, instead of restarting it for ever."""
    mark = "crash-loop"  # other runtimes of this module serve the same session
    with start_runtime({**desktop_session.env, "CODEDESK_TEST_RUNTIME": mark}) as rt:
        assert rt.run_js(CALLS["exec"], timeout_seconds=60).text == ANSWERS["exec"]
        pid = server_pid("exec", desktop_session.data_dir, mark)
        kills = 0
        while pid is not None and kills < 10:
            os.kill(pid, signal.SIGKILL)
            kills += 1
            wait_until(lambda: server_pid("exec", desktop_session.data_dir, mark) not in (pid,), 5.0)
            # The successor, once it serves (none comes once the loop is seen).
            wait_until(lambda: server_pid("exec", desktop_session.data_dir, mark) is not None, 10.0)
            time.sleep(0.5)
            pid = server_pid("exec", desktop_session.data_dir, mark)
        assert kills >= 5
        out = value(rt.run_js("""
            const r = await mcp.callTool("exec", "exec", {bin: "echo", args: ["x"], timeout: 5});
            r.structuredContent.error
        """, timeout_seconds=60))
        assert out["kind"] == "unavailable"
        assert "crash-looping" in out["message"] and "last stderr lines" in out["message"]
        assert "mcpServers" in out["message"]  # what to do
