"""How a sandbox RunResult reaches the agent: one text block, then artifacts; isError on failure."""

from __future__ import annotations

from sandbox import ConsoleLine, RunError, RunResult

from runtime.results import describe_block, to_call_tool_result

PNG = "iVBORw0KGgo="


def test_console_then_value_in_one_text_block() -> None:
    """The agent reads the console output first, then the returned value."""
    result = to_call_tool_result(RunResult(status="ok", console=[ConsoleLine("log", "a"), ConsoleLine("warn", "careful")], value={"n": 1}))
    assert not result.is_error
    assert [block.type for block in result.content] == ["text"]
    assert result.content[0].text == 'a\n[warn] careful\n{"n": 1}'


def test_string_value_is_shown_as_is() -> None:
    """Returned strings are not JSON-quoted, so page text reads naturally."""
    assert to_call_tool_result(RunResult(status="ok", value="line 1\nline 2")).content[0].text == "line 1\nline 2"


def test_empty_run_says_so() -> None:
    """A run with no output and no value still returns a readable text block."""
    assert to_call_tool_result(RunResult(status="ok")).content[0].text == "(no output)"


def test_artifacts_follow_as_image_blocks() -> None:
    """Attached images reach the agent as image blocks after the text."""
    result = to_call_tool_result(RunResult(
        status="ok", value=1,
        artifacts=[{"type": "image", "data": PNG, "mimeType": "image/png"}, {"type": "text", "text": "note"}],
    ))
    assert [block.type for block in result.content] == ["text", "image", "text"]
    assert result.content[1].data == PNG and result.content[1].mime_type == "image/png"
    assert describe_block(result.content[1]).startswith("[image artifact: image/png")


def test_failed_run_is_error_with_kind_line_and_prior_console() -> None:
    """A failure names its kind, message and user-code line, after the output printed before it."""
    result = to_call_tool_result(RunResult(
        status="error", console=[ConsoleLine("log", "before")],
        error=RunError(kind="thrown", message="Error: boom", line=3, column=7),
    ))
    assert result.is_error
    assert result.content[0].text == "before\nError: thrown error at line 3, column 7: Error: boom"


def test_multi_frame_stack_is_shown_single_frame_is_not() -> None:
    """A stack through the user's functions helps; a lone frame repeating the line does not."""
    deep = RunError(kind="thrown", message="Error: x", line=2, column=3,
                    traceback="    at f (eval_script:2:3)\n    at <eval> (eval_script:4:1)")
    shown = to_call_tool_result(RunResult(status="error", error=deep)).content[0].text
    assert shown.endswith("at f (eval_script:2:3)\n    at <eval> (eval_script:4:1)")
    lone = RunError(kind="thrown", message="Error: x", line=2, column=3, traceback="    at <eval> (eval_script:2:3)")
    assert to_call_tool_result(RunResult(status="error", error=lone)).content[0].text == "Error: thrown error at line 2, column 3: Error: x"
