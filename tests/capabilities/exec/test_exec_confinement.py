"""Hostile programs and callers: what exec'd programs can reach, and the limits that hold them.

Each test runs the real server (`python -m capabilities.exec`) over stdio. When the tests run as
root, the server is root and programs must come out as the unprivileged `desktop` user.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from capabilities.session import SessionInfo, write_session

REPO = Path(__file__).resolve().parents[3]

ROOT = os.getuid() == 0


@pytest.fixture(params=["chain", "in-python"])
def launcher(request, workdir, account):
    """How `bin` is named: plainly (started by the setpriv/prlimit/env chain), or through a
    directory whose name holds '=' (which the chain cannot pass to env, so the server confines
    the child in Python instead). Both must confine the same way."""
    if request.param == "chain":
        return lambda name: name
    links = workdir / "via=python"
    links.mkdir()
    os.chown(links, account.pw_uid, account.pw_gid)

    def named(name: str) -> str:
        link = links / name
        if not link.exists():
            link.symlink_to(shutil.which(name, path="/usr/bin:/bin"))
        return str(link)

    return named


def test_caller_loader_variables_never_reach_a_root_process(exec_server, workdir, account, launcher):
    """The caller's env (LD_DEBUG_OUTPUT here, like LD_PRELOAD) is seen only by the loader of the
    final, unprivileged program: a root helper that saw it would leave a root-owned file."""
    out = workdir / "ld"
    env = {"LD_DEBUG": "libs", "LD_DEBUG_OUTPUT": str(out), "GCONV_PATH": str(workdir), "LD_LIBRARY_PATH": str(workdir)}
    command_id = exec_server.run(launcher("true"), env=env)
    assert exec_server.follow(command_id)[0] == "completed:0"
    written = list(workdir.glob("ld.*"))
    assert written, "the final program's loader did not see the caller's env"
    assert {p.stat().st_uid for p in written} == {account.pw_uid}
    if ROOT:
        assert account.pw_uid != 0


def _compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def test_ld_preload_constructor_runs_only_as_the_desktop_user(exec_server, workdir, account, launcher):
    """A library the script wrote, given as LD_PRELOAD, runs its constructor in the final program
    only, as the desktop user: never in anything that runs as root."""
    cc = _compiler()
    if cc is None:
        pytest.skip("needs a C compiler (cc or gcc) to build the LD_PRELOAD library")
    source = workdir / "hook.c"
    log = workdir / "uids"
    source.write_text(
        '#include <stdio.h>\n#include <unistd.h>\n'
        "__attribute__((constructor)) static void hook(void) {\n"
        f'  FILE *f = fopen("{log}", "a"); if (f) {{ fprintf(f, "%d\\n", (int)getuid()); fclose(f); }}\n'
        "}\n"
    )
    library = workdir / "hook.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(source)], check=True, timeout=60)
    os.chown(log.parent, account.pw_uid, account.pw_gid)
    command_id = exec_server.run(launcher("true"), env={"LD_PRELOAD": str(library)})
    assert exec_server.follow(command_id)[0] == "completed:0"
    uids = log.read_text().split()
    assert uids, "the constructor never ran: the test proves nothing"
    assert set(uids) == {str(account.pw_uid)}


def _status_fields(text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def test_programs_have_no_new_privs_and_no_capabilities(exec_server, account, launcher):
    """A program runs with no_new_privs (setuid binaries give it nothing) and no capabilities,
    as the desktop user and its groups when the server is root."""
    command_id = exec_server.run(launcher("cat"), "/proc/self/status")
    status, logs = exec_server.follow(command_id)
    assert status == "completed:0", logs
    fields = _status_fields(logs)
    assert fields["NoNewPrivs"] == "1"
    for cap in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        assert int(fields[cap], 16) == 0, (cap, fields[cap])
    assert set(fields["Uid"].split()) == {str(account.pw_uid)}
    assert set(fields["Gid"].split()) == {str(account.pw_gid)}
    if ROOT:
        assert int(fields["CapBnd"], 16) == 0
        assert "0" not in fields["Groups"].split()


def test_setuid_programs_grant_nothing(exec_server):
    """With no_new_privs, a setuid-root program (su here) runs without root."""
    su = shutil.which("su")
    if su is None or not os.stat(su).st_mode & 0o4000:
        pytest.skip("no setuid su on this machine")
    command_id = exec_server.run("su", "-c", "id -u", "root")
    status, logs = exec_server.follow(command_id)
    assert status != "completed:0", logs


def test_server_environment_never_reaches_programs(start_exec_server, tmp_path):
    """Programs get an environment built for the desktop, never the server's own (which may hold
    the runtime's secrets)."""
    server = start_exec_server(tmp_path / "data", env={"CODEDESK_TOKEN": "s3cret", "LD_PRELOAD": ""})
    command_id = server.run("cat", "/proc/self/environ")
    status, logs = server.follow(command_id)
    assert status == "completed:0"
    names = {item.split("=", 1)[0] for item in logs.split("\0") if item}
    assert "s3cret" not in logs and "CODEDESK_TOKEN" not in names
    assert "CODEDESK_DATA" not in names
    assert {"PATH", "HOME", "USER"} <= names


def test_a_session_environment_is_the_programs_base(start_exec_server, tmp_path, account):
    """With a session, programs start from session.json's env (DISPLAY, ...), not the server's."""
    data = tmp_path / "data"
    data.mkdir()
    write_session(
        SessionInfo(
            data_dir=data, display=":4243", env={"DISPLAY": ":4243", "XDG_SESSION_TYPE": "x11"},
            devtools_url="http://127.0.0.1:1", chromium_command=[], user=account.pw_name,
            uid=account.pw_uid, gid=account.pw_gid, home=Path(account.pw_dir),
        )
    )
    server = start_exec_server(data, env={"CODEDESK_TOKEN": "s3cret", "DISPLAY": ":99"})
    command_id = server.run("cat", "/proc/self/environ")
    _, logs = server.follow(command_id)
    env = dict(item.split("=", 1) for item in logs.split("\0") if "=" in item)
    assert env["DISPLAY"] == ":4243" and env["XDG_SESSION_TYPE"] == "x11"
    assert "CODEDESK_TOKEN" not in env


def test_a_cwd_the_user_cannot_enter_is_not_entered(exec_server, tmp_path, account):
    """The working directory is entered after the drop of privileges: a root-only directory
    cannot become a program's cwd."""
    if not ROOT:
        pytest.skip("needs a root server and a directory only root can enter")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "inside").mkdir(mode=0o755)
    (private / "inside" / "secret").write_text("s3cret")
    command_id = exec_server.run("cat", "secret", cwd=str(private / "inside"))
    status, logs = exec_server.follow(command_id)
    assert status != "completed:0"
    assert "s3cret" not in logs


def test_a_log_past_its_cap_is_cut_and_says_so(start_exec_server, tmp_path):
    """A program that floods its log keeps running, but the log stops at the cap: stream_logs
    and search_logs say where it was cut, and the disk holds no more than that."""
    cap = 200_000
    server = start_exec_server(tmp_path / "data", env={"CODEDESK_EXEC_LOG_MAX_BYTES": str(cap)})
    script = "yes 'flood line' | head -c 20000000; sleep 0.5; echo after the flood; exit 3"
    command_id = server.run("sh", "-c", script, timeout=60)
    status, logs = server.follow(command_id)
    assert status == "completed:3"  # the program was not stopped by the cap
    assert len(logs.encode()) == cap
    last = server.ok("stream_logs", {"id": command_id, "offset": cap})
    assert last["logs"] == "" and last["log_cut_at"] == cap and str(cap) in last["hint"]
    found = server.ok("search_logs", {"id": command_id, "pattern": "after the flood"})
    assert found["matches"] == [] and found["log_cut_at"] == cap
    assert (tmp_path / "data" / "exec" / f"{command_id}.log").stat().st_size == cap


def test_an_uncut_log_carries_no_cut_field(exec_server):
    """A log under the cap says nothing about cutting."""
    command_id = exec_server.run("echo", "short")
    exec_server.follow(command_id)
    r = exec_server.ok("stream_logs", {"id": command_id, "offset": 0})
    assert "log_cut_at" not in r


def test_catastrophic_pattern_answers_within_the_time_cap(exec_server):
    """search_logs with a pattern that backtracks exponentially ((a+)+$ over a long line of a's)
    answers with a clear error within the cap, and the server goes on answering."""
    command_id = exec_server.run("sh", "-c", "head -c 50000 /dev/zero | tr '\\0' a; echo b")
    exec_server.follow(command_id)
    started = time.monotonic()
    message = exec_server.refused("search_logs", {"id": command_id, "pattern": "(a+)+$"})
    assert time.monotonic() - started < 5 + 5
    assert "took more than 5 s" in message and "pattern" in message
    assert exec_server.ok("search_logs", {"id": command_id, "pattern": "b$"})["matches"]


def _user_tasks(uid: int) -> int:
    count = 0
    for proc in psutil.process_iter(["uids", "num_threads"]):
        try:
            if proc.info["uids"] and proc.info["uids"].real == uid:
                count += proc.info["num_threads"] or 1
        except psutil.Error:
            continue
    return count


def _marked(command_id: str) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CODEDESK_EXEC_ID") == command_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def test_a_fork_bomb_is_held_at_the_process_cap_and_killed(start_exec_server, tmp_path, account):
    """A fork bomb stops growing at the per-command process cap (its control group's, else the
    desktop user's task count plus the cap), and kill ends all of it, so the machine stays usable."""
    room = 150
    limit = _user_tasks(account.pw_uid) + room
    server = start_exec_server(tmp_path / "data", env={"CODEDESK_EXEC_MAX_PROCESSES": str(room)})
    command_id = server.run("bash", "-c", "bomb() { bomb | bomb & }; bomb; sleep 600", timeout=120)
    time.sleep(3)
    # Other users of this machine may start desktop processes meanwhile: allow some slack.
    assert _user_tasks(account.pw_uid) <= limit + 50
    assert len(_marked(command_id)) > 20  # it did try
    assert server.ok("kill", {"id": command_id})["status"] == "cancelled"
    deadline = time.monotonic() + 20
    while _marked(command_id):
        assert time.monotonic() < deadline, f"{len(_marked(command_id))} bomb processes left"
        time.sleep(0.2)


def test_a_process_that_leaves_the_session_and_clears_its_environment_is_killed(exec_server, gone):
    """A grandchild that double-forks away (setsid -f), clears its environment (env -i) and is
    orphaned is still found and killed by kill."""
    script = 'setsid -f env -i sh -c "echo escaped \\$\\$; exec sleep 1000"; echo leader $$; exec sleep 1000'
    command_id = exec_server.run("sh", "-c", script, timeout=600)
    logs = exec_server.wait_for_output(command_id, "escaped ")
    escaped = int(re.search(r"escaped (\d+)", logs).group(1))
    proc = psutil.Process(escaped)
    assert proc.environ().get("CODEDESK_EXEC_ID") is None
    assert os.getsid(escaped) != os.getsid(int(re.search(r"leader (\d+)", exec_server.wait_for_output(command_id, "leader ")).group(1)))
    assert exec_server.ok("kill", {"id": command_id})["status"] == "cancelled"
    assert gone([escaped])


def test_kill_after_the_end_stops_what_was_left_running(exec_server, gone):
    """A command whose first process returned leaves its background process running (as
    xdg-open does), and kill of the ended command stops that too, keeping its status."""
    command_id = exec_server.run("sh", "-c", "env -i setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!")
    status, logs = exec_server.follow(command_id)
    assert status == "completed:0"
    left = int(logs)
    assert not gone([left], limit=0.5)
    assert exec_server.ok("kill", {"id": command_id})["status"] == "completed:0"
    assert gone([left])
    # The server adopted it as subreaper, and collects its exit: no zombie holds a process slot.
    deadline = time.monotonic() + 5
    while psutil.pid_exists(left):
        assert time.monotonic() < deadline, f"{left} left as a zombie"
        time.sleep(0.05)


def test_closed_stdin_ends_the_server_quietly_and_at_once(tmp_path):
    """When the runtime goes away (stdin closed), the server ends its commands and exits at
    once, with nothing on stderr (no traceback)."""
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "capabilities.exec"], cwd=str(REPO), env={"CODEDESK_DATA": str(data), "PATH": os.environ["PATH"]},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "exec", "arguments": {"bin": "sleep", "args": ["1000"], "timeout": 600}}},
    ]
    for message in messages:
        proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()
    answers = []
    while len(answers) < 2:
        answers.append(json.loads(proc.stdout.readline()))
    command_id = json.loads(answers[1]["result"]["content"][0]["text"])["id"]
    sleeper = json.loads((data / "exec" / f"{command_id}.json").read_text())["pid"]
    proc.stdin.close()
    try:
        proc.wait(timeout=5)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    stderr = proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == 0
    assert "Traceback" not in stderr, stderr
    assert not psutil.pid_exists(sleeper) or psutil.Process(sleeper).status() == psutil.STATUS_ZOMBIE
    assert json.loads((data / "exec" / f"{command_id}.json").read_text())["status"] == "failed:interrupted"


@pytest.mark.parametrize("containment", ["groups", "rlimit"])
def test_memory_past_the_cap_ends_the_program(start_exec_server, tmp_path, launcher, containment):
    """A program asking for more memory than its command's cap is stopped (not the machine's
    memory): in control groups the kernel kills it and the status says failed:out_of_memory;
    in the fallback (rlimits) its allocation fails. One under the cap runs."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("needs the system python3 to allocate memory on request")
    if containment == "groups" and not ROOT:
        pytest.skip("a server without a session makes its own control groups only as root")
    env = {"CODEDESK_EXEC_MAX_MEMORY_BYTES": str(300 << 20)}
    if containment == "rlimit":
        env["CODEDESK_EXEC_CONTAINMENT"] = "rlimit"
    server = start_exec_server(tmp_path / "data", env=env)
    grab = "import sys; b = bytearray(int(sys.argv[1]) << 20); print('got', len(b) >> 20)"
    small = server.run(launcher("python3"), "-c", grab, "50")
    assert server.follow(small) == ("completed:0", "got 50\n")
    big = server.run(launcher("python3"), "-c", grab, "600")
    status, logs = server.follow(big)
    if containment == "groups":
        assert status == "failed:out_of_memory", (status, logs)
    else:
        assert status == "completed:1" and "MemoryError" in logs
