"""End to end: the worst hostile run_js scripts through the real `codedesk serve` over stdio,
each answered within its timeout plus one second, the runtime still up, and a trivial run
answering within a second after each."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.fixtures.runtime import RuntimeClient, runtime_env, start_runtime, write_test_server_config

# (id, code, arguments, words the error text must carry)
WORST = [
    ("result-tojson-loop", "({toJSON() { for (;;) {} }})", {"timeout_seconds": 1}, "timeout error"),
    ("result-proxy-trap-loop", "new Proxy({}, {ownKeys() { for (;;) {} }})", {"timeout_seconds": 1}, "timeout error"),
    ("string-bomb", "let a = []; while (true) a.push('x'.repeat(1 << 20))",
     {"timeout_seconds": 20, "heap_memory_max_mb": 16}, "memory error"),
    ("console-flood", "for (;;) console.log('abc')", {"timeout_seconds": 2}, "timeout error"),
    ("call-budget-flood-then-timeout",
     "for (let i = 0; i < 1100; i++) { try { await mcp.callTool('test', 'nope', {}) } catch (e) {} }\nfor (;;) {}",
     {"timeout_seconds": 3}, "timeout error"),
    ("sparse-array-result", "const a = []; a.length = 2 ** 32 - 1; a", {"timeout_seconds": 5}, "output error"),
]


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeClient]:
    """A runtime over stdio with the test server, shared by this module's tests."""
    data = tmp_path_factory.mktemp("e2e-hostile")
    config = write_test_server_config(data / "servers.json")
    with start_runtime(runtime_env(data), config=config) as client:
        # Warm: the first run makes the JS engine and the first call starts the test server,
        # neither of which is what these tests time.
        assert client.run_js('(await mcp.callTool("test", "echo", {text: "up"})).content[0].text').text == "up"
        yield client


@pytest.mark.parametrize(("code", "arguments", "words"), [w[1:] for w in WORST], ids=[w[0] for w in WORST])
def test_worst_scripts_answer_in_time_and_leave_the_runtime_answering(rt: RuntimeClient, code, arguments, words):
    """A hostile script is an error result within its timeout plus one second, and the next
    trivial run answers within a second in a clean VM."""
    started = time.monotonic()
    out = rt.run_js("globalThis.leaked = 1;\n" + code, **arguments)
    took = time.monotonic() - started
    assert took <= arguments["timeout_seconds"] + 1, f"answered after {took:.1f} s"
    assert out.is_error and words in out.text, out.text[:500]
    started = time.monotonic()
    after = rt.run_js("[typeof leaked, 1 + 1]")
    assert time.monotonic() - started <= 1.0
    assert not after.is_error and after.text == '["undefined", 2]'
