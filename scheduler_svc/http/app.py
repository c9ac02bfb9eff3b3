"""The FastAPI app of the HTTP front: routes, every error in OpenAI's shape, and CORS for --allowed-origins."""

from __future__ import annotations

import logging

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from scheduler_svc.http.completions import CHAT_ROUTE, COMPLETIONS_ROUTE, CompletionRoutes
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.errors import error_body
from scheduler_svc.http.info_routes import InfoRoutes
from scheduler_svc.http.lora_routes import LOAD_LORA_ROUTE, UNLOAD_LORA_ROUTE, LoraRoutes
from scheduler_svc.http.prompt_count_route import MESSAGES_COUNT, RESPONSES_COUNT, PromptCountRoute
from scheduler_svc.http.stored_response_routes import (
    CANCEL_ROUTE,
    INPUT_ITEMS_ROUTE,
    STORED_RESPONSE_ROUTE,
    StoredResponseRoutes,
)
from scheduler_svc.http.tokenize_routes import DETOKENIZE_ROUTE, TOKENIZE_ROUTE, TokenizeRoutes
from scheduler_svc.http.translated_route import MESSAGES_API, RESPONSES_API, TranslatedRoute

logger = logging.getLogger(__name__)


def create_app(context: ServingContext) -> FastAPI:
    """The OpenAI-compatible API over ``context``'s engine."""
    app = FastAPI(title="stepahead", docs_url=None, redoc_url=None, openapi_url=None)
    completions = CompletionRoutes(context)
    info = InfoRoutes(context)
    tokens = TokenizeRoutes(context)
    lora = LoraRoutes(context)
    app.add_api_route(CHAT_ROUTE, completions.chat, methods=["POST"])
    app.add_api_route(COMPLETIONS_ROUTE, completions.completions, methods=["POST"])
    for translated in (RESPONSES_API, MESSAGES_API):
        app.add_api_route(translated.route, TranslatedRoute(context, completions, translated).create, methods=["POST"])
    stored = StoredResponseRoutes(context)
    app.add_api_route(STORED_RESPONSE_ROUTE, stored.get, methods=["GET"])
    app.add_api_route(STORED_RESPONSE_ROUTE, stored.delete, methods=["DELETE"])
    app.add_api_route(INPUT_ITEMS_ROUTE, stored.input_items, methods=["GET"])
    app.add_api_route(CANCEL_ROUTE, stored.cancel, methods=["POST"])
    for counted in (MESSAGES_COUNT, RESPONSES_COUNT):
        app.add_api_route(counted.route, PromptCountRoute(context, counted).count, methods=["POST"])
    app.add_api_route(TOKENIZE_ROUTE, tokens.tokenize, methods=["POST"])
    app.add_api_route(DETOKENIZE_ROUTE, tokens.detokenize, methods=["POST"])
    app.add_api_route(LOAD_LORA_ROUTE, lora.load, methods=["POST"])
    app.add_api_route(UNLOAD_LORA_ROUTE, lora.unload, methods=["POST"])
    app.add_api_route("/v1/models", info.list_models, methods=["GET"])
    app.add_api_route("/v1/models/{model:path}", info.get_model, methods=["GET"])
    app.add_api_route("/health", info.health, methods=["GET"])
    app.add_api_route("/metrics", info.metrics, methods=["GET"])
    app.add_api_route("/version", info.version, methods=["GET"])
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _server_error)
    if context.allowed_origins:
        # Answers browsers' preflights itself (before any route or API key check, as preflights carry no key) and
        # marks the allowed origins' responses, errors included, readable by their pages.
        app.add_middleware(CORSMiddleware, allow_origins=list(context.allowed_origins),
                           allow_methods=["GET", "POST"], allow_headers=["*"], expose_headers=["*"])
    return app


async def _http_error(request: Request, error: Exception) -> Response:
    """Starlette's own errors (unknown path 404, wrong method 405) in OpenAI's shape."""
    status = error.status_code if isinstance(error, HTTPException) else 500
    detail = error.detail if isinstance(error, HTTPException) else str(error)
    return JSONResponse(error_body(status, f"{request.method} {request.url.path}: {detail}"), status_code=status)


async def _server_error(request: Request, error: Exception) -> Response:
    logger.exception("HTTP %s %s failed", request.method, request.url.path, exc_info=error)
    return JSONResponse(error_body(500, f"internal error: {type(error).__name__}"), status_code=500)
