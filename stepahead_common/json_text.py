"""JSON given as text inside a request (a schema, tool definitions, tool calls): parsed with one error for both ways
json.loads fails on hostile input."""

from __future__ import annotations

import json
from typing import Any


def parse_json_text(text: str) -> Any:
    """The value of ``text``; ValueError saying why not ("is not JSON: ...", "is nested too deeply": json.loads
    recurses, so thousands of nested brackets raise RecursionError rather than a decode error)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"is not JSON: {error}") from error
    except RecursionError as error:
        raise ValueError("is nested too deeply") from error
