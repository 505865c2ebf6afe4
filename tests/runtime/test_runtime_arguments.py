"""Validation of run_js / run_py arguments: every bad field is named with its allowed range."""

from __future__ import annotations

import pytest

from runtime.arguments import ArgumentsError, RunJsArguments, RunPyArguments, input_schema, parse_arguments


def error(model, arguments) -> str:
    with pytest.raises(ArgumentsError) as caught:
        parse_arguments(model, arguments)
    return str(caught.value)


def test_missing_code_is_named() -> None:
    """A call without code says code is required."""
    assert "'code' is required" in error(RunJsArguments, {})


def test_code_of_wrong_type_is_named() -> None:
    """Code must be a string; a number is refused by field name."""
    assert "'code' must be a string" in error(RunJsArguments, {"code": 42})


def test_timeout_out_of_range_names_the_range() -> None:
    """Limits out of range come back with the allowed range and the default."""
    message = error(RunJsArguments, {"code": "1", "timeout_seconds": 601})
    assert "'timeout_seconds' must be a number from 0.001 to 600.0 (default 60.0); got 601" in message


def test_heap_limit_must_be_whole_number_in_range() -> None:
    """heap_memory_max_mb takes whole MiB between 1 and 1024."""
    assert "'heap_memory_max_mb' must be a whole number from 1 to 1024" in error(RunJsArguments, {"code": "1", "heap_memory_max_mb": 2048})
    assert "'heap_memory_max_mb' must be a whole number" in error(RunJsArguments, {"code": "1", "heap_memory_max_mb": 1.5})
    assert "'heap_memory_max_mb'" in error(RunJsArguments, {"code": "1", "heap_memory_max_mb": True})


def test_python_memory_limit_range() -> None:
    """run_py names memory_max_mb with its own range."""
    assert "'memory_max_mb' must be a whole number from 64 to 2048" in error(RunPyArguments, {"code": "1", "memory_max_mb": 1})


def test_unknown_fields_are_refused_by_name() -> None:
    """A misspelt limit is refused, listing the fields that exist (it would otherwise be ignored)."""
    message = error(RunJsArguments, {"code": "1", "timeout": 5})
    assert "unknown field 'timeout' (allowed fields: code, timeout_seconds, heap_memory_max_mb)" in message
    assert "unknown field 'heap_memory_max_mb'" in error(RunPyArguments, {"code": "1", "heap_memory_max_mb": 5})


def test_every_bad_field_is_reported_at_once() -> None:
    """The whole request is validated before acting, so one answer lists all problems."""
    message = error(RunJsArguments, {"timeout_seconds": -1, "extra": 1})
    assert "'code' is required" in message and "'timeout_seconds'" in message and "'extra'" in message


def test_string_numbers_are_not_coerced() -> None:
    """'5' is not silently taken as 5: the agent learns the type it must send."""
    assert "'timeout_seconds' must be a number" in error(RunJsArguments, {"code": "1", "timeout_seconds": "5"})


def test_arguments_must_be_an_object() -> None:
    """A non-object arguments value is refused."""
    assert "arguments must be an object" in error(RunJsArguments, ["1"])


def test_valid_arguments_pass() -> None:
    """Integers are accepted for timeouts; absent limits stay None (the sandbox's defaults)."""
    args = parse_arguments(RunJsArguments, {"code": "1", "timeout_seconds": 5})
    assert (args.code, args.timeout_seconds, args.heap_memory_max_mb) == ("1", 5.0, None)


def test_schema_comes_from_the_validating_model() -> None:
    """The schema the agent sees carries the same bounds the validation enforces."""
    schema = input_schema(RunJsArguments)
    assert schema["required"] == ["code"] and schema["additionalProperties"] is False
    timeout = schema["properties"]["timeout_seconds"]
    assert (timeout["type"], timeout["minimum"], timeout["maximum"]) == ("number", 0.001, 600.0)
    assert schema["properties"]["heap_memory_max_mb"]["type"] == "integer"
    assert set(input_schema(RunPyArguments)["properties"]) == {"code", "timeout_seconds", "memory_max_mb"}
