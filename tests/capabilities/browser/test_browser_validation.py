"""browser_execute checks the whole request before any step runs, and says what is wrong where."""

from __future__ import annotations

import pytest

TAB = "validation"


def marker_script() -> dict:
    return {"type": "evaluate", "params": {"script": "window.__marker || null"}}


def test_bad_step_3_is_refused_before_step_1_runs(run_page):
    """A bad third step refuses the whole batch: the first step (which would set a marker) has
    no effect on the page."""
    assert not run_page([{"type": "setContent", "params": {"html": "<p>clean</p>"}}], tab=TAB).is_error
    run = run_page(
        [{"type": "evaluate", "params": {"script": "window.__marker = 'step 1 ran'"}},
         {"type": "url", "params": {}},
         {"type": "click", "params": {"selector": "#x", "button": "left"}}],
        tab=TAB,
    )
    assert run.is_error
    assert run.results == [] and run.images == []
    assert run.summary.startswith("refused, nothing ran")
    assert "step 3 (click): unknown field 'params.button'" in run.summary
    assert "click takes params: selector, ref" in run.summary
    error = run.raw.structured_content["error"]
    assert (error["kind"], error["step"], error["field"]) == ("invalid_arguments", 3, "params.button")
    after = run_page([marker_script()], tab=TAB)
    assert after.result(1) is None


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ({"type": "clik", "params": {"selector": "a"}}, "step 2: unknown operation type 'clik'; use one of navigate"),
        ({"params": {"selector": "a"}}, "step 2: missing field 'type'"),
        ({"type": "click", "params": {}}, "step 2 (click): field 'params': give selector or ref (from readPage or find)"),
        ({"type": "click", "params": {"selector": "#a", "ref": "ref_1"}}, "step 2 (click): field 'params': give selector or ref"),
        ({"type": "click", "params": {"ref": "12"}}, "step 2 (click): field 'params.ref': String should match pattern"),
        ({"type": "readPage", "params": {"filter": "links"}}, "step 2 (readPage): field 'params.filter'"),
        ({"type": "navigate"}, "step 2 (navigate): missing field 'params'"),
        ({"type": "click", "selector": "a", "params": {"selector": "a"}},
         "step 2 (click): unknown field 'selector'; a step has only type and params"),
        ({"type": "wait", "params": {"ms": "100"}}, "step 2 (wait): field 'params.ms': Input should be a valid integer"),
        ({"type": "wait", "params": {"ms": 30001}}, "step 2 (wait): field 'params.ms': Input should be less than or equal to 30000"),
        ({"type": "wait", "params": {"selector": "#a", "ms": 30001}}, "field 'params.ms'"),
        ({"type": "wait", "params": {}}, "step 2 (wait): field 'params': give ms (a fixed time) or selector"),
        ({"type": "wait", "params": {"selector": "#a", "ms": 0}}, "with selector, ms is how long to wait for it"),
        ({"type": "type", "params": {"selector": "#a", "text": 5}}, "step 2 (type): field 'params.text': Input should be a valid string"),
        ({"type": "select", "params": {"selector": "#a", "values": "x"}}, "step 2 (select): field 'params.values': Input should be a valid list"),
        ({"type": "navigate", "params": {"url": "example.com"}}, "has no scheme; give an absolute URL such as https://example.com"),
        ({"type": "navigate", "params": {"url": "http://x", "waitUntil": "idle"}}, "field 'params.waitUntil'"),
        ({"type": "screenshot", "params": {"fullPage": "yes"}}, "field 'params.fullPage': Input should be a valid boolean"),
        ("click", "step 2: a step must be an object {type, params}, got str"),
    ],
)
def test_malformed_step_is_refused_naming_step_and_field(run_page, step, expected):
    """Unknown types, unknown or missing params, wrong types and out-of-range values are refused
    with the step number and the field."""
    run = run_page([{"type": "url", "params": {}}, step], tab=TAB)
    assert run.is_error and run.results == []
    assert expected in run.summary, run.summary
    assert run.body["error"]["message"] in run.summary
    assert run.body["error"]["kind"] == "invalid_arguments" and run.body["error"]["step"] == 2
    assert run.raw.structured_content == run.body


def test_every_bad_step_is_named_at_once(run_page):
    """All problems are reported together, so one correction fixes the batch."""
    run = run_page(
        [{"type": "press", "params": {}}, {"type": "url"}, {"type": "evaluate", "params": {"script": ""}}], tab=TAB
    )
    assert "step 1 (press): missing field 'params.key'" in run.summary
    assert "step 3 (evaluate): field 'params.script'" in run.summary
    assert "step 2" not in run.summary


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"operations": [], "tab": TAB}, "operations is empty"),
        ({"operations": [{"type": "url"}], "tabs": "x"}, "unknown field 'tabs'; browser_execute takes operations, tab and close"),
        ({"operations": [{"type": "url"}], "tab": ""}, "tab:"),
        ({"operations": [{"type": "url"}], "tab": 7}, "tab: Input should be a valid string"),
        ({"operations": [{"type": "url"}], "close": "yes"}, "close: Input should be a valid boolean"),
    ],
)
def test_bad_top_level_arguments_are_refused(browser_server, arguments, expected):
    """The request's own fields are checked too, unknown ones refused by name."""
    result = browser_server.call("browser_execute", arguments)
    assert result.is_error
    assert expected in result.content[0].text


def test_schema_comes_from_the_operation_types(browser_server):
    """The schema the model sees lists the spec's eleven operations (then the page-reading ones),
    each refusing unknown fields."""
    (tool,) = [t for t in browser_server.list_tools() if t.name == "browser_execute"]
    schema = tool.input_schema
    assert schema["required"] == ["operations"]
    variants = schema["properties"]["operations"]["items"]["oneOf"]
    types = [v["properties"]["type"]["const"] for v in variants]
    assert types[:11] == ["navigate", "wait", "click", "type", "press", "select", "evaluate", "screenshot", "url",
                          "setViewport", "setContent"]
    assert types[11:] == ["readPage", "find", "getText", "formInput", "tabs", "console", "network", "dialog",
                          "hover", "doubleClick", "tripleClick", "rightClick", "middleClick", "drag", "scroll",
                          "scrollTo", "key", "holdKey", "zoom", "upload", "download", "back", "forward", "reload"]
    assert all(v["additionalProperties"] is False for v in variants)
    assert all(v["properties"]["params"]["additionalProperties"] is False for v in variants)
    viewport = variants[types.index("setViewport")]["properties"]["params"]["properties"]
    assert (viewport["width"]["minimum"], viewport["width"]["maximum"]) == (320, 3840)
    assert (viewport["height"]["minimum"], viewport["height"]["maximum"]) == (200, 2160)
    assert "$ref" not in str(schema)
    assert schema["properties"]["tab"]["default"] == "default"
