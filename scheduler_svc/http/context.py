"""What the HTTP routes serve from: the scheduler's engine, tokenizer and limits, and its policies."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from scheduler_svc.api_keys import ApiKeyChecker
from scheduler_svc.config import DEFAULT_RESPONSES_STORE_SIZE
from scheduler_svc.engine_groups import ServingEngine
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.response_store import ResponseStore
from scheduler_svc.http.tracing import HttpTracing
from scheduler_svc.lora_updates import LoraUpdates
from scheduler_svc.tokenizer import Tokenizer
from scheduler_svc.validation import ModelLimits


@dataclass(frozen=True)
class ServingContext:
    """The scheduler's objects the HTTP front shares with the gRPC servicer (one engine, two protocols)."""

    engine: ServingEngine
    tokenizer: Tokenizer
    limits: ModelLimits
    api_keys: ApiKeyChecker = field(default_factory=lambda: ApiKeyChecker(()))
    tracing: HttpTracing = field(default_factory=HttpTracing)
    is_ready: Callable[[], bool] = lambda: True
    """The Generation service's readiness (what gRPC health reports)."""
    metrics_registry: Any = None
    """The prometheus_client registry /metrics exposes; None: metrics are off and /metrics is 404."""
    created: int = field(default_factory=lambda: int(time.time()))
    """When the model was loaded (the ``created`` of /v1/models), Unix seconds."""
    tool_call_parser: str | None = None
    """--tool-call-parser: the model's tool call syntax, for tool_choice "auto" (None: "auto" is refused)."""
    allowed_origins: tuple[str, ...] = ()
    """--allowed-origins: the web origins answered with CORS headers (``*``: any); empty: none."""
    max_body_bytes: int = 4 * 2**20
    """Largest request body read (--max-request-bytes, as for a gRPC message): parsing JSON holds the event loop,
    about 0.15 s per MiB of token ids, so a body is refused unread past it."""
    lora_updates: LoraUpdates | None = None
    """Loads and unloads LoRA adapters (--allow-runtime-lora-updating); None: /v1/load_lora_adapter and
    /v1/unload_lora_adapter answer 404."""
    force_include_usage: bool = False
    """--enable-force-include-usage: chat and completion streams end with their usage chunk, asked or not."""
    response_store: ResponseStore = field(default_factory=lambda: ResponseStore(DEFAULT_RESPONSES_STORE_SIZE))
    """The Responses API's stored responses (--responses-store-size)."""

    def authorize(self, headers: Mapping[str, str]) -> None:
        """Raise ApiError (401) unless the headers carry an accepted API key (or none is configured): ``Authorization:
        Bearer KEY``, or ``x-api-key: KEY`` as Anthropic's clients send it."""
        authorization = headers.get("authorization")
        if authorization is None and headers.get("x-api-key") is not None:
            authorization = f"Bearer {headers['x-api-key']}"
        reason = self.api_keys.check(authorization)
        if reason is not None:
            raise ApiError(grpc.StatusCode.UNAUTHENTICATED, reason, error_code="invalid_api_key")
