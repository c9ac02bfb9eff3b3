"""Tests of the sync and asyncio clients against a fake Generation servicer on 127.0.0.1.

The fake chooses its behaviour from the text prompt:
  "fail:<CODE>"  aborts the RPC with that status code and details "fake failure";
  "hang"         sends one chunk, then waits until the RPC is cancelled or Abort("hang-1");
  "truncated"    sends one chunk and ends without a finish_reason;
  anything else  streams "Hel" + "lo" and a final message (finish STOP).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from fake_servers import serving, serving_later, unused_address

import client as sdk
from client import AsyncClient, Client, GenerationResult, ModelInfo, Timings, TokenizeResult, Usage
from stepahead_proto import generation_pb2, generation_pb2_grpc

HANG_ID = "hang-1"
WAIT_S = 10.0  # upper bound for events that should happen at once; never reached when passing
HANG_LIMIT_S = 60.0  # a "hang" stream that nobody cancels or aborts ends after this


class FakeGeneration(generation_pb2_grpc.GenerationServicer):
    """Scripted servicer recording what it receives and whether a stream was cut short.

    `interrupted` is set when a Generate RPC ends before its script sent the final message
    (the client cancelled, or a deadline passed). It is set by gRPC's termination callback,
    which also fires when the server never resumes the handler after a cancel.
    """

    def __init__(self) -> None:
        self.requests: list[generation_pb2.GenerateRequest] = []
        self.tokenize_requests: list[generation_pb2.TokenizeRequest] = []
        self.interrupted = threading.Event()
        self.hanging = threading.Event()
        self._release = threading.Event()

    def Generate(self, request, context):  # noqa: N802 - gRPC method name
        self.requests.append(request)
        final_sent = threading.Event()
        context.add_callback(lambda: self._on_rpc_end(final_sent))
        request_id = request.request_id or "srv-1"
        prompt = request.text
        if prompt.startswith("fail:"):
            context.abort(grpc.StatusCode[prompt.removeprefix("fail:")], "fake failure")
        yield _response(request_id, "Hel", [1, 2], request.sampling, prompt_tokens=3)
        if prompt == "truncated":
            final_sent.set()
            return
        if prompt == "hang":
            self.hanging.set()
            self._release.wait(HANG_LIMIT_S)
            final_sent.set()
            yield _final(request_id, generation_pb2.FINISH_REASON_ABORT)
            return
        yield _response(request_id, "lo", [3], request.sampling)
        final_sent.set()
        yield _final(request_id, generation_pb2.FINISH_REASON_STOP, stop_reason="</s>")

    def _on_rpc_end(self, final_sent: threading.Event) -> None:
        if not final_sent.is_set():
            self.interrupted.set()
        self._release.set()

    def Abort(self, request, context):  # noqa: N802 - gRPC method name
        aborted = request.request_id == HANG_ID and self.hanging.is_set()
        if aborted:
            self._release.set()
        return generation_pb2.AbortResponse(aborted=aborted)

    def Tokenize(self, request, context):  # noqa: N802 - gRPC method name
        """One id per character of the text, or per message (its content's length)."""
        self.tokenize_requests.append(request)
        if request.text.startswith("fail:"):
            context.abort(grpc.StatusCode[request.text.removeprefix("fail:")], "fake failure")
        ids = [ord(c) for c in request.text] if request.HasField("text") else [
            len(m.content) for m in request.chat.messages]
        return generation_pb2.TokenizeResponse(token_ids=ids, max_model_len=2048)

    def Detokenize(self, request, context):  # noqa: N802 - gRPC method name
        """The ids as characters, with "<s>" in front when special tokens are kept."""
        special = "<s>" if request.HasField("skip_special_tokens") and not request.skip_special_tokens else ""
        return generation_pb2.DetokenizeResponse(text=special + "".join(chr(i) for i in request.token_ids))

    def GetModelInfo(self, request, context):  # noqa: N802 - gRPC method name
        return generation_pb2.ModelInfo(
            model="fake",
            max_model_len=2048,
            vocab_size=100,
            eos_token_ids=[2, 7],
            block_size=16,
            num_kv_blocks=10,
            num_free_kv_blocks=9,
            num_running=1,
            num_waiting=0,
        )


def _response(request_id, text, token_ids, sampling, prompt_tokens=0):
    response = generation_pb2.GenerateResponse(
        request_id=request_id, text=text, token_ids=token_ids, prompt_tokens=prompt_tokens
    )
    if sampling.HasField("logprobs"):
        for token_id in token_ids:
            position = response.logprobs.add()
            position.sampled.token_id, position.sampled.logprob = token_id, -0.5
            for rank in range(sampling.logprobs):
                position.top.add(token_id=rank, logprob=-1.0 - rank)
    if prompt_tokens and sampling.HasField("prompt_logprobs"):  # the first message: prompt tokens 1..n-1
        for position_index in range(1, prompt_tokens):
            position = response.prompt_logprobs.add()
            position.sampled.token_id, position.sampled.logprob = 40 + position_index, -2.0 - position_index
            for rank in range(sampling.prompt_logprobs):
                position.top.add(token_id=rank, logprob=-0.25 - rank)
    return response


def _final(request_id, finish_reason, stop_reason=""):
    return generation_pb2.GenerateResponse(
        request_id=request_id,
        finish_reason=finish_reason,
        stop_reason=stop_reason,
        usage=generation_pb2.Usage(prompt_tokens=3, completion_tokens=3, num_preemptions=1),
        timings=generation_pb2.Timings(
            queue_s=0.1, ttft_s=0.2, itl_mean_s=0.3, itl_p50_s=0.25, itl_max_s=0.5, e2e_s=1.0
        ),
    )


@pytest.fixture()
def fake() -> FakeGeneration:
    return FakeGeneration()


@pytest.fixture()
def address(fake: FakeGeneration) -> Iterator[str]:
    with serving(fake) as served_at:
        yield served_at


@pytest.fixture()
def client(address: str) -> Iterator[Client]:
    with Client(address) as sync_client:
        yield sync_client


@pytest.fixture()
def dead_address() -> str:
    return unused_address()


EXPECTED_USAGE = Usage(prompt_tokens=3, completion_tokens=3, num_preemptions=1)
EXPECTED_TIMINGS = Timings(0.1, 0.2, 0.3, 0.25, 0.5, 1.0)
ERROR_CASES = [
    ("INVALID_ARGUMENT", sdk.InvalidArgumentError),
    ("NOT_FOUND", sdk.NotFoundError),
    ("RESOURCE_EXHAUSTED", sdk.ResourceExhaustedError),
    ("UNAVAILABLE", sdk.UnavailableError),
    ("INTERNAL", sdk.InternalError),
]


def _check_hello_result(result: GenerationResult) -> None:
    assert result.request_id == "srv-1"
    assert result.text == "Hello"
    assert result.token_ids == (1, 2, 3)
    assert result.finish_reason == "stop"
    assert result.stop_reason == "</s>"
    assert result.usage == EXPECTED_USAGE
    assert result.usage.total_tokens == 6
    assert result.timings == EXPECTED_TIMINGS
    assert result.prompt_tokens == 3
    assert result.logprobs == ()
    assert result.prompt_logprobs == ()


# ---- sync client ---------------------------------------------------------------------------


def test_generate_collects_the_stream(client: Client) -> None:
    _check_hello_result(client.generate("hello"))


def test_result_to_dict_is_json_ready(client: Client) -> None:
    as_dict = json.loads(json.dumps(client.generate("hello", logprobs=1).to_dict()))
    assert as_dict["text"] == "Hello" and as_dict["finish_reason"] == "stop"
    assert as_dict["usage"]["completion_tokens"] == 3
    assert as_dict["logprobs"][0]["sampled"] == {"token_id": 1, "logprob": -0.5}


def test_generate_sends_the_built_request(client: Client, fake: FakeGeneration) -> None:
    client.generate(
        messages=[{"role": "user", "content": "hi"}], request_id="mine", temperature=0.0, stop="x"
    )
    (request,) = fake.requests
    assert request.request_id == "mine"
    assert request.chat.messages[0].content == "hi"
    assert request.sampling.HasField("temperature") and not request.sampling.HasField("top_p")
    assert list(request.stopping.stop) == ["x"]


def test_structured_output_options_reach_the_server(client: Client, fake: FakeGeneration, address: str) -> None:
    client.generate("hi", json_schema={"type": "object"})
    list(client.generate_stream("hi", regex="[0-9]+"))

    async def scenario() -> None:
        async with AsyncClient(address) as async_client:
            await async_client.generate("hi", choice=["yes", "no"])
            [c async for c in async_client.generate_stream("hi", json_object=True)]

    asyncio.run(scenario())
    formats = [request.sampling.structured_output for request in fake.requests]
    assert [f.WhichOneof("kind") for f in formats] == ["json_schema", "regex", "choice", "json_object"]
    assert formats[0].json_schema == '{"type": "object"}' and formats[1].regex == "[0-9]+"
    assert list(formats[2].choice.choices) == ["yes", "no"] and formats[3].json_object
    with pytest.raises(ValueError, match="^grammar: only one structured output format"):
        client.generate("hi", regex="a", grammar="start: 'a'")
    assert len(fake.requests) == 4


def test_generate_stream_yields_chunks_in_order(client: Client) -> None:
    chunks = list(client.generate_stream(token_ids=[4, 5], request_id="r9"))
    assert [c.text for c in chunks] == ["Hel", "lo", ""]
    assert [c.token_ids for c in chunks] == [(1, 2), (3,), ()]
    assert [c.finished for c in chunks] == [False, False, True]
    assert chunks[0].prompt_tokens == 3 and chunks[0].usage is None
    assert chunks[-1].finish_reason == "stop" and chunks[-1].usage == EXPECTED_USAGE
    assert {c.request_id for c in chunks} == {"r9"}


def test_logprobs_are_converted(client: Client) -> None:
    result = client.generate("hello", logprobs=2)
    assert len(result.logprobs) == 3
    first = result.logprobs[0]
    assert first.sampled == sdk.TokenLogprob(token_id=1, logprob=-0.5)
    assert [t.token_id for t in first.top] == [0, 1]


def test_prompt_logprobs_come_with_the_result_and_the_first_chunk(client: Client, fake: FakeGeneration) -> None:
    result = client.generate("hello", prompt_logprobs=2)
    assert fake.requests[0].sampling.prompt_logprobs == 2
    assert result.prompt_logprobs == (
        sdk.PositionLogprobs(sdk.TokenLogprob(41, -3.0), (sdk.TokenLogprob(0, -0.25), sdk.TokenLogprob(1, -1.25))),
        sdk.PositionLogprobs(sdk.TokenLogprob(42, -4.0), (sdk.TokenLogprob(0, -0.25), sdk.TokenLogprob(1, -1.25))),
    )
    assert result.logprobs == ()  # the output's logprobs are a separate option
    as_dict = json.loads(json.dumps(result.to_dict()))
    assert as_dict["prompt_logprobs"][0] == {"sampled": {"token_id": 41, "logprob": -3.0},
                                             "top": [{"token_id": 0, "logprob": -0.25},
                                                     {"token_id": 1, "logprob": -1.25}]}
    chunks = list(client.generate_stream("hello", prompt_logprobs=0))
    assert [len(c.prompt_logprobs) for c in chunks] == [2, 0, 0]
    assert chunks[0].prompt_logprobs[1] == sdk.PositionLogprobs(sdk.TokenLogprob(42, -4.0), ())


@pytest.mark.parametrize(("code", "error_type"), ERROR_CASES)
def test_status_codes_raise_typed_errors(client: Client, code: str, error_type: type) -> None:
    with pytest.raises(error_type) as raised:
        client.generate(f"fail:{code}")
    assert raised.value.code is grpc.StatusCode[code]
    assert raised.value.details == "fake failure"


def test_stream_without_final_message_is_an_internal_error(client: Client) -> None:
    with pytest.raises(sdk.InternalError, match="finish_reason"):
        client.generate("truncated")


def test_per_call_deadline(client: Client, fake: FakeGeneration) -> None:
    with pytest.raises(sdk.DeadlineExceededError) as raised:
        client.generate("hang", timeout=0.3)
    assert raised.value.code is grpc.StatusCode.DEADLINE_EXCEEDED


def test_client_default_deadline(address: str) -> None:
    with Client(address, timeout=0.3) as short:
        with pytest.raises(sdk.DeadlineExceededError):
            short.generate("hang")


def test_cancel_ends_the_rpc_and_the_iteration(client: Client, fake: FakeGeneration) -> None:
    stream = client.generate_stream("hang")
    assert next(stream).text == "Hel"
    assert fake.hanging.wait(WAIT_S)
    stream.cancel()
    assert fake.interrupted.wait(WAIT_S)
    assert list(stream) == []


def test_breaking_out_of_the_loop_cancels(client: Client, fake: FakeGeneration) -> None:
    for _ in client.generate_stream("hang"):
        assert fake.hanging.wait(WAIT_S)
        break
    assert fake.interrupted.wait(WAIT_S)


def test_leaving_the_with_block_cancels(client: Client, fake: FakeGeneration) -> None:
    with client.generate_stream("hang") as stream:
        next(stream)
        assert fake.hanging.wait(WAIT_S)
    assert fake.interrupted.wait(WAIT_S)


def test_abort_ends_the_stream_with_abort(client: Client, fake: FakeGeneration) -> None:
    stream = client.generate_stream("hang", request_id=HANG_ID)
    next(stream)
    assert fake.hanging.wait(WAIT_S)
    assert client.abort(HANG_ID) is True
    rest = list(stream)
    assert [c.finish_reason for c in rest] == ["abort"]
    assert not fake.interrupted.is_set()


def test_abort_of_unknown_request_is_false(client: Client) -> None:
    assert client.abort("nope") is False


def test_model_info(client: Client) -> None:
    assert client.model_info() == ModelInfo(
        model="fake",
        max_model_len=2048,
        vocab_size=100,
        eos_token_ids=(2, 7),
        block_size=16,
        num_kv_blocks=10,
        num_free_kv_blocks=9,
        num_running=1,
        num_waiting=0,
    )


def test_tokenize_and_detokenize(client: Client, fake: FakeGeneration) -> None:
    result = client.tokenize("abc", model="fake")
    assert result == TokenizeResult(token_ids=(97, 98, 99), max_model_len=2048) and result.count == 3
    chat = client.tokenize(messages=[{"role": "system", "content": "hi"}, {"role": "user", "content": "hello"}])
    assert chat.token_ids == (2, 5)
    sent_text, sent_chat = fake.tokenize_requests
    assert (sent_text.text, sent_text.model) == ("abc", "fake")
    assert [(m.role, m.content) for m in sent_chat.chat.messages] == [("system", "hi"), ("user", "hello")]
    assert client.detokenize([104, 105]) == "hi"
    assert client.detokenize([104, 105], skip_special_tokens=False) == "<s>hi"
    with pytest.raises(sdk.InvalidArgumentError, match="fake failure"):
        client.tokenize("fail:INVALID_ARGUMENT")


def test_tools_reach_the_server_from_both_clients(client: Client, fake: FakeGeneration, address: str) -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "content": "ok", "tool_call_id": "c1"}]
    client.generate(messages=messages, tools=tools)
    client.tokenize(messages=messages, tools=tools)

    async def scenario() -> None:
        async with AsyncClient(address) as async_client:
            await async_client.generate(messages=messages, tools=tools)
            await async_client.tokenize(messages=messages, tools=tools)

    asyncio.run(scenario())
    chats = [request.chat for request in fake.requests + fake.tokenize_requests]
    assert len(chats) == 4 and all(chat == chats[0] for chat in chats)
    assert json.loads(chats[0].tools_json) == tools and json.loads(chats[0].messages[1].tool_calls_json) == [call]
    assert chats[0].messages[2].tool_call_id == "c1"


def test_chat_template_controls_reach_the_server_from_both_clients(client: Client, fake: FakeGeneration,
                                                                    address: str) -> None:
    messages = [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "The capital is"}]
    controls: dict[str, Any] = {"add_generation_prompt": False, "continue_final_message": True,
                                "chat_template_kwargs": {"enable_thinking": False}}
    client.generate(messages=messages, **controls)
    client.tokenize(messages=messages, **controls)

    async def scenario() -> None:
        async with AsyncClient(address) as async_client:
            await async_client.generate(messages=messages, **controls)
            await async_client.tokenize(messages=messages, **controls)

    asyncio.run(scenario())
    chats = [request.chat for request in fake.requests + fake.tokenize_requests]
    assert len(chats) == 4 and all(chat == chats[0] for chat in chats)
    chat = chats[0]
    assert chat.HasField("add_generation_prompt") and not chat.add_generation_prompt and chat.continue_final_message
    assert json.loads(chat.template_kwargs_json) == {"enable_thinking": False}


def test_token_restrictions_and_truncation_reach_the_server_from_both_clients(client: Client, fake: FakeGeneration,
                                                                             address: str) -> None:
    client.generate("hi", allowed_token_ids=[5, 6], bad_words=["darn"], truncate_prompt_tokens=-1)

    async def scenario() -> None:
        async with AsyncClient(address) as async_client:
            await async_client.generate("hi", allowed_token_ids=[5, 6], bad_words=["darn"], truncate_prompt_tokens=-1)

    asyncio.run(scenario())
    assert len(fake.requests) == 2 and fake.requests[0] == fake.requests[1]
    request = fake.requests[0]
    assert list(request.sampling.allowed_token_ids) == [5, 6] and list(request.sampling.bad_words) == ["darn"]
    assert request.HasField("truncate_prompt_tokens") and request.truncate_prompt_tokens == -1


def test_bad_tokenize_arguments_fail_before_any_rpc(client: Client, fake: FakeGeneration) -> None:
    for kwargs in ({}, {"prompt": "a", "messages": [{"role": "user", "content": "a"}]}):
        with pytest.raises(ValueError, match="exactly one of prompt, messages"):
            client.tokenize(**kwargs)
    with pytest.raises(ValueError, match="at least one message"):
        client.tokenize(messages=[])
    with pytest.raises(ValueError, match="prompt: must be a string"):
        client.tokenize(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="token_ids"):
        client.detokenize([2**40])
    assert fake.tokenize_requests == []


def test_wait_for_ready(client: Client) -> None:
    client.wait_for_ready(timeout=WAIT_S)


def test_dead_server(dead_address: str) -> None:
    with Client(dead_address) as dead:
        with pytest.raises(sdk.UnavailableError):
            dead.model_info()
        with pytest.raises(sdk.UnavailableError):
            dead.generate("hello")
        with pytest.raises(sdk.UnavailableError, match="not ready|no server"):
            dead.wait_for_ready(timeout=0.2)


@pytest.fixture()
def late_address(fake: FakeGeneration) -> Iterator[str]:
    """An address nothing listens on for its first LATE_START_S seconds; the fake serves there after that."""
    with serving_later(fake, LATE_START_S) as address:
        yield address


LATE_START_S = 1.0


def test_wait_for_server_rides_over_a_server_that_is_not_up_yet(late_address: str) -> None:
    with Client(late_address, timeout=WAIT_S) as impatient, pytest.raises(sdk.UnavailableError):
        impatient.generate("hello")  # fails at once: nothing listens yet
    with Client(late_address, timeout=WAIT_S, wait_for_server=True) as patient:
        _check_hello_result(patient.generate("hello"))
        assert patient.model_info().model


def test_async_wait_for_server_rides_over_a_server_that_is_not_up_yet(late_address: str) -> None:
    async def scenario() -> GenerationResult:
        async with AsyncClient(late_address, timeout=WAIT_S, wait_for_server=True) as patient:
            return await patient.generate("hello")

    _check_hello_result(asyncio.run(scenario()))


def test_bad_arguments_fail_before_any_rpc(client: Client, fake: FakeGeneration) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        client.generate("a", token_ids=[1])
    with pytest.raises(ValueError, match="timeout"):
        client.generate("a", timeout=-1)
    with pytest.raises(ValueError, match="timeout"):
        Client("127.0.0.1:1", timeout=0)
    with pytest.raises(ValueError, match="target"):
        Client("")
    assert fake.requests == []


# ---- asyncio client ------------------------------------------------------------------------


def test_async_generate_and_stream(address: str) -> None:
    async def scenario() -> tuple[GenerationResult, list[str]]:
        async with AsyncClient(address) as async_client:
            result = await async_client.generate("hello")
            texts = [c.text async for c in async_client.generate_stream("hello")]
            return result, texts

    result, texts = asyncio.run(scenario())
    _check_hello_result(result)
    assert texts == ["Hel", "lo", ""]


def test_async_prompt_logprobs(address: str) -> None:
    async def scenario() -> tuple[GenerationResult, list[int]]:
        async with AsyncClient(address) as async_client:
            result = await async_client.generate("hello", prompt_logprobs=1)
            counts = [len(c.prompt_logprobs) async for c in async_client.generate_stream("hello", prompt_logprobs=1)]
            return result, counts

    result, counts = asyncio.run(scenario())
    assert [p.sampled.token_id for p in result.prompt_logprobs] == [41, 42]
    assert [len(p.top) for p in result.prompt_logprobs] == [1, 1]
    assert counts == [2, 0, 0]


@pytest.mark.parametrize(("code", "error_type"), ERROR_CASES[:2])
def test_async_status_codes_raise_typed_errors(address: str, code: str, error_type: type) -> None:
    async def scenario() -> None:
        async with AsyncClient(address) as async_client:
            await async_client.generate(f"fail:{code}")

    with pytest.raises(error_type) as raised:
        asyncio.run(scenario())
    assert raised.value.details == "fake failure"


def test_async_deadline(address: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(address, timeout=0.3) as async_client:
            await async_client.generate("hang")

    with pytest.raises(sdk.DeadlineExceededError):
        asyncio.run(scenario())


def test_cancelling_the_consuming_task_cancels_the_rpc(address: str, fake: FakeGeneration) -> None:
    async def scenario() -> bool:
        async with AsyncClient(address) as async_client:
            first_chunk = asyncio.Event()

            async def consume() -> None:
                async for _ in async_client.generate_stream("hang"):
                    first_chunk.set()

            task = asyncio.create_task(consume())
            await first_chunk.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return await asyncio.to_thread(fake.interrupted.wait, WAIT_S)

    assert asyncio.run(scenario())


def test_async_cancel_and_aclose_end_quietly(address: str, fake: FakeGeneration) -> None:
    async def scenario() -> list:
        async with AsyncClient(address) as async_client:
            stream = async_client.generate_stream("hang")
            await stream.__anext__()
            await stream.aclose()
            assert await asyncio.to_thread(fake.interrupted.wait, WAIT_S)
            return [c async for c in stream]

    assert asyncio.run(scenario()) == []


def test_async_abort_and_model_info(address: str, fake: FakeGeneration) -> None:
    async def scenario() -> tuple[bool, bool, list, ModelInfo]:
        async with AsyncClient(address) as async_client:
            stream = async_client.generate_stream("hang", request_id=HANG_ID)
            await stream.__anext__()
            await asyncio.to_thread(fake.hanging.wait, WAIT_S)
            aborted = await async_client.abort(HANG_ID)
            rest = [c.finish_reason async for c in stream]
            unknown = await async_client.abort("nope")
            return aborted, unknown, rest, await async_client.model_info()

    aborted, unknown, rest, info = asyncio.run(scenario())
    assert (aborted, unknown, rest) == (True, False, ["abort"])
    assert info.model == "fake" and info.eos_token_ids == (2, 7)


def test_async_tokenize_and_detokenize(address: str) -> None:
    async def scenario() -> tuple[TokenizeResult, str]:
        async with AsyncClient(address) as async_client:
            return await async_client.tokenize("ab"), await async_client.detokenize([97], skip_special_tokens=False)

    assert asyncio.run(scenario()) == (TokenizeResult(token_ids=(97, 98), max_model_len=2048), "<s>a")


def test_async_dead_server(dead_address: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(dead_address) as async_client:
            with pytest.raises(sdk.UnavailableError):
                await async_client.model_info()
            with pytest.raises(sdk.UnavailableError):
                await async_client.wait_for_ready(timeout=0.2)

    asyncio.run(scenario())
