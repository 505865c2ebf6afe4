"""How replay compares a call's arguments with its record: `[redacted]` in the record stands for
whatever the writer hid, which this process may not know (a secret learned in another run)."""

from __future__ import annotations

import time

from capabilities.session_server.redaction import REDACTED
from runtime.replay import _same


def test_a_redacted_record_matches_the_text_around_it_and_nothing_else():
    assert _same({"password": REDACTED, "n": 1}, {"password": "hunter22", "n": 1})
    assert _same({"text": f"type {REDACTED} now"}, {"text": "type hunter22 now"})
    assert _same({"text": f"{REDACTED} and {REDACTED}"}, {"text": "a1b2 and c3d4"})
    assert not _same({"text": f"type {REDACTED} now"}, {"text": "type hunter22 later"})
    assert not _same({"text": f"type {REDACTED} now"}, {"text": "type  now"})  # something was hidden there
    assert not _same({"text": f"{REDACTED} and {REDACTED}"}, {"text": "and"})
    assert not _same({"password": REDACTED, "n": 1}, {"password": "x", "n": 2})
    assert not _same({"a": [1, 2]}, {"a": [1, 2, 3]}) and not _same({"a": 1}, {"a": 1, "b": 2})


def test_a_record_full_of_markers_is_compared_in_linear_time():
    """A script can write `[redacted]` itself, as often as it likes: no backtracking match."""
    recorded = ("x" + REDACTED) * 20_000 + "y"
    started = time.perf_counter()
    assert not _same(recorded, "x" * 400_000 + "z")
    assert time.perf_counter() - started < 5  # a regex of 20,000 `.+?` gaps would not finish
