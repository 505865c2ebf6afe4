"""The oversight relay (the supervisor's) and the runtime's end of it, over real unix sockets:
an ask goes to the viewers and the first answer comes back to the runtime that asked; with no
viewer connected it is answered "unwatched" at once; events reach viewers live and, for those
connecting later, from the recent ones kept; a person's input is coalesced for the recorder; a
hostile viewer (garbage, an answer to an ask it made up) changes nothing."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from runtime.approval import ApprovalRequest, changed, element_targets, read_target
from runtime.desktop.oversight import OversightRelay
from runtime.desktop.video import VideoError
from runtime.oversight import Oversight, VideoUnavailable

pytestmark = pytest.mark.anyio


class _Viewer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, path: Path) -> _Viewer:
        return cls(*await asyncio.open_unix_connection(str(path)))

    async def next(self, kind: str | None = None) -> dict:
        while True:
            message = json.loads(await asyncio.wait_for(self.reader.readline(), 10))
            if kind is None or message["t"] == kind:
                return message

    def send(self, message: dict | bytes) -> None:
        self.writer.write(message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n")


def _recorder(action: str, seconds: int | None) -> dict:
    """A stand-in for the supervisor's recorder, refusing what the real one refuses a script."""
    if action == "stop":
        raise VideoError("the operator turned this recording on; a script cannot stop it", "refused")
    return {"recording": True, "segments": [], "folder": "/data/video", "segmentSeconds": seconds or 60}


@pytest.fixture
async def relay(tmp_path):
    viewer_dir = tmp_path / "viewer"
    viewer_dir.mkdir()
    relay = OversightRelay(view_only=False, lease_holder=lambda: "agent", video=_recorder)
    await relay.serve(viewer_dir, tmp_path / "oversight.sock", None, None)
    yield relay, viewer_dir / "oversight.sock", tmp_path / "oversight.sock"
    relay.close()


@asynccontextmanager
async def _connected(path: Path, **kwargs) -> AsyncIterator[Oversight]:
    """The runtime's end, connected to the relay at `path` while the block runs."""
    oversight = Oversight(path=path, **kwargs)
    task = asyncio.ensure_future(oversight.connect_forever())
    try:
        for _ in range(200):
            if oversight.connected:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the runtime's end never connected")
        yield oversight
    finally:
        task.cancel()


async def test_an_ask_with_no_viewer_is_unwatched_and_with_one_gets_the_first_answer(relay) -> None:
    relay, viewer_path, runtime_path = relay
    async with _connected(runtime_path) as oversight:
        request = ApprovalRequest("exec", "exec", {"bin": "ls", "password": "hunter22"}, "exec.exec").shown()
        assert await oversight.ask(request, timeout=5) is None  # nobody watching: asked elsewhere

        first, second = await _Viewer.connect(viewer_path), await _Viewer.connect(viewer_path)
        hello = await first.next("hello")
        assert hello["pending"] == [] and hello["lease"] == "agent"
        await second.next("hello")
        asking = asyncio.ensure_future(oversight.ask(request, timeout=10))
        shown = (await first.next("ask"))["request"]
        assert (shown["server"], shown["tool"], shown["rule"]) == ("exec", "exec", "exec.exec")
        assert '"bin": "ls"' in shown["arguments"] and "hunter22" not in shown["arguments"]  # redacted
        ask_id = (await second.next("ask"))["id"]
        first.send({"t": "answer", "id": ask_id, "answer": "decline"})
        second.send({"t": "answer", "id": ask_id, "answer": "accept"})  # too late: the first answer won
        assert await asking == "decline"
        assert (await second.next("closed"))["answer"] == "decline"
        assert relay.pending == {}
        for viewer in (first, second):
            viewer.writer.close()


async def test_an_unanswered_ask_times_out_and_is_withdrawn_from_the_viewers(relay) -> None:
    relay, viewer_path, runtime_path = relay
    async with _connected(runtime_path) as oversight:
        viewer = await _Viewer.connect(viewer_path)
        await viewer.next("hello")
        request = ApprovalRequest("test", "echo", {"text": "a"}, "test.echo").shown()
        assert await oversight.ask(request, timeout=0.5) == "timeout"
        assert (await viewer.next("closed"))["answer"] == "withdrawn"
        # an ask cancelled with its run is withdrawn too
        asking = asyncio.ensure_future(oversight.ask(request, timeout=30))
        ask_id = (await viewer.next("ask"))["id"]
        asking.cancel()
        closed = await viewer.next("closed")
        assert closed["id"] == ask_id and closed["answer"] == "withdrawn"
        viewer.writer.close()


async def test_events_reach_viewers_live_and_later_ones_from_the_recent_kept(relay) -> None:
    relay, viewer_path, runtime_path = relay
    async with _connected(runtime_path) as oversight:
        live = await _Viewer.connect(viewer_path)
        await live.next("hello")

        async def echo(server, tool, args):
            return {"content": [{"type": "text", "text": "ok"}]}

        watched = oversight.watch("run-1", "js", "await tools.browser.desktop_execute(...)", echo)
        await watched.call_tool("browser", "desktop_execute", {"operations": [
            {"type": "mouse.click", "params": {"x": 10, "y": 20}}, {"type": "keyboard.type", "params": {"text": "s3cr3t"}}]})
        watched.end(True)
        kinds = [(await live.next("event"))["e"] for _ in range(4)]
        assert [e["kind"] for e in kinds] == ["run_start", "call", "result", "run_end"]
        call = kinds[1]
        assert call["step"] == "mouse.click, keyboard.type" and "s3cr3t" not in json.dumps(call)
        assert call["targets"] == [{"x": 10, "y": 20, "type": "mouse.click"}]
        assert kinds[2]["ok"] is True and kinds[3]["calls"] == 1
        later = await _Viewer.connect(viewer_path)
        assert [e["kind"] for e in (await later.next("hello"))["recent"]] == ["run_start", "call", "result", "run_end"]
        for viewer in (live, later):
            viewer.writer.close()


async def test_a_persons_input_is_coalesced_for_the_first_runtime_only(relay) -> None:
    relay, _, runtime_path = relay
    heard: list[tuple[int, float, float]] = []
    other: list[tuple[int, float, float]] = []
    async with (_connected(runtime_path, on_input=lambda *a: heard.append(a)),
                _connected(runtime_path, on_input=lambda *a: other.append(a))):
        for i in range(30):
            relay.person_input(2, 1000.0 + i / 100)
        for _ in range(200):
            if heard:
                break
            await asyncio.sleep(0.02)
        assert heard == [(60, 1000.0, 1000.29)]
        assert other == []


async def test_a_hostile_viewer_can_neither_answer_what_was_not_asked_nor_break_the_relay(relay) -> None:
    relay, viewer_path, runtime_path = relay
    async with _connected(runtime_path) as oversight:
        hostile = await _Viewer.connect(viewer_path)
        await hostile.next("hello")
        hostile.send({"t": "answer", "id": "made-up", "answer": "accept"})
        hostile.send({"t": "answer", "id": "x", "answer": "yes please"})
        assert "answer" in (await hostile.next("error"))["message"]
        hostile.send(b"\xff\xfe not json\n")
        assert await asyncio.wait_for(hostile.reader.read(), 5) == b""  # cut off
        hostile.writer.close()
        viewer = await _Viewer.connect(viewer_path)
        await viewer.next("hello")
        asking = asyncio.ensure_future(oversight.ask({"server": "t", "tool": "u", "arguments": {}}, timeout=10))
        viewer.send({"t": "answer", "id": (await viewer.next("ask"))["id"], "answer": "accept"})
        assert await asking == "accept"
        viewer.writer.close()


async def test_without_a_relay_nothing_is_sent_and_an_ask_is_unwatched(tmp_path) -> None:
    oversight = Oversight(path=tmp_path / "none.sock")
    oversight.run_started("r", "js", "1")
    assert await oversight.ask({"server": "t", "tool": "u", "arguments": {}}, timeout=5) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to try the socket as another user")
async def test_the_runtime_socket_refuses_another_user(relay) -> None:
    """A program of the desktop user reaching the socket could approve nothing, but could watch
    and make asks: the socket is 0600 and each peer's uid is checked."""
    _, _, runtime_path = relay
    assert runtime_path.stat().st_mode & 0o077 == 0
    proc = await asyncio.create_subprocess_exec(
        "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "python3", "-c",
        f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(runtime_path)!r}); print('connected')",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert b"connected" not in out and b"Permission denied" in err


async def test_an_exec_approval_is_bound_to_its_program_and_files(tmp_path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("echo one\n")

    async def no_call(*args):
        raise AssertionError("exec's target is read from the disk, not through a server")

    args = {"bin": "sh", "args": [str(script.name), "--flag"], "cwd": str(tmp_path)}
    before = await read_target(no_call, "exec", "exec", args)
    assert set(before["files"]) == {"sh", "job.sh"}
    assert changed(before, await read_target(no_call, "exec", "exec", args)) is None
    script.write_text("rm -rf ~\n")
    assert changed(before, await read_target(no_call, "exec", "exec", args)) == \
        "the file job.sh changed after it was shown"
    assert await read_target(no_call, "test", "echo", {"text": "a"}) == {}


async def test_an_exec_approval_never_reads_what_is_not_a_regular_file(tmp_path) -> None:
    """A script under an `ask` rule names /dev/zero as its program and a FIFO as an argument:
    the runtime (root) names them in the binding without reading them, at once (reading would
    hold a thread forever)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    async def no_call(*args):
        raise AssertionError("exec's target is read from the disk, not through a server")

    with anyio.fail_after(10):
        target = await read_target(no_call, "exec", "exec", {"bin": "/dev/zero", "args": ["pipe"],
                                                             "cwd": str(tmp_path)})
    assert target["files"]["/dev/zero"].startswith("not a regular file")
    assert "pipe" not in target["files"]  # not a file: an argument binds only regular files
    with anyio.fail_after(10):
        target = await read_target(no_call, "exec", "exec", {"bin": "./pipe", "cwd": str(tmp_path)})
    assert target["files"]["./pipe"].startswith("not a regular file")


async def test_the_recorders_answers_and_refusals_reach_the_runtime_with_their_kind(relay) -> None:
    _, _, runtime_path = relay
    async with _connected(runtime_path) as oversight:
        assert (await oversight.video("start", 4))["segmentSeconds"] == 4
        with pytest.raises(VideoUnavailable, match="a script cannot stop it") as refused:
            await oversight.video("stop")
        assert refused.value.kind == "refused"


def test_a_browser_approval_binds_the_elements_its_steps_target_before_the_page_changes() -> None:
    batch = {"operations": [
        {"type": "click", "params": {"ref": "ref_3"}},
        {"type": "drag", "params": {"from": {"selector": "#a"}, "to": {"x": 5, "y": 6}}},
        {"type": "type", "params": {"selector": "#a", "text": "x"}},  # named once
        {"type": "navigate", "params": {"url": "http://x/"}},
        {"type": "click", "params": {"selector": "#on-the-next-page"}},  # not there yet: not bound
    ]}
    assert element_targets(batch) == ['[data-codedesk-ref="ref_3"]', "#a"]
    shown = {"url": "http://x/", "elements": [{"selector": "#a", "count": 1, "tag": "button", "text": "Go"}]}
    assert changed(shown, shown) is None
    assert changed(shown, {**shown, "elements": [{**shown["elements"][0], "text": "Delete"}]}) == \
        "the element '#a' changed after it was shown (its text)"
    assert changed(shown, {**shown, "url": "http://y/"}) == "the tab went from http://x/ to http://y/ after it was shown"
    # what a person is shown is not what binds: a screenshot alone never makes a call stale
    assert changed({"preview": {"image": "AAAA"}}, {}) is None


async def test_a_hostile_page_cannot_bloat_or_break_a_browser_approval() -> None:
    """The elements' state is what the batch's tab says, and the page may be hostile: extra
    fields, megabytes of text or a box of strings are cut to the binding's own shape, so what
    the viewers are sent stays small and comparing two readings never fails."""
    said = [{"count": 1, "tag": "button" * 100, "text": "x" * 10_000_000, "box": ["0px; evil", 1, 2, 3],
             "markup": 7, "extra": "y" * 1_000_000}, "not an element"]
    steps = []

    async def hostile_tab(server, tool, args):
        steps.append([op["type"] for op in args["operations"]])
        return {"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}], "isError": False,
                "structuredContent": {"results": [{"result": {"url": "u" * 100_000, "elements": said}}]}}

    batch = {"tab": "t", "operations": [{"type": "click", "params": {"selector": "#a"}},
                                        {"type": "click", "params": {"selector": "#b"}}]}
    state = await read_target(hostile_tab, "browser", "browser_execute", batch, preview=True)
    first, second = state["elements"]
    assert first == {"selector": "#a", "count": 1, "tag": ("button" * 100)[:40], "text": "x" * 200, "box": None,
                     "markup": 7}
    assert second["tag"] == "unreadable" and len(state["url"]) == 2000
    said[0]["extra"] = "changed"  # what the binding does not keep cannot make it stale, nor fail it
    assert changed(state, await read_target(hostile_tab, "browser", "browser_execute", batch)) is None
    # a batch with no element target reads only the screenshot
    await read_target(hostile_tab, "browser", "browser_execute", {"operations": [{"type": "press", "params": {"key": "a"}}]},
                      preview=True)
    assert steps == [["evaluate", "screenshot"], ["evaluate"], ["screenshot"]]

