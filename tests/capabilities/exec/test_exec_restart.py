"""Logs and statuses across restarts of the server: interrupted commands, ids, retention."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest

from capabilities.exec.log_store import RETENTION_SECONDS, CommandRecord, LogStore


def _pids(logs: str) -> dict[str, int]:
    return {name: int(pid) for name, pid in re.findall(r"^(\w+) (\d+)$", logs, re.M)}


@pytest.mark.parametrize("stop", ["stdin closed", "SIGTERM"])
def test_stopped_server_leaves_failed_interrupted_with_the_log_intact(start_exec_server, tmp_path, gone, stop):
    """A command running when its server stops (its client goes away, or it is told to stop)
    ends, reads failed:interrupted after a restart, and its log is still there, next to the
    finished commands' logs and statuses."""
    data = tmp_path / "data"
    first = start_exec_server(data)
    done = first.run("echo", "finished before")
    assert first.follow(done)[0] == "completed:0"
    running = first.run("sh", "-c", "echo before; sleep 1000 & echo child $!; wait", timeout=600)
    pids = _pids(first.wait_for_output(running, "child "))
    if stop == "SIGTERM":
        server = first.process
        server.send_signal(signal.SIGTERM)
        server.wait(10)
        # The server recorded the interruption itself on its way out.
        assert json.loads((data / "exec" / f"{running}.json").read_text())["status"] == "failed:interrupted"
    first.stop()
    assert gone(list(pids.values()))

    second = start_exec_server(data)
    status, logs = second.follow(running)
    assert status == "failed:interrupted"
    assert logs.startswith("before\n")
    assert second.follow(done) == ("completed:0", "finished before\n")
    found = second.ok("search_logs", {"id": running, "pattern": "^before$"})
    assert found["matches"] == [{"line": "before", "offset": 0}]
    new = second.run("true")
    assert new not in (done, running)


def test_killed_server_leaves_nothing_running_and_failed_interrupted(start_exec_server, tmp_path, gone):
    """If the server is killed outright, its program dies with it, whatever the program started
    (even a child that left the session) is ended by the next server, and the command reads
    failed:interrupted with its log."""
    data = tmp_path / "data"
    first = start_exec_server(data)
    script = "trap '' TERM; echo before; setsid sleep 1000 & echo escaped $!; sleep 1000 & echo child $!; wait"
    running = first.run("bash", "-c", script, timeout=600)
    first.wait_for_output(running, "escaped ")
    pids = _pids(first.wait_for_output(running, "child "))
    record = json.loads((data / "exec" / f"{running}.json").read_text())
    first.process.send_signal(signal.SIGKILL)
    assert gone([record["pid"]])  # the kernel ended the program with its server
    first.stop()

    second = start_exec_server(data)
    status, logs = second.follow(running)
    assert status == "failed:interrupted"
    assert logs.startswith("before\n")
    assert gone(list(pids.values()))


def test_a_second_server_leaves_the_first_servers_commands_alone(start_exec_server, tmp_path, workdir):
    """Two servers on one data dir: starting the second does not interrupt the first's commands,
    and the second sees them run and end."""
    data = tmp_path / "data"
    flag = workdir / "go"
    first = start_exec_server(data)
    command_id = first.run("sh", "-c", 'while [ ! -e "$0" ]; do sleep 0.05; done; echo done', str(flag))
    second = start_exec_server(data)
    assert second.ok("stream_logs", {"id": command_id, "offset": 0})["status"] == "running"
    flag.touch()
    assert second.follow(command_id) == ("completed:0", "done\n")


def test_logs_older_than_seven_days_are_removed_on_start(start_exec_server, tmp_path):
    """Logs are kept 7 days after their command ended, then the next server start removes them."""
    data = tmp_path / "data"
    store = LogStore(data / "exec")
    now = time.time()
    kept = {}
    for name, age in (("old", RETENTION_SECONDS + 3600), ("recent", RETENTION_SECONDS - 3600)):
        record, fd = store.create(
            lambda command_id, age=age: CommandRecord(
                id=command_id, bin="echo", args=[name], cwd="/", timeout=5, user="x",
                started_at=now - age - 1, ended_at=now - age, status="completed:0",
                owner_pid=1, owner_started=0.0, boot_id="",
            )
        )
        with open(fd, "w") as log:
            log.write(f"{name}\n")
        store.save(record)
        kept[name] = record.id
    server = start_exec_server(data)
    assert server.follow(kept["recent"]) == ("completed:0", "recent\n")
    assert "no command with id" in server.refused("stream_logs", {"id": kept["old"], "offset": 0})
    assert not (data / "exec" / f"{kept['old']}.log").exists()
