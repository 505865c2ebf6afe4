"""The `codedesk` command: serve, run, and the help texts (real subprocesses)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from tests.fixtures.runtime import CODEDESK, runtime_env, write_test_server_config


def codedesk(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CODEDESK, *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A data dir with a config adding the test server, and the env to run codedesk in it."""
    data = tmp_path_factory.mktemp("cli")
    write_test_server_config(data / "servers.json")
    return data, runtime_env(data)


def test_run_prints_result_as_the_agent_sees_it(workdir) -> None:
    """`codedesk run FILE.js` prints console then value, and artifacts as one-line summaries."""
    data, env = workdir
    script = data / "ok.js"
    script.write_text('console.log("hi");\nconst r = await mcp.callTool("test", "image", {});\nartifact(r.content[1]);\n6 * 7\n')
    done = codedesk("run", str(script), "--config", str(data / "servers.json"), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["hi", "42"]
    assert done.stdout.splitlines()[2].startswith("[image artifact: image/png")


def test_run_exits_1_on_error_result(workdir) -> None:
    """A failed run prints the error with its line and exits with status 1."""
    data, env = workdir
    script = data / "bad.py"
    script.write_text('print("start")\nraise RuntimeError("nope")\n')
    done = codedesk("run", str(script), env=env)
    assert done.returncode == 1
    assert "start\nError: thrown error at line 2" in done.stdout and "RuntimeError: nope" in done.stdout


def test_run_refuses_other_file_types(workdir) -> None:
    """Only .js and .py scripts are run; anything else is refused with exit status 2."""
    data, env = workdir
    (data / "notes.txt").write_text("1")
    done = codedesk("run", str(data / "notes.txt"), env=env)
    assert done.returncode == 2 and "expected a .js or .py file" in done.stderr


def test_bad_config_file_is_reported(workdir) -> None:
    """A malformed --config names the file and the entry instead of a traceback."""
    data, env = workdir
    (data / "broken.json").write_text('{"mcpServers": {"x": {"nothing": 1}}}')
    (data / "one.js").write_text("1")
    done = codedesk("run", str(data / "one.js"), "--config", str(data / "broken.json"), env=env)
    assert done.returncode == 2 and "mcpServers.x needs either 'command'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_policy_in_the_config_file_holds_in_codedesk_run(workdir) -> None:
    """`codedesk run` reads the config's policy: a denied call is a failed result naming its
    rule, and a malformed policy is refused at start naming the field."""
    data, env = workdir
    write_test_server_config(data / "policed.json", policy={"rules": {"test.echo": "deny"}})
    (data / "deny.js").write_text('(await mcp.callTool("test", "echo", {text: "x"})).structuredContent.error.message')
    done = codedesk("run", str(data / "deny.js"), "--config", str(data / "policed.json"), env=env)
    assert done.returncode == 0, done.stderr
    assert "refused by the operator's policy (rule 'test.echo': deny)" in done.stdout
    write_test_server_config(data / "bad-policy.json", policy={"rules": {"test": "perhaps"}})
    done = codedesk("run", str(data / "deny.js"), "--config", str(data / "bad-policy.json"), env=env)
    assert done.returncode == 2 and "policy.rules.test" in done.stderr and "Traceback" not in done.stderr


def test_help_texts_say_what_the_commands_do() -> None:
    """--help explains the transports, the token, and what run prints."""
    top = codedesk("--help")
    assert top.returncode == 0 and "serve" in top.stdout and "run" in top.stdout and "desktop" in top.stdout
    serve = codedesk("serve", "--help").stdout
    assert "streamable HTTP" in serve and "Authorization: Bearer" in serve and "--config" in serve
    assert "as the agent would see it" in codedesk("run", "--help").stdout


def test_http_refuses_an_empty_token(workdir) -> None:
    """The HTTP transport never runs without a secret."""
    _, env = workdir
    done = codedesk("serve", "--http", "127.0.0.1:0", "--token", "", env=env, timeout=60)
    assert done.returncode == 2 and "--token must not be empty" in done.stderr


def test_http_address_must_be_host_and_port() -> None:
    """A malformed --http value is refused with the expected form."""
    done = codedesk("serve", "--http", "8765")
    assert done.returncode == 2 and "expected HOST:PORT" in done.stderr


def _http_banner(env: dict[str, str], *options: str, token: str | None = None) -> list[str]:
    """The four lines `codedesk serve --http 127.0.0.1:0 OPTIONS` prints once it listens; with
    `token`, also checks that the server accepts a request bearing it."""
    process = subprocess.Popen([CODEDESK, "serve", "--http", "127.0.0.1:0", *options], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline() for _ in range(4)]
        if token is not None:
            url = lines[1].split("MCP URL:")[1].strip()
            with httpx.Client() as client:
                refused = client.get(url, headers={"Authorization": "Bearer wrong"})
                accepted = client.get(url, headers={"Authorization": f"Bearer {token}"})
            assert refused.status_code == 401 and accepted.status_code != 401, (refused, accepted)
        return lines
    finally:
        process.terminate()
        process.wait(30)
        assert process.stderr is not None
        process.stderr.close()


def test_http_serve_prints_url_and_generated_token(workdir) -> None:
    """Without --token or $CODEDESK_TOKEN a random token is generated and printed with the MCP URL."""
    _, env = workdir
    lines = _http_banner({k: v for k, v in env.items() if k != "CODEDESK_TOKEN"})
    assert lines[1].strip().startswith("MCP URL: http://127.0.0.1:") and lines[1].strip().endswith("/mcp")
    token = lines[2].split("token:")[1].strip()
    assert len(token) >= 24 and f"Authorization: Bearer {token}" in lines[3]


def test_generated_tokens_never_look_like_an_option() -> None:
    """A generated token pasted after --token must not be taken for an option (no leading "-";
    about one random URL-safe token in 64 would have one)."""
    from runtime.auth import generate_token

    tokens = {generate_token() for _ in range(2000)}
    assert len(tokens) == 2000
    assert not [t for t in tokens if t.startswith("-")]


def test_a_token_starting_with_a_dash_is_given_with_equals(workdir) -> None:
    """`--token=-...` passes a token that starts with "-"; the server serves with it."""
    _, env = workdir
    _http_banner(env, "--token=-dash-token", token="-dash-token")


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_token_given_by_the_operator_is_never_printed(workdir, how) -> None:
    """A token the operator passed (--token or $CODEDESK_TOKEN) stays out of the log; the banner
    says which one to use."""
    _, env = workdir
    secret = "operator-secret-token-0123456789"
    if how == "option":
        lines = _http_banner({k: v for k, v in env.items() if k != "CODEDESK_TOKEN"}, f"--token={secret}", token=secret)
    else:
        lines = _http_banner({**env, "CODEDESK_TOKEN": secret}, token=secret)
    assert secret not in "".join(lines)
    assert "the one you gave" in lines[2] and "Bearer <token>" in lines[3]


def test_desktop_subcommand_is_dispatched() -> None:
    """`codedesk desktop ...` reaches the desktop module's own CLI."""
    done = codedesk("desktop", "--help")
    assert done.returncode == 0 and "up" in done.stdout and "status" in done.stdout


def test_runtime_fixture_offers_builtin_servers(runtime) -> None:
    """The shared `runtime` fixture serves the built-in capability servers (browser, exec, documents)."""
    out = runtime.run_js('try { await mcp.callTool("nope", "x", {}) } catch (e) { e.message }')
    assert out.text == "unknown server 'nope'; available servers: browser, documents, exec, files, memory, session, web"



def test_fixture_client_survives_a_dead_runtime(workdir) -> None:
    """If the runtime process dies, the failing call raises and the next call starts a new runtime."""
    import psutil
    from mcp.shared.exceptions import MCPError

    from tests.fixtures.runtime import start_runtime

    _, env = workdir

    def serve_processes() -> set[int]:
        found = set()
        for process in psutil.Process().children(recursive=True):
            try:
                if "serve" in process.cmdline():
                    found.add(process.pid)
            except psutil.Error:  # gone meanwhile, or a zombie another test's process left
                pass
        return found

    before = serve_processes()
    with start_runtime(env) as client:
        assert client.run_js("1").text == "1"
        serves = [psutil.Process(pid) for pid in serve_processes() - before]
        assert len(serves) == 1
        serves[0].kill()
        serves[0].wait(30)
        with pytest.raises(MCPError):
            client.run_js("2")
        assert client.run_js("3").text == "3"


def test_a_runtime_whose_client_closed_its_pipes_exits_quietly(workdir) -> None:
    """The client going away (its end of stdout closed, then stdin) ends `codedesk serve` with
    status 0 and no traceback, as it ends every capability server."""
    from tests.fixtures.stdio import client_leaves

    _, env = workdir
    status, stderr = client_leaves(
        [CODEDESK, "serve"], env,
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
        b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_js", "arguments": {"code": "1"}}}\n',
        pause=2)  # answered into the closed pipe
    assert status == 0
    assert "Traceback" not in stderr and "Error" not in stderr, stderr


def test_serving_collects_garbage_again_with_the_start_up_frozen() -> None:
    """`codedesk serve` starts with the collector off; serving must turn it back on (a runtime
    that never collected would keep every cycle its runs leave), with the start-up's objects
    moved out of its sight."""
    import gc

    from runtime.server import heap_settled

    frozen = gc.get_freeze_count()
    gc.disable()
    try:
        heap_settled()
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
        gc.enable()
