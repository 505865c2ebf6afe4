"""How programs are run: no shell, their environment and directory, and killing whole trees."""

from __future__ import annotations

import os
import re
from pathlib import Path

from capabilities.session import SessionInfo, write_session

TREE = r"""
trap '' TERM
sh -c 'trap "" TERM; echo stubborn $$; exec sleep 1000' &
setsid sh -c 'echo escaped $$; exec sleep 1000' &
sleep 1000 &
echo plain $!
echo leader $$
wait
"""


def _pids(logs: str) -> dict[str, int]:
    return {name: int(pid) for name, pid in re.findall(r"^(\w+) (\d+)$", logs, re.M)}


def test_args_arrive_verbatim_without_a_shell(exec_server, workdir):
    """No shell: globs, variables, quotes and spaces reach the program exactly as written."""
    (workdir / "a.csv").write_text("x")
    words = ["*.csv", "$HOME", "a b", "'q'", "; rm -rf /", "`id`", ""]
    command_id = exec_server.run("printf", "[%s]\\n", *words, cwd=str(workdir))
    status, logs = exec_server.follow(command_id)
    assert status == "completed:0"
    assert logs.splitlines() == [f"[{w}]" for w in words]


def test_a_shell_is_run_as_the_program_when_asked(exec_server, workdir):
    """Pipes and globs work when the program is a shell, as the spec suggests."""
    for name in ("a.csv", "b.csv", "c.txt"):
        (workdir / name).write_text("x")
    command_id = exec_server.run("sh", "-c", "ls *.csv | wc -l", cwd=str(workdir))
    assert exec_server.follow(command_id) == ("completed:0", "2\n")


def test_stdin_is_empty(exec_server):
    """Programs get no keyboard input: reading stdin ends at once instead of hanging."""
    command_id = exec_server.run("sh", "-c", "read line; echo read=$?", timeout=10)
    assert exec_server.follow(command_id) == ("completed:0", "read=1\n")


def test_env_is_added_and_cwd_defaults_to_home(exec_server, account):
    """`env` adds variables as given, and without cwd the program starts in the home directory."""
    command_id = exec_server.run("sh", "-c", 'echo "$GREETING|$(pwd)"', env={"GREETING": "hello $USER"})
    home = str(Path(account.pw_dir).resolve()) if Path(account.pw_dir).is_dir() else "/"
    assert exec_server.follow(command_id) == ("completed:0", f"hello $USER|{home}\n")


def test_kill_takes_the_whole_tree_even_sigterm_ignorers_and_escapees(exec_server, gone):
    """kill leaves nothing behind: children ignoring SIGTERM and children that setsid'd away die too."""
    command_id = exec_server.run("bash", "-c", TREE, timeout=600)
    logs = exec_server.wait_for_output(command_id, "leader ")
    exec_server.wait_for_output(command_id, "escaped ")
    logs = exec_server.wait_for_output(command_id, "stubborn ")
    pids = _pids(logs)
    assert set(pids) == {"stubborn", "escaped", "plain", "leader"}
    assert os.getsid(pids["escaped"]) != os.getsid(pids["leader"])
    assert exec_server.ok("kill", {"id": command_id})["status"] == "cancelled"
    assert gone(list(pids.values()))


def test_timeout_takes_the_whole_tree(exec_server, gone):
    """A timeout kills the same way as kill: the escaped and the stubborn children are gone too."""
    command_id = exec_server.run("bash", "-c", TREE, timeout=4)
    exec_server.wait_for_output(command_id, "escaped ")
    logs = exec_server.wait_for_output(command_id, "stubborn ")
    status, _ = exec_server.follow(command_id)
    assert status == "timeout"
    assert gone(list(_pids(logs).values()))


def test_background_children_of_a_finished_program_are_left_alone(exec_server, gone):
    """A program that starts something and exits (like xdg-open) completes; what it started lives on."""
    command_id = exec_server.run("sh", "-c", "setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $!")
    status, logs = exec_server.follow(command_id)
    assert status == "completed:0"
    survivor = int(logs)
    assert not gone([survivor], limit=0.5)
    os.kill(survivor, 9)


def test_programs_run_as_the_desktop_user_of_the_session(start_exec_server, tmp_path):
    """With a session and a root server, programs run as the session's unprivileged user, in its home."""
    if os.getuid() != 0:
        import pytest

        pytest.skip("switching to the desktop user needs a root server")
    import pwd

    desktop = pwd.getpwnam("desktop")
    data = tmp_path / "data"
    data.mkdir()
    # The session facts `codedesk desktop up` would write; only the user matters here.
    write_session(
        SessionInfo(
            data_dir=data, display=":4242", env={"DISPLAY": ":4242", "XDG_SESSION_TYPE": "x11"},
            devtools_url="http://127.0.0.1:1", chromium_command=[], user="desktop",
            uid=desktop.pw_uid, gid=desktop.pw_gid, home=Path(desktop.pw_dir),
        )
    )
    server = start_exec_server(data)
    command_id = server.run("sh", "-c", 'echo "$(id -un) $(id -u) $(pwd) $HOME $USER $DISPLAY"; echo x > exec-test-owner-$$')
    status, logs = server.follow(command_id)
    assert status == "completed:0", logs
    assert logs == f"desktop {desktop.pw_uid} {desktop.pw_dir} {desktop.pw_dir} desktop :4242\n"
    record = server.ok("search_logs", {"id": command_id, "pattern": "desktop"})
    assert record["matches"][0]["offset"] == 0
    made = [p for p in Path(desktop.pw_dir).glob("exec-test-owner-*")]
    try:
        assert made and all(p.stat().st_uid == desktop.pw_uid for p in made)
    finally:
        for p in made:
            p.unlink()
