"""Screen video: a script starts the session's recorder (ffmpeg, x11grab, as the viewer account),
the segments play for as long as it recorded (ffprobe reads them), the HTML export links them,
and the retention limit deletes old segments; a recording the operator started cannot be
stopped by a script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from runtime.desktop.layout import DesktopUser
from runtime.desktop.video import Retention, VideoError, VideoRecorder, prune, segment_times, segments


def _video(runtime, action: str, **extra) -> dict:
    args = json.dumps({"action": action, **extra})
    out = runtime.run_js(f"JSON.stringify(await tools.session.screen_video({args}))", timeout_seconds=60)
    assert not out.is_error, out.text
    return json.loads(out.text)


def _duration(path: str) -> float:
    probe = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", path],
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    return float(probe.stdout.strip())


def test_a_script_records_the_screen_in_segments_that_play(desktop_runtime, desktop_session) -> None:
    folder = desktop_session.data_dir / "video"
    before = set(os.listdir(folder)) if folder.exists() else set()
    started = time.time()
    state = _video(desktop_runtime, "start", segmentSeconds=4)
    assert state["recording"] and state["startedBy"] == "script" and state["segmentSeconds"] == 4
    try:
        assert Path(state["folder"]) == folder
        if os.geteuid() == 0:
            assert folder.stat().st_uid != desktop_session.info.uid and folder.stat().st_mode & 0o077 == 0
        # ffmpeg opens its first segment with its first frame (seconds on a loaded machine)
        deadline = time.monotonic() + 60
        while not set(os.listdir(folder)) - before:
            assert time.monotonic() < deadline, "no segment after 60 s"
            time.sleep(0.2)
        time.sleep(11)
    finally:
        state = _video(desktop_runtime, "stop")
    stopped = time.time()
    assert not state["recording"]
    names = [s["name"] for s in state["segments"] if s["name"] not in before]
    assert len(names) >= 3, state  # 11 s and more in 4 s segments
    assert all(re.fullmatch(r"\d{8}-\d{6}\.mp4", n) for n in names)
    durations = {n: _duration(str(folder / n)) for n in names}
    # the video covers the time it was recorded: from its first segment's start (its name) to the stop
    first = min(start for path, start, _ in segment_times(folder) if Path(path).name in names)
    recorded = stopped - first
    log = desktop_session.data_dir / "logs" / "ffmpeg.log"
    assert sum(durations.values()) >= 10 and abs(sum(durations.values()) - recorded) <= 2.5, (
        f"{sum(durations.values()):.1f} s of video for {recorded:.1f} s of recording: {durations}; ffmpeg's log: "
        f"{log.read_text()[-2000:] if log.exists() else 'none'}")

    export = json.loads(desktop_runtime.run_js(
        f"JSON.stringify(await tools.session.timeline_export({{format: 'html', since: {started}}}))").text)
    report = Path(export["path"]).read_text()
    assert "Screen video:" in report and names[0] in report


def test_the_operators_recording_cannot_be_stopped_by_a_script(tmp_path) -> None:
    recorder = VideoRecorder(tmp_path, ":0", DesktopUser.resolve(), {}, tmp_path / "ffmpeg.log", lambda: (640, 480))
    recorder.started_by = "operator"  # as `desktop up --video` leaves it
    with pytest.raises(VideoError, match="a script cannot stop it"):
        recorder.stop("script")
    assert recorder.recording
    with pytest.raises(VideoError, match="segmentSeconds must be 2 to 600"):
        VideoRecorder(tmp_path, ":0", DesktopUser.resolve(), {}, tmp_path / "l", lambda: (1, 1)).start("script", 1)


def test_retention_deletes_old_segments_first_then_the_oldest_over_the_size_limit(tmp_path) -> None:
    now = time.time()
    for i, (age_hours, size) in enumerate([(30, 100), (5, 400), (4, 400), (3, 400), (0, 400)]):
        path = tmp_path / f"20260101-00000{i}.mp4"
        path.write_bytes(b"x" * size)
        os.utime(path, (now - age_hours * 3600, now - age_hours * 3600))
    (tmp_path / "notes.txt").write_text("not a segment")
    (tmp_path / "20260101-000009.mp4").symlink_to("/etc/passwd")  # planted: never followed, never counted
    keep = Retention(keep_bytes=1000, keep_seconds=24 * 3600)
    removed = prune(tmp_path, keep, now=now, writing="20260101-000004.mp4")
    # 30 h old: gone for its age; then 1,600 bytes left over 1,000: the oldest go until it fits
    assert removed == ["20260101-000000.mp4", "20260101-000001.mp4", "20260101-000002.mp4"]
    assert [name for name, _, _ in segments(tmp_path)] == ["20260101-000003.mp4", "20260101-000004.mp4"]
    assert (tmp_path / "notes.txt").exists() and Path("/etc/passwd").exists()
    # the segment being written is kept even alone over the limit
    assert prune(tmp_path, Retention(keep_bytes=1, keep_seconds=1), now=now + 7200,
                 writing="20260101-000004.mp4") == ["20260101-000003.mp4"]
