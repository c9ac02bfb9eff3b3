"""The error every request check raises: which field is wrong, and why."""

from __future__ import annotations


class InvalidRequestError(ValueError):
    """A request field is out of range; the message starts with the field's name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message
        """The message without the field's name."""
