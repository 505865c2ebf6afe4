"""Each status string of the spec, as stream_logs and kill report it."""

from __future__ import annotations


def test_exec_returns_started_and_status_reads_running(exec_server):
    """exec answers at once with an id, and a program still going reads `running`."""
    command_id = exec_server.run("sleep", "30", timeout=60)
    r = exec_server.ok("stream_logs", {"id": command_id, "offset": 0})
    assert r["status"] == "running"
    assert r["logs"] == "" and r["next_offset"] == 0
    assert exec_server.ok("kill", {"id": command_id})["status"] == "cancelled"


def test_completed_zero_with_stdout_and_stderr_in_one_log(exec_server):
    """A program that succeeds reads `completed:0`, with stdout and stderr in the same log."""
    command_id = exec_server.run("sh", "-c", "echo out; echo err >&2")
    status, logs = exec_server.follow(command_id)
    assert status == "completed:0"
    assert logs.splitlines() == ["out", "err"]


def test_failing_program_is_a_result_not_an_error(exec_server):
    """A non-zero exit is `completed:<code>` in a normal result: the call itself worked."""
    command_id = exec_server.run("sh", "-c", "echo nope >&2; exit 2")
    is_error, r = exec_server.call("stream_logs", {"id": command_id, "offset": 0})
    status, logs = exec_server.follow(command_id)
    assert not is_error
    assert status == "completed:2"
    assert logs == "nope\n"


def test_timeout_kills_the_program_and_reads_timeout(exec_server, gone):
    """When `timeout` seconds pass the command is killed, with its children, and reads `timeout`."""
    command_id = exec_server.run("sh", "-c", "sleep 300 & echo child $!; wait", timeout=2)
    logs = exec_server.wait_for_output(command_id, "child ")
    child = int(logs.split()[1])
    status, _ = exec_server.follow(command_id)
    assert status == "timeout"
    assert gone([child])


def test_kill_reads_cancelled(exec_server):
    """kill stops a running command and both kill and stream_logs then say `cancelled`."""
    command_id = exec_server.run("sleep", "300", timeout=600)
    assert exec_server.ok("kill", {"id": command_id}) == {"id": command_id, "status": "cancelled"}
    assert exec_server.follow(command_id)[0] == "cancelled"


def test_kill_after_the_end_keeps_the_final_status(exec_server):
    """Killing a command that already ended changes nothing: it keeps its `completed:0`."""
    command_id = exec_server.run("true")
    assert exec_server.follow(command_id)[0] == "completed:0"
    assert exec_server.ok("kill", {"id": command_id})["status"] == "completed:0"


def test_missing_bin_reads_failed_not_found(exec_server):
    """A program that does not exist reads `failed:not found`, and the log says what was looked for."""
    command_id = exec_server.run("no-such-program-here")
    status, logs = exec_server.follow(command_id)
    assert status == "failed:not found"
    assert "no-such-program-here" in logs


def test_missing_path_reads_failed_not_found(exec_server, tmp_path):
    """A `bin` given as a path that does not exist is `failed:not found` too."""
    command_id = exec_server.run(str(tmp_path / "missing.sh"))
    assert exec_server.follow(command_id)[0] == "failed:not found"


def test_program_killed_by_a_signal_reads_failed(exec_server):
    """A program killed by a signal has no exit code: `failed:killed by SIGKILL`."""
    command_id = exec_server.run("sh", "-c", "kill -KILL $$")
    assert exec_server.follow(command_id)[0] == "failed:killed by SIGKILL"


def test_unknown_id_is_refused_with_a_hint(exec_server):
    """An id that was never returned by exec is an error that says where ids come from."""
    message = exec_server.refused("stream_logs", {"id": "20200101-000000-00000000", "offset": 0})
    assert "no command with id 20200101-000000-00000000" in message


def test_many_commands_at_once(exec_server):
    """Twenty commands run side by side, each with its own log and status."""
    ids = [exec_server.run("sh", "-c", 'sleep 0.5; echo "I am $0"; exit $1', f"n{i}", str(i % 3)) for i in range(20)]
    for i, command_id in enumerate(ids):
        status, logs = exec_server.follow(command_id)
        assert (status, logs) == (f"completed:{i % 3}", f"I am n{i}\n")
    assert len(set(ids)) == 20


def test_non_executable_bin_reads_failed_permission_denied(exec_server, tmp_path):
    """A file that is not executable cannot be started: `failed:permission denied`, not an error."""
    script = tmp_path / "plain.txt"
    script.write_text("echo hi\n")
    command_id = exec_server.run(str(script))
    assert exec_server.follow(command_id)[0] == "failed:permission denied"
