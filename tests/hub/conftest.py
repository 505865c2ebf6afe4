"""The hub as its users run it: `codedesk hub` in a process of its own, over real HTTP."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CODEDESK = [sys.executable, "-m", "runtime.cli"]


class HubProcess:
    """One `codedesk hub` process on a free loopback port, with its own data directory."""

    def __init__(self, data: Path, token: str = "admin-token", *extra: str, env: dict[str, str] | None = None) -> None:
        self.data, self.token, self.extra = data, token, extra
        self.env = {**os.environ, **(env or {})}
        self.log = data / "hub.log"
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.start()

    def start(self, port: int = 0) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([*CODEDESK, "hub", "--http", f"127.0.0.1:{port}", "--data", str(self.data),
                                          "--token", self.token, *self.extra], cwd=ROOT, env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = re.search(r"codedesk hub: (http://\S+)", self.log.read_text(errors="replace").split("\n=== restart\n")[-1])
            if found:
                self.url = found.group(1)
                try:
                    if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            if self.proc.poll() is not None:
                raise AssertionError(f"the hub exited at start:\n{self.log.read_text()}")
            time.sleep(0.1)
        raise AssertionError(f"the hub did not answer:\n{self.log.read_text()}")

    def restart_after_kill(self) -> None:
        """SIGKILL (no cleanup at all), then the same command on the same port and data."""
        port = int(self.url.rsplit(":", 1)[1])
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        with open(self.log, "a") as log:
            log.write("\n=== restart\n")
        self.start(port)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def hub_id(self) -> str:
        with sqlite3.connect(self.data / "hub.sqlite3") as db:
            return db.execute("SELECT value FROM meta WHERE key = 'hub_id'").fetchone()[0]

    def api(self, method: str, path: str, token: str | None = None, **kwargs) -> httpx.Response:
        token = self.token if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.request(method, self.url + path, headers=headers, timeout=300, **kwargs)


@pytest.fixture
def hub_factory(tmp_path):
    made: list[HubProcess] = []

    def make(*extra: str, env: dict[str, str] | None = None, token: str = "admin-token") -> HubProcess:
        hub = HubProcess(tmp_path / f"hub{len(made)}", token, *extra, env=env)
        made.append(hub)
        return hub

    yield make
    for hub in made:
        hub.stop()
