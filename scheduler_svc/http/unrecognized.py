"""Request fields this server does not know: refused by name unless their value is neutral.

OpenAI's server refuses an argument it does not recognise; vLLM logs and ignores it. A client that
sends one means something by it (a sampling option of another server, a misspelt parameter), and
generating as if it had not been sent would drop what it asked for. A neutral value (null, false,
an empty string, list or object) asks for nothing: such fields are accepted, so clients that echo a
reply's message back with its empty extras keep working.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from scheduler_svc.http.errors import invalid


def refuse_unrecognized(body: BaseModel, path: str = "") -> None:
    """ApiError (400) naming the first unknown field with a non-neutral value, searched through nested models."""
    for name, value in (body.model_extra or {}).items():
        if not is_neutral(value):
            param = f"{path}.{name}" if path else name
            raise invalid(param, "unrecognized request argument: this server does not support it (remove it or "
                                 "send null)")
    for name in type(body).model_fields:
        _refuse_nested(getattr(body, name), f"{path}.{name}" if path else name)


def _refuse_nested(value: Any, path: str) -> None:
    if isinstance(value, BaseModel):
        refuse_unrecognized(value, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, BaseModel):
                refuse_unrecognized(item, f"{path}[{index}]")


def is_neutral(value: Any) -> bool:
    """Whether ``value`` asks for nothing: null, false, or an empty string, list or object."""
    return value is None or value is False or (isinstance(value, (str, list, dict)) and not value)
