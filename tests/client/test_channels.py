"""SDK channels and keys: STEPAHEAD_API_KEY as the default key, the bearer metadata, TLS arguments."""

from __future__ import annotations

import pytest

from client import AsyncClient, Client, UnauthenticatedError
from client.channels import auth_metadata, resolve_api_key
from client.errors import error_for_status
from client.requests import call_metadata


def test_api_key_defaults_to_the_environment(monkeypatch):
    monkeypatch.delenv("STEPAHEAD_API_KEY", raising=False)
    assert resolve_api_key(None) is None
    monkeypatch.setenv("STEPAHEAD_API_KEY", " from-env ")
    assert resolve_api_key(None) == "from-env"
    assert resolve_api_key("given") == "given"
    with pytest.raises(ValueError, match="api_key"):
        resolve_api_key("  ")


def test_key_travels_as_bearer_metadata():
    assert auth_metadata(None) == ()
    assert call_metadata("k") == (("authorization", "Bearer k"),)
    assert call_metadata() == ()


def test_tls_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="^tls_ca: cannot read"):
        Client("127.0.0.1:1", tls_ca=str(tmp_path / "absent.pem"))
    with pytest.raises(ValueError, match="tls=False"):
        Client("127.0.0.1:1", tls_ca=str(tmp_path), tls=False)
    Client("127.0.0.1:1", tls=True).close()  # the system's roots


def test_async_client_takes_the_same_arguments(tmp_path):
    import asyncio

    async def main():
        with pytest.raises(ValueError, match="^tls_ca:"):
            AsyncClient("127.0.0.1:1", tls_ca=str(tmp_path / "absent.pem"))
        await AsyncClient("127.0.0.1:1", tls=True, api_key="k").close()

    asyncio.run(main())


def test_unauthenticated_status_is_a_typed_error():
    import grpc

    assert isinstance(error_for_status(grpc.StatusCode.UNAUTHENTICATED, "no key"), UnauthenticatedError)
