"""gRPC channels of the SDK: plaintext or TLS, retries of calls the server refused unanswered, and the API key sent
with every call."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio

from stepahead_common.tls import channel_credentials, check_pem_file

API_KEY_VARIABLE = "STEPAHEAD_API_KEY"
MAX_RETRIES = 4
"""gRPC allows at most 5 attempts of a call."""
GENERATION_SERVICE = "stepahead.v1.Generation"


def retry_options(retries: int) -> list[tuple[str, Any]]:
    """Channel options that retry a Generation call up to ``retries`` times, with backoff (0.5 s doubling up to 5
    s), when it ends UNAVAILABLE before the server answered anything: gRPC's own retry policy, which never retries a
    stream that has sent a message, so no output is ever repeated. 0: none."""
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        raise ValueError(f"retries: must be an integer in [0, {MAX_RETRIES}], got {retries!r}")
    if retries == 0:
        return []
    policy = {"maxAttempts": retries + 1, "initialBackoff": "0.5s", "maxBackoff": "5s", "backoffMultiplier": 2,
              "retryableStatusCodes": ["UNAVAILABLE"]}
    config = {"methodConfig": [{"name": [{"service": GENERATION_SERVICE}], "retryPolicy": policy}]}
    return [("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(config))]


def resolve_api_key(api_key: str | None) -> str | None:
    """``api_key``, else STEPAHEAD_API_KEY from the environment (read now), else None (send no key)."""
    if api_key is not None:
        if not api_key.strip():
            raise ValueError("api_key must be a non-empty string or None")
        return api_key.strip()
    return os.environ.get(API_KEY_VARIABLE, "").strip() or None


def _credentials(tls: bool | None, tls_ca: str | None) -> grpc.ChannelCredentials | None:
    if tls is None:
        tls = tls_ca is not None
    if not tls:
        if tls_ca is not None:
            raise ValueError("tls_ca is given but tls=False")
        return None
    check_pem_file(tls_ca, "tls_ca")
    return channel_credentials(tls_ca)


def open_channel(
    target: str, tls: bool | None, tls_ca: str | None, options: Sequence[tuple[str, Any]]
) -> grpc.Channel:
    """A blocking channel: TLS trusting ``tls_ca`` (or the system's roots with tls=True), else plaintext."""
    credentials = _credentials(tls, tls_ca)
    if credentials is None:
        return grpc.insecure_channel(target, options=list(options))
    return grpc.secure_channel(target, credentials, options=list(options))


def open_aio_channel(
    target: str, tls: bool | None, tls_ca: str | None, options: Sequence[tuple[str, Any]]
) -> grpc.aio.Channel:
    """The asyncio twin of open_channel."""
    credentials = _credentials(tls, tls_ca)
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=list(options))
    return grpc.aio.secure_channel(target, credentials, options=list(options))


def auth_metadata(api_key: str | None) -> tuple[tuple[str, str], ...]:
    """The ``authorization: Bearer <key>`` call metadata (nothing without a key)."""
    return () if api_key is None else (("authorization", f"Bearer {api_key}"),)
