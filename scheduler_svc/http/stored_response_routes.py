"""``GET /v1/responses/{response_id}`` and ``DELETE /v1/responses/{response_id}``: a stored Responses API response
(response_store.py), as the ``openai`` package's ``responses.retrieve`` and ``responses.delete`` call them.

GET answers the response object as it was returned; DELETE forgets it, answering ``{"id", "object": "response",
"deleted": true}``. A response never stored (``store: false``, ``--responses-store-size 0``), deleted or evicted is a
404 naming ``response_id``. Both need the API key when one is configured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.response_store import ResponseStore

STORED_RESPONSE_ROUTE = "/v1/responses/{response_id}"


class StoredResponseRoutes:
    """Retrieval and deletion of stored responses."""

    def __init__(self, context: ServingContext) -> None:
        self.context = context

    async def get(self, request: Request) -> Response:
        """``GET /v1/responses/{response_id}``."""
        def answer(store: ResponseStore, response_id: str) -> dict[str, Any]:
            stored = store.get(response_id)
            if stored is None:
                raise _unknown(store, response_id)
            return stored.response

        return self._serve(request, "GET", answer)

    async def delete(self, request: Request) -> Response:
        """``DELETE /v1/responses/{response_id}``."""
        def answer(store: ResponseStore, response_id: str) -> dict[str, Any]:
            if not store.delete(response_id):
                raise _unknown(store, response_id)
            return {"id": response_id, "object": "response", "deleted": True}

        return self._serve(request, "DELETE", answer)

    def _serve(self, request: Request, method: str,
               answer: Callable[[ResponseStore, str], dict[str, Any]]) -> Response:
        context = self.context
        trace = context.tracing.start(method, STORED_RESPONSE_ROUTE, request.headers)
        try:
            context.authorize(request.headers)
            body = answer(context.response_store, request.path_params["response_id"])
        except ApiError as error:
            trace.close(error.status, error.message)
            context.engine.metrics.observe_http(STORED_RESPONSE_ROUTE, error.status)
            headers = {"WWW-Authenticate": "Bearer"} if error.code == grpc.StatusCode.UNAUTHENTICATED else None
            return error.response(headers)
        trace.close(200)
        context.engine.metrics.observe_http(STORED_RESPONSE_ROUTE, 200)
        return JSONResponse(body)


def _unknown(store: ResponseStore, response_id: str) -> ApiError:
    why = (f"never stored, deleted, or evicted: this server keeps the last {store.capacity}" if store.enabled
           else "this server keeps no responses (--responses-store-size 0)")
    return ApiError(grpc.StatusCode.NOT_FOUND, f"response_id: no stored response {response_id!r} ({why})",
                    param="response_id")
