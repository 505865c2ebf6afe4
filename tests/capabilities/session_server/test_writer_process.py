"""The timeline's writer process: what the runtime hands it is committed, the known secrets never
reach its command line or environment, a killed writer is replaced without the runtime seeing an
error, and a runtime killed with SIGKILL loses nothing it had handed over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from capabilities.session_server.redaction import REDACTED
from capabilities.session_server.store import Event, TimelineReader
from capabilities.session_server.writer_process import WriterProcess

SECRET = "tok-writer-secret-4321"


def _call(seq: int, **arguments) -> Event:
    return Event(time.time(), "r1", seq, "call", "exec", "exec", arguments=arguments)


def test_what_is_handed_over_is_committed_and_the_secrets_are_not_on_its_command_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEDESK_SOME_TOKEN", "env-secret-8765")  # the runtime's own: not the writer's
    writer = WriterProcess(tmp_path / "timeline", [SECRET])
    try:
        writer.record(_call(1, note=f"say {SECRET}", password="hunter22"))
        writer.record(_call(2, echo="hunter22", odd=object()))  # not JSON: recorded as its repr
        writer.flush()
        pid = writer.pid
        for name in ("cmdline", "environ"):
            seen = Path(f"/proc/{pid}/{name}").read_bytes()
            assert SECRET.encode() not in seen and b"env-secret-8765" not in seen
        with TimelineReader(tmp_path / "timeline") as reader:
            first, second = reader.entries(run="r1")
        assert first["arguments"] == {"note": f"say {REDACTED}", "password": REDACTED}
        assert second["arguments"]["echo"] == REDACTED and second["arguments"]["odd"].startswith("<object")
    finally:
        writer.close()
    assert writer.pid is None


def test_a_killed_writer_is_replaced_and_the_runtime_sees_no_error(tmp_path):
    writer = WriterProcess(tmp_path / "timeline", [])
    try:
        writer.record(_call(1))
        writer.flush()
        first = writer.pid
        os.kill(first, signal.SIGKILL)
        while writer._child.poll() is None:
            time.sleep(0.01)
        writer.record(_call(2))  # the pipe is broken: a new writer takes this event
        writer.flush()
        assert writer.pid not in (None, first)
        with TimelineReader(tmp_path / "timeline") as reader:
            assert [entry["seq"] for entry in reader.entries(run="r1")] == [1, 2]
    finally:
        writer.close()


def test_a_runtime_killed_with_sigkill_loses_nothing_it_handed_over(tmp_path):
    """The events are in the pipe or in the writer when the runtime dies: all are committed."""
    folder = tmp_path / "timeline"
    program = textwrap.dedent(f"""
        import os, signal, time
        from pathlib import Path
        from capabilities.session_server.store import Event
        from capabilities.session_server.writer_process import WriterProcess
        writer = WriterProcess(Path({str(folder)!r}), [])
        for seq in range(1, 501):
            writer.record(Event(time.time(), "r1", seq, "call", "exec", "exec", arguments={{"n": seq}}))
        print(writer.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    runtime = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                             cwd=Path(__file__).resolve().parents[3])
    assert runtime.returncode == -signal.SIGKILL, runtime.stderr
    child = int(runtime.stdout.split()[0])
    deadline = time.monotonic() + 30
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.05)  # the writer ends once it has written what the pipe held
    assert not _running(child), "the writer outlived its runtime's pipe"
    with TimelineReader(folder) as reader:
        assert [entry["seq"] for entry in reader.entries(run="r1", limit=1000)] == list(range(1, 501))


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
