"""JSON from the log: excessive nesting is a ValueError that callers already turn into their typed errors."""

from __future__ import annotations

import pytest

from airflow_delta.engine.model import log_json


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000])
def test_deep_nesting_is_a_value_error(text: str) -> None:
    with pytest.raises(log_json.JsonNestingError, match="nested too deeply"):
        log_json.loads(text)
    with pytest.raises(ValueError):
        log_json.loads(text.encode())


def test_ordinary_json_is_parsed_as_json_does() -> None:
    assert log_json.loads(b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}


@pytest.mark.parametrize("text", [r'{"a": "\ud800"}', r'{"a": ["x\udfff"]}', r'{"\udc00": 1}', r'{"a": "\ude00\ud83d"}'])
def test_unpaired_surrogate_escapes_are_a_value_error(text: str) -> None:
    with pytest.raises(log_json.JsonSurrogateError):
        log_json.loads(text)
    with pytest.raises(ValueError):
        log_json.loads(text.encode())


def test_surrogate_pairs_and_escaped_backslashes_are_text() -> None:
    assert log_json.loads(r'{"a": "\ud83d\ude00", "b": "\\ud800"}') == {"a": "\U0001f600", "b": "\\ud800"}
