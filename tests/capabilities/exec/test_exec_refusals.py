"""Calls outside the spec's tables are refused as a whole, with a message naming the field."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"cmd": "ls -la", "timeout": 5}, "unknown field 'cmd'"),
        ({"bin": "ls", "timeout": 5, "shell": True}, "unknown field 'shell'"),
        ({"bin": "ls"}, "missing required field 'timeout'"),
        ({"bin": "ls", "timeout": "60"}, "field 'timeout'"),
        ({"bin": "ls", "timeout": 1.5}, "field 'timeout'"),
        ({"bin": "ls", "timeout": 0}, "field 'timeout'"),
        ({"bin": "ls", "timeout": 5, "cwd": "tmp"}, "field 'cwd': must be an absolute path"),
        ({"bin": "ls", "timeout": 5, "args": "-la"}, "field 'args'"),
        ({"bin": "ls", "timeout": 5, "args": ["-l", 3]}, "field 'args.1'"),
        ({"bin": "ls", "timeout": 5, "env": {"A": 1}}, "field 'env.A'"),
        ({"bin": "", "timeout": 5}, "field 'bin'"),
    ],
)
def test_exec_refuses_bad_calls_naming_the_field(exec_server, args, named):
    """Unknown fields, wrong types, a missing timeout and a relative cwd are refused by name."""
    message = exec_server.refused("exec", args)
    assert named in message
    assert "exec accepts {bin, args?, timeout, cwd?, env?, detach?}" in message


def test_refused_exec_starts_nothing(exec_server):
    """Validation happens before acting: a refused call leaves no command behind."""
    before = set(exec_server.data.joinpath("exec").glob("*.json"))
    exec_server.refused("exec", {"bin": "touch", "args": ["/tmp/never"], "timeout": 5, "cmd": "x"})
    assert set(exec_server.data.joinpath("exec").glob("*.json")) == before


def test_unknown_field_refusal_explains_there_is_no_shell(exec_server):
    """A command line in `cmd` gets told how to run a shell instead."""
    message = exec_server.refused("exec", {"cmd": "ls | wc -l", "timeout": 5})
    assert 'bin: "sh", args: ["-c"' in message


def test_missing_cwd_is_refused(exec_server, tmp_path):
    """A cwd that does not exist is refused by name rather than started and failed."""
    message = exec_server.refused("exec", {"bin": "ls", "timeout": 5, "cwd": str(tmp_path / "nowhere")})
    assert "field 'cwd'" in message and "not an existing directory" in message


@pytest.mark.parametrize(
    ("tool", "args", "named"),
    [
        ("stream_logs", {"id": "20200101-000000-00000000"}, "missing required field 'offset'"),
        ("stream_logs", {"id": "20200101-000000-00000000", "offset": -1}, "field 'offset'"),
        ("stream_logs", {"id": "20200101-000000-00000000", "offset": 0, "limit": 9}, "unknown field 'limit'"),
        ("stream_logs", {"id": "../../etc/passwd", "offset": 0}, "is not an exec id"),
        ("search_logs", {"id": "20200101-000000-00000000", "pattern": "("}, "not a valid regular expression"),
        ("search_logs", {"id": "20200101-000000-00000000"}, "missing required field 'pattern'"),
        ("kill", {"id": "20200101-000000-00000000", "signal": 9}, "unknown field 'signal'"),
        ("kill", {}, "missing required field 'id'"),
    ],
)
def test_follow_tools_refuse_bad_calls_naming_the_field(exec_server, tool, args, named):
    """stream_logs, search_logs and kill accept only their own fields, with the right types."""
    assert named in exec_server.refused(tool, args)


def test_offset_past_the_end_is_refused(exec_server):
    """An offset beyond the log is refused and says where to read from."""
    command_id = exec_server.run("echo", "hi")
    exec_server.follow(command_id)
    message = exec_server.refused("stream_logs", {"id": command_id, "offset": 100})
    assert "past the end of the log (3 bytes)" in message


def test_tools_list_schemas_forbid_extra_fields(exec_server):
    """The schemas callers see are the validating models': no extra fields, timeout required."""
    tools = exec_server._portal.call(exec_server._session.list_tools).tools
    schemas = {tool.name: tool.input_schema for tool in tools}
    assert set(schemas) == {"exec", "stream_logs", "search_logs", "kill"}
    assert all(schema["additionalProperties"] is False for schema in schemas.values())
    assert schemas["exec"]["required"] == ["bin", "timeout"]
    assert schemas["exec"]["properties"]["timeout"]["type"] == "integer"
