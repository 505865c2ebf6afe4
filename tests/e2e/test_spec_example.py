"""The capability spec's exec example runs unchanged, on a session laid out as `make up` lays it.

`make up` run as root (CI, an operator's host, the container) keeps its session in /data, so the
spec's `/data/chrome/Downloads` is a real folder for programs too. This test starts (or joins) the
session at /data exactly as `make up` does and runs the spec's text through run_js, word for word.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from capabilities.session import data_dir
from runtime.descriptions import SPEC_EXEC_EXAMPLE
from tests.fixtures.runtime import runtime_env, start_runtime
from tests.fixtures.session import run_desktop_cli

pytestmark = pytest.mark.desktop


@pytest.fixture(scope="module")
def make_up_session():
    """The session `make up` would run: at the default data directory, /data for root."""
    if os.geteuid() != 0:
        pytest.skip("make up keeps its session in /data when run as root (as CI does); not root here")
    data = data_dir()
    assert data == Path("/data"), "root's default data directory is /data"
    status = run_desktop_cli("status", "--data", str(data), check=False)
    started_here = status.returncode != 0
    result = run_desktop_cli("up", "--data", str(data), check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    try:
        yield data
    finally:
        if started_here:
            run_desktop_cli("down", "--data", str(data), check=False)


def test_the_specs_exec_example_runs_word_for_word(make_up_session):
    """The spec's example is the model's first script: it must run exactly as written."""
    downloads = make_up_session / "chrome" / "Downloads"
    marker = downloads / f"spec-example-{os.getpid()}.txt"
    marker.write_text("listed\n")
    try:
        with start_runtime(runtime_env(make_up_session)) as client:
            outcome = client.run_js(SPEC_EXEC_EXAMPLE, timeout_seconds=90)
        assert not outcome.is_error, outcome.text
        assert outcome.text.startswith("completed:0 "), outcome.text
        assert marker.name in outcome.text and "total " in outcome.text
    finally:
        marker.unlink()
