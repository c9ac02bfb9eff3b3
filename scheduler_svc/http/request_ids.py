"""Request ids of the HTTP API: a client's ``X-Request-Id`` header names its request, as in vLLM.

The id's base is the header's value (visible ASCII, at most MAX_BASE_CHARS characters, else a 400 naming the
header), or a random one. The response's ``id`` holds it (``chatcmpl-BASE``, ``cmpl-BASE``, ``resp_BASE``,
``msg_BASE``), each choice's engine request is ``RESPONSE_ID-INDEX`` (the id the request log, traces and the
scheduler's errors name), and every response carries it back in ``X-Request-Id``. Two running requests cannot
share a header value (409).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping

from scheduler_svc.http.errors import invalid

HEADER = "X-Request-Id"
MAX_BASE_CHARS = 200
"""Leaves room for the endpoint's prefix and the choice index within the engine's 256-character request ids."""
_VISIBLE = re.compile(r"[!-~]+")


def base_request_id(headers: Mapping[str, str]) -> tuple[str, bool]:
    """The request id's base, and whether the client gave it; ApiError (400) naming the header otherwise."""
    given = headers.get(HEADER.lower())
    if given is None:
        return uuid.uuid4().hex, False
    if len(given) > MAX_BASE_CHARS or not _VISIBLE.fullmatch(given):
        raise invalid(HEADER, f"must be 1 to {MAX_BASE_CHARS} visible ASCII characters (no spaces), got "
                              f"{given[:40]!r}")
    return given, True
