"""Errors in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, with their HTTP status.

The status follows the gRPC code the same failure has on the gRPC API, so both protocols agree:
INVALID_ARGUMENT 400, UNAUTHENTICATED 401, NOT_FOUND 404, ALREADY_EXISTS 409, RESOURCE_EXHAUSTED 429,
UNAVAILABLE 503, DEADLINE_EXCEEDED 504, anything else 500. ``type`` is OpenAI's: "invalid_request_error"
for 4xx (401 with ``code`` "invalid_api_key", 404 for a model with "model_not_found"), "rate_limit_error"
for 429, "server_error" for 5xx.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import grpc
from pydantic import ValidationError
from starlette.responses import JSONResponse

STATUS_OF_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ApiError(Exception):
    """A request that ends with an error response; ``code`` is the matching gRPC status code."""

    def __init__(
        self, code: grpc.StatusCode, message: str, param: str | None = None, error_code: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.error_code = error_code

    @property
    def status(self) -> int:
        """The HTTP status of the response."""
        return STATUS_OF_CODE.get(self.code, 500)

    def body(self) -> dict[str, Any]:
        """The OpenAI error object."""
        return error_body(self.status, self.message, self.param, self.error_code)

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        """The JSON error response."""
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """``{"error": {...}}`` for an HTTP status."""
    error_type = "server_error" if status >= 500 else "rate_limit_error" if status == 429 else "invalid_request_error"
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def invalid(param: str, message: str) -> ApiError:
    """A 400 naming ``param``; the message starts with the parameter too."""
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"{param}: {message}", param=param)


def string_field(item: dict[str, Any], key: str, where: str) -> str:
    """``item[key]`` when it is a string; else a 400 naming ``where.key``."""
    value = item.get(key)
    if not isinstance(value, str):
        raise invalid(f"{where}.{key}", f"must be a string, got {type(value).__name__}")
    return value


def from_validation_error(error: ValidationError) -> ApiError:
    """The first problem pydantic found, as a 400 naming the parameter (e.g. ``messages[0].role``)."""
    first = error.errors(include_url=False)[0]
    param = location_name(first["loc"])
    if first["type"] == "missing":
        return invalid(param, "is required")
    if first["type"] == "json_invalid":
        return ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"the body is not valid JSON: {first['msg']}")
    if first["type"] == "model_type":
        if first["loc"]:  # a nested object (stream_options, response_format) given as something else
            return invalid(param, "must be a JSON object")
        return ApiError(grpc.StatusCode.INVALID_ARGUMENT, "the body must be a JSON object")
    return invalid(param, first["msg"])


def location_name(loc: Sequence[int | str]) -> str:
    """pydantic's error location as a parameter path: ('messages', 0, 'role') -> messages[0].role.

    Union member tags that pydantic adds ('str', 'list[int]', ...) are left out.
    """
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif _IDENTIFIER.fullmatch(item) and item not in _TYPE_TAGS:
            parts.append(f".{item}" if parts else item)
    return "".join(parts) or "body"
