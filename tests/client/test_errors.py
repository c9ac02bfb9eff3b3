"""Tests of client/errors.py: gRPC status codes -> typed exceptions."""

from __future__ import annotations

import grpc
import pytest

from client import errors
from client.errors import error_for_status, error_from_rpc


class _FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode | None, details: str | None) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str | None:
        return self._details


@pytest.mark.parametrize(
    ("code", "error_type"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidArgumentError),
        (grpc.StatusCode.OUT_OF_RANGE, errors.InvalidArgumentError),
        (grpc.StatusCode.ALREADY_EXISTS, errors.AlreadyExistsError),
        (grpc.StatusCode.NOT_FOUND, errors.NotFoundError),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.ResourceExhaustedError),
        (grpc.StatusCode.UNAVAILABLE, errors.UnavailableError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceededError),
        (grpc.StatusCode.CANCELLED, errors.CancelledError),
        (grpc.StatusCode.INTERNAL, errors.InternalError),
        (grpc.StatusCode.UNKNOWN, errors.InternalError),
        (grpc.StatusCode.UNAUTHENTICATED, errors.UnauthenticatedError),
    ],
)
def test_codes_map_to_typed_errors(code: grpc.StatusCode, error_type: type) -> None:
    error = error_from_rpc(_FakeRpcError(code, "why"))
    assert type(error) is error_type
    assert isinstance(error, errors.StepaheadError)
    assert error.code is code
    assert error.details == "why"
    assert code.name in str(error) and "why" in str(error)


def test_unmapped_code_gives_the_base_class() -> None:
    error = error_for_status(grpc.StatusCode.PERMISSION_DENIED, "no")
    assert type(error) is errors.StepaheadError
    assert error.code is grpc.StatusCode.PERMISSION_DENIED


def test_missing_code_and_details_are_filled_in() -> None:
    error = error_from_rpc(_FakeRpcError(None, None))
    assert error.code is grpc.StatusCode.UNKNOWN
    assert error.details


def test_client_side_errors_default_their_code() -> None:
    assert errors.InternalError("broken stream").code is grpc.StatusCode.INTERNAL
    assert errors.UnavailableError("down").code is grpc.StatusCode.UNAVAILABLE


def test_cancelled_error_is_not_asyncio_cancellation() -> None:
    import asyncio

    assert not issubclass(errors.CancelledError, asyncio.CancelledError)
