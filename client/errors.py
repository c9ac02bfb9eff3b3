"""Typed exceptions raised by the stepahead client, mapped from gRPC status codes."""

from __future__ import annotations

import grpc


class StepaheadError(Exception):
    """Base class of every error the client raises for a failed call.

    Attributes:
        code: the gRPC status code of the failure.
        details: the server's (or the client's) explanation.
    """

    default_code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, details: str, code: grpc.StatusCode | None = None) -> None:
        self.code = code if code is not None else self.default_code
        self.details = details
        super().__init__(f"{self.code.name}: {details}")


class InvalidArgumentError(StepaheadError):
    """The request was rejected as malformed (bad prompt, bad sampling values, ...)."""

    default_code = grpc.StatusCode.INVALID_ARGUMENT


class AlreadyExistsError(InvalidArgumentError):
    """A request with the same request_id is still running on the server."""

    default_code = grpc.StatusCode.ALREADY_EXISTS


class NotFoundError(StepaheadError):
    """The named thing (a model, a request) does not exist on the server."""

    default_code = grpc.StatusCode.NOT_FOUND


class ResourceExhaustedError(StepaheadError):
    """The server is out of capacity (queue full, prompt too long for the KV cache)."""

    default_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnauthenticatedError(StepaheadError):
    """The server wants an API key and got none, or a wrong one (`api_key` / STEPAHEAD_API_KEY)."""

    default_code = grpc.StatusCode.UNAUTHENTICATED


class UnavailableError(StepaheadError):
    """The server cannot be reached or is shutting down; retrying later may succeed."""

    default_code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(StepaheadError):
    """The call's deadline (the `timeout` argument) passed before it completed."""

    default_code = grpc.StatusCode.DEADLINE_EXCEEDED


class CancelledError(StepaheadError):
    """The call was cancelled (by the server, or by another thread of this client)."""

    default_code = grpc.StatusCode.CANCELLED


class InternalError(StepaheadError):
    """The server failed (or broke the protocol) while handling the call."""

    default_code = grpc.StatusCode.INTERNAL


_ERROR_BY_CODE: dict[grpc.StatusCode, type[StepaheadError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: InvalidArgumentError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNKNOWN: InternalError,
    grpc.StatusCode.DATA_LOSS: InternalError,
    grpc.StatusCode.UNIMPLEMENTED: InternalError,
}


def error_for_status(code: grpc.StatusCode, details: str) -> StepaheadError:
    """Return the typed error for a gRPC status code (StepaheadError for unmapped codes)."""
    error_type = _ERROR_BY_CODE.get(code, StepaheadError)
    return error_type(details, code)


def error_from_rpc(error: grpc.RpcError) -> StepaheadError:
    """Convert a failed gRPC call (sync or asyncio) into the matching typed error."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else None
    if code is None:
        code = grpc.StatusCode.UNKNOWN
    return error_for_status(code, details or "(the server sent no details)")
