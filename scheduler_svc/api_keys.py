"""Bearer-token authentication of the public APIs: the accepted keys and the check both protocols share.

Keys are compared with ``hmac.compare_digest`` against every accepted key (no early exit on the
first match), and never logged: error messages say that a key is missing or wrong, not which.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from pathlib import Path

BEARER_PREFIX = "bearer "


def read_api_key_file(path: str) -> list[str]:
    """The keys in ``path``: one per line, surrounding blanks stripped, blank lines and # comments skipped.

    Raises OSError when the file cannot be read.
    """
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


class ApiKeyChecker:
    """Decides whether an ``Authorization`` header value carries one of the accepted keys."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = tuple(key.encode("utf-8") for key in keys)

    @property
    def enabled(self) -> bool:
        """False when no key is configured: every caller is let in."""
        return bool(self._keys)

    def check(self, authorization: str | None) -> str | None:
        """None when the caller may proceed, else why not (without echoing what it sent)."""
        if not self._keys:
            return None
        if not authorization:
            return "missing API key: send the header 'Authorization: Bearer <key>'"
        if not authorization[: len(BEARER_PREFIX)].lower() == BEARER_PREFIX:
            return "the Authorization header must be 'Bearer <key>'"
        offered = authorization[len(BEARER_PREFIX) :].strip().encode("utf-8")
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(offered, key)
        return None if matched else "invalid API key"
