"""``GET /v1/models``, ``GET /v1/models/{model}``, ``GET /health``, ``GET /metrics`` and ``GET /version``.

The model cards are vLLM's: the served model's (``root`` its name, ``parent`` null), then one per LoRA adapter
(``root`` the adapter's name, ``parent`` the served model's).

/health is readiness, the same status the gRPC health service reports for stepahead.v1.Generation
(200 ``{"status": "SERVING"}`` or 503 ``NOT_SERVING``); like gRPC health it needs no API key, and
neither does /metrics (Prometheus scrapes it), which exists only when metrics are on, nor /version (vLLM's
route: ``{"version": ...}``, the installed stepahead's).
"""

from __future__ import annotations

from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from scheduler_svc.http.answered_route import openai_error_response
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.conversion import check_model
from scheduler_svc.http.errors import ApiError
from stepahead_common.version import package_version


class InfoRoutes:
    """Model listing, readiness and metrics."""

    def __init__(self, context: ServingContext) -> None:
        self.context = context

    def _model_card(self, name: str) -> dict[str, Any]:
        """vLLM's card of ``name``: the served model (``parent`` null) or one of its LoRA adapters (``parent``: the
        served model)."""
        limits = self.context.limits
        return {
            "id": name,
            "object": "model",
            "created": self.context.created,
            "owned_by": "stepahead",
            "root": name,
            "parent": None if name == limits.model_name else limits.model_name,
            "max_model_len": limits.max_model_len,
        }

    async def list_models(self, request: Request) -> Response:
        """``GET /v1/models``: the served model, then each LoRA adapter served on it."""
        try:
            self.context.authorize(request.headers)
        except ApiError as error:
            return error.response({"WWW-Authenticate": "Bearer"})
        limits = self.context.limits
        cards = [self._model_card(name) for name in (limits.model_name, *limits.lora_adapters)]
        return JSONResponse({"object": "list", "data": cards})

    async def get_model(self, request: Request) -> Response:
        """``GET /v1/models/{model}``: the card of the served model or a LoRA adapter; 404 for any other name."""
        limits = self.context.limits
        try:
            self.context.authorize(request.headers)
            name = check_model(request.path_params["model"], limits.model_name, limits.lora_adapters)
        except ApiError as error:
            return openai_error_response(error)
        return JSONResponse(self._model_card(name))

    async def health(self, request: Request) -> Response:
        """``GET /health``: readiness."""
        if self.context.is_ready():
            return JSONResponse({"status": "SERVING"})
        return JSONResponse({"status": "NOT_SERVING"}, status_code=503)

    async def version(self, request: Request) -> Response:
        """``GET /version``: the server's stepahead version."""
        return JSONResponse({"version": package_version()})

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics``: the scheduler's Prometheus registry, in the text exposition format."""
        registry = self.context.metrics_registry
        if registry is None:
            off = "metrics are off (start the scheduler with --metrics-port)"
            return ApiError(grpc.StatusCode.NOT_FOUND, off).response()
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
