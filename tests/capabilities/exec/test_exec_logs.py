"""The log: byte offsets, bounded chunks, search, and memory that stays flat however much is printed."""

from __future__ import annotations

import time

from capabilities.exec.log_store import CHUNK_BYTES

MB = 1 << 20


def test_streaming_by_offsets_reassembles_the_log_exactly(exec_server):
    """Reading from each next_offset while the program runs yields every byte once, in order."""
    script = 'i=0; while [ $i -lt 40 ]; do echo "line $i é"; i=$((i+1)); sleep 0.02; done'
    command_id = exec_server.run("sh", "-c", script)
    status, logs = exec_server.follow(command_id)
    assert status == "completed:0"
    assert logs == "".join(f"line {i} é\n" for i in range(40))
    on_disk = (exec_server.data / "exec" / f"{command_id}.log").read_bytes()
    assert logs.encode() == on_disk


def test_chunks_are_bounded_and_say_there_is_more(exec_server):
    """A big log comes in chunks of at most CHUNK_BYTES, `more: true` until the end, even after exit."""
    command_id = exec_server.run("sh", "-c", "yes 'é 0123456789 abcdefghijklmnopqrstuvwxyz' | head -c 3000000")
    while exec_server.ok("stream_logs", {"id": command_id, "offset": 0})["status"] == "running":
        time.sleep(0.05)
    offset, pieces, answers = 0, [], []
    while True:
        r = exec_server.ok("stream_logs", {"id": command_id, "offset": offset})
        answers.append(r)
        pieces.append(r["logs"])
        assert len(r["logs"].encode()) <= CHUNK_BYTES
        assert r["next_offset"] == offset + len(r["logs"].encode())
        offset = r["next_offset"]
        if not r["more"]:
            break
    assert answers[0]["more"] is True and answers[0]["status"] == "completed:0"
    assert all(a["logs"].endswith("\n") for a in answers[:-1])  # full chunks end on a line
    assert offset == 3000000
    assert "".join(pieces).encode() == (exec_server.data / "exec" / f"{command_id}.log").read_bytes()


def test_a_chunk_never_splits_a_character(exec_server):
    """A multibyte character cut by the chunk limit comes whole in the next chunk, not as garbage."""
    # One long line of 3-byte characters: no line break to cut at, so the cut falls mid-stream.
    command_id = exec_server.run("sh", "-c", "yes '€' | tr -d '\\n' | head -c 3000000")
    status, logs = exec_server.follow(command_id)
    assert status == "completed:0"
    assert logs == "€" * 1000000


def test_search_offsets_are_stream_offsets(exec_server):
    """Each match's offset is where stream_logs, from that offset, starts with the matching line."""
    script = 'for i in $(seq 1 300); do echo "row $i é"; [ $((i % 50)) -eq 0 ] && echo "ERROR at $i"; done; true'
    command_id = exec_server.run("sh", "-c", script)
    exec_server.follow(command_id)
    found = exec_server.ok("search_logs", {"id": command_id, "pattern": r"ERROR at \d+"})
    assert [m["line"] for m in found["matches"]] == [f"ERROR at {i}" for i in range(50, 301, 50)]
    assert found["truncated"] is False
    for match in found["matches"]:
        r = exec_server.ok("stream_logs", {"id": command_id, "offset": match["offset"]})
        assert r["logs"].startswith(match["line"] + "\n")


def test_search_results_are_bounded(exec_server):
    """A pattern matching everything answers a bounded list and says it was cut."""
    command_id = exec_server.run("seq", "1", "5000")
    exec_server.follow(command_id)
    found = exec_server.ok("search_logs", {"id": command_id, "pattern": "."})
    assert found["truncated"] is True and len(found["matches"]) == 1000
    assert "narrower pattern" in found["hint"]


def test_a_200_mb_log_keeps_server_memory_flat(start_exec_server, tmp_path):
    """200 MB of output goes to disk, not into the server: its RSS stays flat while printing,
    reading the log back in chunks, and searching it."""
    server = start_exec_server(tmp_path / "data")
    process = server.process
    server.follow(server.run("true"))  # warm the code paths before the baseline
    baseline = process.memory_info().rss
    peak = baseline
    command_id = server.run(
        "sh", "-c", "yes 'a line of log output, fifty bytes long, more or l' | head -c 200000000; echo THE END",
        timeout=300,
    )
    while server.ok("stream_logs", {"id": command_id, "offset": 0})["status"] == "running":
        peak = max(peak, process.memory_info().rss)
        time.sleep(0.1)
    log = server.data / "exec" / f"{command_id}.log"
    assert log.stat().st_size == 200000000 + len("THE END\n")
    # Read the tail through stream_logs and search the whole log: both bounded too.
    r = server.ok("stream_logs", {"id": command_id, "offset": log.stat().st_size - 100})
    assert r["logs"].endswith("THE END\n") and r["status"] == "completed:0"
    found = server.ok("search_logs", {"id": command_id, "pattern": "^THE END$"})
    assert found["matches"] == [{"line": "THE END", "offset": 200000000}]
    peak = max(peak, process.memory_info().rss)
    assert peak - baseline < 20 * MB, f"server RSS grew by {(peak - baseline) / MB:.1f} MB"
