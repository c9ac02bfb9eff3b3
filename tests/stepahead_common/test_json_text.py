"""JSON text from requests: its value, or one ValueError saying why not, for bad text and hostile nesting alike."""

from __future__ import annotations

import pytest

from stepahead_common.json_text import parse_json_text


def test_json_text_gives_its_value():
    assert parse_json_text('{"a": [1, 2]}') == {"a": [1, 2]}


@pytest.mark.parametrize("text, words", [("{not json", "is not JSON"), ("[" * 5000, "is nested too deeply")])
def test_bad_or_too_deep_text_is_one_value_error_saying_why(text, words):
    with pytest.raises(ValueError, match=words):
        parse_json_text(text)
