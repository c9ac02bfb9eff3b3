"""Blocking client of the stepahead Generation service."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from client.channels import open_channel, resolve_api_key, retry_options
from client.errors import UnavailableError, error_from_rpc
from client.requests import (
    Message,
    build_detokenize_request,
    build_generate_request,
    build_tokenize_request,
    call_metadata,
    check_timeout,
    resolve_timeout,
)
from client.types import GenerationChunk, GenerationResult, ModelInfo, ResultBuilder, TokenizeResult
from stepahead_proto import generation_pb2, generation_pb2_grpc

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from client.requests import GenerateOptions


class GenerationStream(Iterator[GenerationChunk]):
    """The chunks of one Generate call, in order.

    `cancel()` (or `close()`, leaving a `with` block, or dropping the last reference, e.g. by
    breaking out of a `for` loop over it) cancels the RPC; the server then aborts the request.
    After a local cancel the iteration simply ends.
    """

    def __init__(self, call: Any) -> None:
        self._call = call
        self._cancelled = False

    def __next__(self) -> GenerationChunk:
        if self._cancelled:
            raise StopIteration
        try:
            message = next(self._call)
        except grpc.RpcError as err:
            if self._cancelled and err.code() == grpc.StatusCode.CANCELLED:
                raise StopIteration from None
            raise error_from_rpc(err) from err
        return GenerationChunk.from_proto(message)

    def cancel(self) -> None:
        """Cancel the RPC (a no-op once it has finished)."""
        self._cancelled = True
        self._call.cancel()

    def close(self) -> None:
        """Same as cancel(): release the call."""
        self.cancel()

    def __enter__(self) -> GenerationStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        call = getattr(self, "_call", None)
        if call is not None and not call.done():
            call.cancel()


class Client:
    """Blocking client: `Client("127.0.0.1:50051")`, usable as a context manager.

    `timeout` is the default deadline in seconds of every call (None: no deadline); each
    method's own `timeout` overrides it. Failed calls raise client.errors.StepaheadError
    subclasses.

    TLS: `tls_ca="ca.pem"` trusts that CA (`tls=True` alone: the system's roots). `api_key` is sent
    as `authorization: Bearer <key>` with every call; None reads STEPAHEAD_API_KEY (unset: no key).

    `wait_for_server=True`: a call made while the server cannot be reached (not started yet, or restarting, as
    `stepahead serve` restarts a crashed scheduler) waits for it, within the call's timeout, instead of failing
    at once with UnavailableError (gRPC's wait_for_ready). A stream the server drops still ends with that error.

    `retries=N` (at most 4): a call the server ends UNAVAILABLE before answering anything (a scheduler restarting, no
    executor ready yet) is tried again up to N times with backoff; one that has streamed output is never retried.
    """

    def __init__(
        self,
        target: str,
        timeout: float | None = None,
        *,
        channel_options: Sequence[tuple[str, Any]] = (),
        tls_ca: str | None = None,
        tls: bool | None = None,
        api_key: str | None = None,
        wait_for_server: bool = False,
        retries: int = 0,
    ) -> None:
        if not target:
            raise ValueError("target must be a non-empty 'host:port' address")
        self.target = target
        self.timeout = check_timeout(timeout)
        self._api_key = resolve_api_key(api_key)
        self._wait_for_server = wait_for_server
        self._channel = open_channel(target, tls, tls_ca, [*retry_options(retries), *channel_options])
        self._stub = generation_pb2_grpc.GenerationStub(self._channel)

    def generate_stream(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[Message] | None = None,
        token_ids: Sequence[int] | None = None,
        timeout: float | None = None,
        **options: Unpack[GenerateOptions],
    ) -> GenerationStream:
        """Start a generation and return its chunk iterator.

        Pass exactly one of `prompt` (raw text), `messages` (chat, rendered with the model's
        template) or `token_ids`; `options` are listed in client.requests.GenerateOptions.
        """
        request = build_generate_request(prompt, messages=messages, token_ids=token_ids, **options)
        call = self._stub.Generate(request, **self._call_options(timeout))
        return GenerationStream(call)

    def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[Message] | None = None,
        token_ids: Sequence[int] | None = None,
        timeout: float | None = None,
        **options: Unpack[GenerateOptions],
    ) -> GenerationResult:
        """Run a generation to the end and return the collected result (see generate_stream)."""
        builder = ResultBuilder()
        stream = self.generate_stream(
            prompt, messages=messages, token_ids=token_ids, timeout=timeout, **options
        )
        with stream:
            for chunk in stream:
                builder.add(chunk)
        return builder.build()

    def abort(self, request_id: str, *, timeout: float | None = None) -> bool:
        """Abort a running or waiting request; True if it was found and aborted."""
        request = generation_pb2.AbortRequest(request_id=request_id)
        try:
            response = self._stub.Abort(request, **self._call_options(timeout))
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err
        return response.aborted

    def model_info(self, *, timeout: float | None = None) -> ModelInfo:
        """Describe the served model and the server's current load."""
        try:
            response = self._stub.GetModelInfo(
                generation_pb2.GetModelInfoRequest(),
                **self._call_options(timeout),
            )
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err
        return ModelInfo.from_proto(response)

    def load_lora_adapter(self, name: str, path: str, *, timeout: float | None = None) -> tuple[str, ...]:
        """Have the server load the LoRA adapter in directory ``path`` (as its executors see it) under ``name``, usable
        as a generation's ``model`` from then on; returns the served adapters. Needs a scheduler started with
        --allow-runtime-lora-updating and executors with a free slot (--max-loras)."""
        try:
            response = self._stub.LoadLoraAdapter(
                generation_pb2.LoadLoraAdapterRequest(lora_name=name, lora_path=path),
                **self._call_options(timeout),
            )
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err
        return tuple(response.lora_adapters)

    def unload_lora_adapter(self, name: str, *, timeout: float | None = None) -> tuple[str, ...]:
        """Have the server stop serving LoRA adapter ``name`` (refused while a request uses it); returns the served
        adapters."""
        try:
            response = self._stub.UnloadLoraAdapter(
                generation_pb2.UnloadLoraAdapterRequest(lora_name=name),
                **self._call_options(timeout),
            )
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err
        return tuple(response.lora_adapters)

    def tokenize(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[Message] | None = None,
        model: str | None = None,
        timeout: float | None = None,
        tools: Sequence[Mapping[str, Any]] | str | None = None,
        add_generation_prompt: bool | None = None,
        continue_final_message: bool | None = None,
        chat_template_kwargs: Mapping[str, Any] | str | None = None,
        documents: Sequence[Mapping[str, Any]] | str | None = None,
        chat_template: str | None = None,
    ) -> TokenizeResult:
        """The token ids generate would start from for ``prompt`` (raw text) or ``messages`` (chat template
        applied, given ``tools`` and the chat template controls as generate's options of those names give them),
        without generating: to check a prompt against ``max_model_len``."""
        request = build_tokenize_request(prompt, messages=messages, model=model, tools=tools,
                                         add_generation_prompt=add_generation_prompt,
                                         continue_final_message=continue_final_message,
                                         chat_template_kwargs=chat_template_kwargs, documents=documents,
                                         chat_template=chat_template)
        try:
            response = self._stub.Tokenize(request, **self._call_options(timeout))
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err
        return TokenizeResult.from_proto(response)

    def detokenize(
        self,
        token_ids: Sequence[int],
        *,
        skip_special_tokens: bool | None = None,
        model: str | None = None,
        timeout: float | None = None,
    ) -> str:
        """The text of ``token_ids`` (special tokens dropped unless ``skip_special_tokens=False``)."""
        request = build_detokenize_request(token_ids, skip_special_tokens=skip_special_tokens, model=model)
        try:
            response = self._stub.Detokenize(request, **self._call_options(timeout))
        except grpc.RpcError as err:
            raise error_from_rpc(err) from err
        return str(response.text)

    def _call_options(self, timeout: float | None) -> dict[str, Any]:
        """The deadline, API key and waiting every RPC of this client is made with."""
        return {"timeout": resolve_timeout(timeout, self.timeout), "metadata": call_metadata(self._api_key),
                "wait_for_ready": self._wait_for_server}

    def wait_for_ready(self, timeout: float) -> None:
        """Block until the channel is connected; UnavailableError after `timeout` seconds."""
        check_timeout(timeout)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise UnavailableError(f"no server ready at {self.target} within {timeout} s") from None

    def close(self) -> None:
        """Close the channel; running streams are cancelled."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
