"""End to end: hostile scripts generated at random (`tests/fuzz/generator.py`: 1-4 stressing
constructs, random sizes, random limits), run_js and run_py, six at a time, through the real
`codedesk serve` over stdio. Every run answers within its timeout plus 1.5 s, the runtime is
never restarted, a canary `1 + 1` answers after every batch, and the runtime's memory stays
within 256 MB of what it was at the start (once a batch's VMs are closed, which happens just
after its answers).

`make test` runs a few hundred with a fixed seed; `make fuzz` runs 10,000 with a random seed
(`CODEDESK_FUZZ_SCRIPTS`, `CODEDESK_FUZZ_SEED`) and prints it: a failure names its seed and
index, and `CODEDESK_FUZZ_SEED=<seed>` replays it (`CODEDESK_FUZZ_FROM=<index>` from that index).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fixtures.runtime import RuntimeClient, runtime_env, start_runtime, write_test_server_config
from tests.fuzz.generator import Script, script

SCRIPTS = int(os.environ.get("CODEDESK_FUZZ_SCRIPTS", "250"))
SEED = int(os.environ.get("CODEDESK_FUZZ_SEED", "0") or random.SystemRandom().randrange(1 << 32))
FIRST = int(os.environ.get("CODEDESK_FUZZ_FROM", "0"))  # replay from this index of the seed's sequence
BATCH = 6
PY_SHARE = 0.3  # of the scripts, run_py's (each costs more than a run_js)
ANSWER_GRACE_SECONDS = 1.5
MEMORY_GROWTH_BYTES = 256 << 20
MEMORY_SETTLE_SECONDS = 5.0


def _runtime_pids(config: Path) -> list[int]:
    """The `codedesk serve` processes started with `config` (its path is unique to this test)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and str(config).encode() in argv:
            pids.append(int(entry.name))
    return pids


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.fixture(scope="module")
def fuzz_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RuntimeClient, Path]]:
    """A runtime over stdio with the test server, warmed (both engines made, the server up)."""
    data = tmp_path_factory.mktemp("fuzz")
    config = write_test_server_config(data / "servers.json")
    with start_runtime(runtime_env(data), config=config) as client:
        assert client.run_js('(await mcp.callTool("test", "echo", {text: "up"})).content[0].text').text == "up"
        assert client.run_py("1 + 1").text == "2"
        yield client, config


def _run(rt: RuntimeClient, item: Script) -> tuple[Script, float, bool, str]:
    started = time.monotonic()
    call = rt.run_js if item.language == "js" else rt.run_py
    out = call(item.code, **item.arguments)
    return item, time.monotonic() - started, out.is_error, out.text


def test_generated_hostile_scripts_answer_in_time_and_never_take_the_runtime_down(fuzz_runtime, capsys) -> None:
    """Random compositions of hostile constructs each answer in time; the runtime never restarts,
    answers a canary after every batch, and keeps its memory."""
    rt, config = fuzz_runtime
    (pid,) = _runtime_pids(config)
    start_rss = peak_rss = _rss(pid)
    rng = random.Random(SEED)
    languages = ["py" if rng.random() < PY_SHARE else "js" for _ in range(FIRST + SCRIPTS)]
    items = [script(SEED, i, languages[i]) for i in range(FIRST, FIRST + SCRIPTS)]
    with capsys.disabled():
        print(f"\ngenerated scripts: {SCRIPTS} from index {FIRST}, seed {SEED} (replay: CODEDESK_FUZZ_SEED={SEED}"
              f" CODEDESK_FUZZ_FROM=<index>)", flush=True)
    outcomes: Counter[str] = Counter()
    late: list[str] = []  # every late answer is reported at the end, with its script
    grown: list[str] = []  # every batch after which the runtime held too much memory
    worst_overrun = -1e9
    started = time.monotonic()
    with ThreadPoolExecutor(BATCH) as pool:
        for first in range(0, len(items), BATCH):
            batch = items[first:first + BATCH]
            for item, took, is_error, text in pool.map(lambda s: _run(rt, s), batch):
                overrun = took - item.timeout
                worst_overrun = max(worst_overrun, overrun)
                if overrun > ANSWER_GRACE_SECONDS:
                    late.append(f"answered after {took:.2f} s: {item.describe(SEED)}\n--- answer:\n{text[:300]}")
                outcomes[f"{item.language} {_kind(is_error, text)}"] += 1
            canary = rt.run_js("1 + 1")
            assert (canary.is_error, canary.text) == (False, "2"), f"after batch at {FIRST + first}: {canary.text[:300]}"
            assert _runtime_pids(config) == [pid], f"the runtime restarted during the batch at {FIRST + first} (seed {SEED})"
            peak_rss = max(peak_rss, _rss(pid))
            rss = _settled_rss(pid, start_rss + MEMORY_GROWTH_BYTES)
            if rss - start_rss > MEMORY_GROWTH_BYTES:
                grown.append(f"{rss >> 20} MB after the batch at {FIRST + first}")
    with capsys.disabled():
        print(f"generated scripts: {SCRIPTS} answered in {time.monotonic() - started:.0f} s, worst answer "
              f"{worst_overrun:+.2f} s past its timeout; runtime RSS {start_rss >> 20} MB at start, "
              f"{peak_rss >> 20} MB at most, {_rss(pid) >> 20} MB at the end, {len(grown)} batches over "
              f"{start_rss + MEMORY_GROWTH_BYTES >> 20} MB; {len(late)} late; outcomes: "
              f"{dict(sorted(outcomes.items()))}", flush=True)
    problems = []  # both kinds reported together: one does not hide the other
    if grown:
        problems.append(f"the runtime grew from {start_rss >> 20} MB past {MEMORY_GROWTH_BYTES >> 20} MB more "
                        f"(seed {SEED}): " + "; ".join(grown[:10]))
    if late:
        problems.append(f"{len(late)} of {SCRIPTS} runs answered later than their timeout + "
                        f"{ANSWER_GRACE_SECONDS} s:\n\n" + "\n\n".join(late[:10]))
    assert not problems, "\n\n".join(problems)


def _settled_rss(pid: int, bound: int) -> int:
    """The runtime's RSS once within `bound`, or after MEMORY_SETTLE_SECONDS: a VM is closed off
    the answer's path, and one abandoned in a long builtin only when that returns, so memory a
    batch used comes back shortly after its answers."""
    deadline = time.monotonic() + MEMORY_SETTLE_SECONDS
    while (rss := _rss(pid)) > bound and time.monotonic() < deadline:
        time.sleep(0.1)
    return rss


def _kind(is_error: bool, text: str) -> str:
    if not is_error:
        return "ok"
    last = text.strip().splitlines()[-1] if text.strip() else ""
    for line in text.splitlines():
        if line.startswith("Error: "):
            return line.split(" error", 1)[0].removeprefix("Error: ")
    return last[:20]
