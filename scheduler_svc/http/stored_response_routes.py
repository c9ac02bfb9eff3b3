"""``GET`` and ``DELETE /v1/responses/{response_id}``, ``GET .../input_items`` and ``POST .../cancel``: a stored
Responses API response (response_store.py), as the ``openai`` package's ``responses.retrieve``, ``responses.delete``,
``responses.input_items.list`` and ``responses.cancel`` call them.

GET answers the response object as it was returned (a background one's as it stands: queued, then its outcome); POST
.../cancel stops a background response's generation, answering it ``cancelled``; DELETE forgets it, answering ``{"id",
"object": "response", "deleted": true}``; input_items lists the response's own input items (responses_api_items.py; not
the earlier turns of a ``previous_response_id``) as OpenAI's list object, ``limit`` (1..100, 20) at a time in ``order``
(``desc``, the default, or ``asc``), after or before an item ``id`` (``after``, ``before``). A response never stored
(``store: false``, ``--responses-store-size 0``), deleted or evicted is a 404 naming ``response_id``. Each needs the API
key when one is configured.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from scheduler_svc.http.answered_route import answered
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.errors import ApiError, invalid
from scheduler_svc.http.response_store import ResponseStore

STORED_RESPONSE_ROUTE = "/v1/responses/{response_id}"
INPUT_ITEMS_ROUTE = "/v1/responses/{response_id}/input_items"
CANCEL_ROUTE = "/v1/responses/{response_id}/cancel"
Answer = Callable[[ResponseStore, str], Awaitable[dict[str, Any]]]
"""What a route answers for the store and the response id (ApiError for a refusal)."""
MAX_LISTED = 100


class StoredResponseRoutes:
    """Retrieval, listing of input items, cancelling and deletion of stored responses."""

    def __init__(self, context: ServingContext) -> None:
        self.context = context

    async def get(self, request: Request) -> Response:
        """``GET /v1/responses/{response_id}``."""
        async def answer(store: ResponseStore, response_id: str) -> dict[str, Any]:
            stored = store.get(response_id)
            if stored is None:
                raise _unknown(store, response_id)
            return stored.response

        return await self._serve(request, "GET", answer)

    async def delete(self, request: Request) -> Response:
        """``DELETE /v1/responses/{response_id}``."""
        async def answer(store: ResponseStore, response_id: str) -> dict[str, Any]:
            await store.cancel(response_id)  # a background generation ends before its response is forgotten
            if not store.delete(response_id):
                raise _unknown(store, response_id)
            return {"id": response_id, "object": "response", "deleted": True}

        return await self._serve(request, "DELETE", answer)

    async def input_items(self, request: Request) -> Response:
        """``GET /v1/responses/{response_id}/input_items``."""
        async def answer(store: ResponseStore, response_id: str) -> dict[str, Any]:
            stored = store.get(response_id)
            if stored is None:
                raise _unknown(store, response_id)
            return items_page(list(stored.input_items), request.query_params)

        return await self._serve(request, "GET", answer, INPUT_ITEMS_ROUTE)

    async def cancel(self, request: Request) -> Response:
        """``POST /v1/responses/{response_id}/cancel``."""
        async def answer(store: ResponseStore, response_id: str) -> dict[str, Any]:
            stopped = await store.cancel(response_id)
            stored = store.get(response_id)
            if stored is None:
                raise _unknown(store, response_id)
            status = stored.response["status"]
            if not stopped and status != "cancelled":
                raise invalid("response_id", f"{response_id!r} is not being generated in the background (its status "
                                             f"is {status}): only a background response that has not ended is "
                                             "cancelled")
            return stored.response

        return await self._serve(request, "POST", answer, CANCEL_ROUTE)

    async def _serve(self, request: Request, method: str, answer: Answer,
                     route: str = STORED_RESPONSE_ROUTE) -> Response:
        async def respond() -> Response:
            return JSONResponse(await answer(self.context.response_store, request.path_params["response_id"]))

        return await answered(self.context, request, method, route, respond)


def items_page(items: list[dict[str, Any]], query: Mapping[str, str]) -> dict[str, Any]:
    """OpenAI's list object of one page of ``items`` (in input order) for the query's ``limit``, ``order``, ``after``
    and ``before``; ApiError (400) naming a bad one."""
    unknown = sorted(set(query) - {"limit", "order", "after", "before", "include"})
    if unknown:
        raise invalid(unknown[0], "unrecognized query parameter (limit, order, after and before are)")
    if query.get("include"):
        raise invalid("include", "no extra item fields are served")
    limit_text = query.get("limit", "20")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LISTED:
        raise invalid("limit", f"must be an integer in [1, {MAX_LISTED}], got {limit_text!r}")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid("order", f'must be "asc" or "desc", got {order!r}')
    ordered = items if order == "asc" else items[::-1]
    ids = [item["id"] for item in ordered]
    for cursor in ("after", "before"):
        if cursor in query and query[cursor] not in ids:
            raise invalid(cursor, f"{query[cursor]!r} is not an item of this response")
    start = ids.index(query["after"]) + 1 if "after" in query else 0
    end = ids.index(query["before"]) if "before" in query else len(ordered)
    window = ordered[start:end]
    page = window[: int(limit_text)] if "before" not in query or "after" in query else window[-int(limit_text):]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(page) < len(window)}


def _unknown(store: ResponseStore, response_id: str) -> ApiError:
    why = (f"never stored, deleted, or evicted: this server keeps the last {store.capacity}" if store.enabled
           else "this server keeps no responses (--responses-store-size 0)")
    return ApiError(grpc.StatusCode.NOT_FOUND, f"response_id: no stored response {response_id!r} ({why})",
                    param="response_id")
