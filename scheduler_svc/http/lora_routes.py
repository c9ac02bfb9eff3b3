"""``POST /v1/load_lora_adapter`` and ``POST /v1/unload_lora_adapter``: vLLM's routes for loading and unloading LoRA
adapters while serving, over the same LoraUpdates as the gRPC API's LoadLoraAdapter and UnloadLoraAdapter.

Load takes ``{"lora_name", "lora_path"}``, unload ``{"lora_name"}`` (and vLLM's ``lora_int_id``, ignored); other
fields are refused by name unless neutral. Success is vLLM's: 200 with a plain-text body. Errors have OpenAI's shape,
their status following the gRPC code (errors.py) and ``param`` naming the field, except an adapter already served,
which is vLLM's 400 rather than ALREADY_EXISTS' 409. Both need the API key when one is configured. Without the
scheduler's --allow-runtime-lora-updating vLLM does not have these routes: they answer 404, saying how to turn them
on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from scheduler_svc.http.answered_route import answered
from scheduler_svc.http.completions import parse_body, read_body
from scheduler_svc.http.context import ServingContext
from scheduler_svc.http.errors import ApiError
from scheduler_svc.http.protocol import LoadLoraAdapterRequest, UnloadLoraAdapterRequest
from scheduler_svc.http.unrecognized import refuse_unrecognized
from scheduler_svc.lora_updates import UPDATES_OFF, LoraUpdateError, LoraUpdates

LOAD_LORA_ROUTE = "/v1/load_lora_adapter"
UNLOAD_LORA_ROUTE = "/v1/unload_lora_adapter"
_FIELDS = ("lora_name", "lora_path")
_HTTP_CODE = {grpc.StatusCode.ALREADY_EXISTS: grpc.StatusCode.INVALID_ARGUMENT}
"""Codes answered as another's status: an adapter already loaded is vLLM's 400."""


class LoraRoutes:
    """The two LoRA adapter update endpoints."""

    def __init__(self, context: ServingContext) -> None:
        self.context = context

    async def load(self, request: Request) -> Response:
        """``POST /v1/load_lora_adapter``."""
        async def answer(updates: LoraUpdates, raw: bytes) -> str:
            body = parse_body(LoadLoraAdapterRequest, raw)
            refuse_unrecognized(body)
            await updates.load(body.lora_name, body.lora_path)
            return f"Success: LoRA adapter '{body.lora_name}' added successfully."

        return await self._serve(request, LOAD_LORA_ROUTE, answer)

    async def unload(self, request: Request) -> Response:
        """``POST /v1/unload_lora_adapter``."""
        async def answer(updates: LoraUpdates, raw: bytes) -> str:
            body = parse_body(UnloadLoraAdapterRequest, raw)
            refuse_unrecognized(body)
            await updates.unload(body.lora_name)
            return f"Success: LoRA adapter '{body.lora_name}' removed successfully."

        return await self._serve(request, UNLOAD_LORA_ROUTE, answer)

    async def _serve(self, request: Request, route: str,
                     answer: Callable[[LoraUpdates, bytes], Awaitable[str]]) -> Response:
        context = self.context

        async def respond() -> Response:
            updates = context.lora_updates
            if updates is None or not updates.allowed:
                raise ApiError(grpc.StatusCode.NOT_FOUND, UPDATES_OFF)
            raw = await read_body(request, context.max_body_bytes)
            try:
                return PlainTextResponse(await answer(updates, raw))
            except LoraUpdateError as error:
                raise api_error(error) from None

        return await answered(context, request, "POST", route, respond)


def api_error(error: LoraUpdateError) -> ApiError:
    """The HTTP error of a refused load or unload: its gRPC code's status, ``param`` the field its message starts
    with ("lora_name: ...")."""
    field, separator, _ = error.message.partition(": ")
    param = field if separator and field in _FIELDS else None
    return ApiError(_HTTP_CODE.get(error.code, error.code), error.message, param=param)
