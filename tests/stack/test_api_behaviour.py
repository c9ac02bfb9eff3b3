"""Public API behaviour through real processes: seeded sampling, bad input, cancellation, abort."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version

import grpc
import pytest

from client import AlreadyExistsError, Client, InvalidArgumentError
from stepahead_proto import generation_pb2, generation_pb2_grpc

pytestmark = pytest.mark.stack

PROMPT = [5, 17, 33, 64, 90, 120, 48, 3, 11, 200]
SEEDED = dict(temperature=0.9, top_p=0.9, top_k=50, seed=1234, max_tokens=24, ignore_eos=True,
              repetition_penalty=1.1, presence_penalty=0.2, frequency_penalty=0.1, logprobs=3)


@pytest.fixture(scope="module")
def stack(tiny_model_dir, launch_module_stack):
    return launch_module_stack.with_scheduler(tiny_model_dir, ["--max-model-len", "256"])


def wait_until_all_blocks_free(client: Client, timeout_s: float = 5.0) -> generation_pb2.ModelInfo:
    deadline = time.monotonic() + timeout_s
    while True:
        info = client.model_info()
        if info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == 0:
            return info
        assert time.monotonic() < deadline, f"blocks not freed: {info}"
        time.sleep(0.01)


def test_seeded_sampling_is_reproducible_alone_and_in_a_batch(stack):
    with Client(stack.address) as client:
        alone = client.generate(token_ids=PROMPT, **SEEDED)
        again = client.generate(token_ids=PROMPT, **SEEDED)
        assert alone.token_ids == again.token_ids
        assert [p.sampled.logprob for p in alone.logprobs] == pytest.approx(
            [p.sampled.logprob for p in again.logprobs], abs=1e-5)

        def other(index: int):
            params = dict(temperature=1.0, max_tokens=30, ignore_eos=True)
            if index % 2:
                params.update(seed=index, top_p=0.8)
            return client.generate(token_ids=[7 + index] * (3 + index), **params)

        with ThreadPoolExecutor(9) as pool:
            others = [pool.submit(other, i) for i in range(8)]
            in_batch = pool.submit(client.generate, token_ids=PROMPT, **SEEDED)
            for future in others:
                future.result()
            assert in_batch.result().token_ids == alone.token_ids
        different_seed = client.generate(token_ids=PROMPT, **{**SEEDED, "seed": 99})
        assert different_seed.token_ids != alone.token_ids
        assert len(alone.logprobs) == len(alone.token_ids) and all(len(p.top) == 3 for p in alone.logprobs)


BAD_REQUESTS = [
    ("text", dict(prompt="")),
    ("prompt", dict(token_ids=[5] * 300)),
    ("max_tokens", dict(prompt="hi", max_tokens=0)),
    ("max_tokens", dict(prompt="hi", max_tokens=10_000)),
    ("temperature", dict(prompt="hi", temperature=-0.5)),
    ("top_p", dict(prompt="hi", top_p=0.0)),
    ("top_p", dict(prompt="hi", top_p=1.5)),
    ("top_k", dict(prompt="hi", top_k=0)),
    ("top_k", dict(prompt="hi", top_k=-2)),
    ("repetition_penalty", dict(prompt="hi", repetition_penalty=0.0)),
    ("repetition_penalty", dict(prompt="hi", repetition_penalty=-1.0)),
    ("presence_penalty", dict(prompt="hi", presence_penalty=-3.0)),
    ("frequency_penalty", dict(prompt="hi", frequency_penalty=2.5)),
    ("min_p", dict(prompt="hi", min_p=1.5)),
    ("logprobs", dict(prompt="hi", logprobs=50)),
    ("token_ids.ids[1]", dict(token_ids=[5, 400])),
    ("token_ids.ids[0]", dict(token_ids=[-1])),
    ("stop_token_ids[0]", dict(prompt="hi", stop_token_ids=[100_000])),
    ("model", dict(prompt="hi", model="no-such-model")),
    ("min_tokens", dict(prompt="hi", max_tokens=4, min_tokens=5)),
    ("chat.messages[0].role", dict(messages=[{"role": "robot", "content": "hi"}])),
    ("sampling.logit_bias[400]", dict(prompt="hi", logit_bias={400: 1.0})),
    ("sampling.logit_bias[5]", dict(prompt="hi", logit_bias={5: 150.0})),
    ("sampling.logit_bias", dict(prompt="hi", logit_bias={i: 1.0 for i in range(1025)})),
]


@pytest.mark.parametrize("field, kwargs", BAD_REQUESTS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_REQUESTS)])
def test_bad_input_is_invalid_argument_naming_the_field(stack, field, kwargs):
    with Client(stack.address) as client:
        with pytest.raises(InvalidArgumentError) as caught:
            client.generate(**kwargs)
        assert field in caught.value.details
        still_serving = client.generate(prompt="hello", max_tokens=3, temperature=0.0, ignore_eos=True)
        assert len(still_serving.token_ids) == 3


def test_missing_prompt_and_empty_chat_are_invalid(stack):
    with grpc.insecure_channel(stack.address) as channel:
        stub = generation_pb2_grpc.GenerationStub(channel)
        for request, field in (
            (generation_pb2.GenerateRequest(), "prompt"),
            (generation_pb2.GenerateRequest(chat=generation_pb2.ChatPrompt()), "chat.messages"),
            (generation_pb2.GenerateRequest(token_ids=generation_pb2.TokenIdsPrompt()), "token_ids"),
        ):
            with pytest.raises(grpc.RpcError) as caught:
                list(stub.Generate(request))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert field in caught.value.details()


def test_logit_bias_bans_and_forces_tokens_and_keeps_seeded_sampling_reproducible(stack):
    with Client(stack.address) as client:
        plain = client.generate(token_ids=PROMPT, temperature=0.0, max_tokens=16, ignore_eos=True).token_ids
        banned = {token: -100.0 for token in set(plain)}
        avoided = client.generate(token_ids=PROMPT, temperature=0.0, max_tokens=16, ignore_eos=True,
                                  logit_bias=banned).token_ids
        assert len(avoided) == 16 and not set(avoided) & set(plain)
        forced = client.generate(token_ids=PROMPT, temperature=0.0, max_tokens=8, ignore_eos=True,
                                 logit_bias={42: 100.0})
        assert list(forced.token_ids) == [42] * 8
        seeded = dict(token_ids=PROMPT, temperature=1.0, seed=7, max_tokens=24, ignore_eos=True,
                      logit_bias={token: -100.0 for token in range(0, 400, 2)})
        first, again = client.generate(**seeded).token_ids, client.generate(**seeded).token_ids
        assert first == again and len(first) == 24 and all(token % 2 for token in first)
        wait_until_all_blocks_free(client)


def test_client_disconnect_aborts_and_frees_blocks(stack):
    with Client(stack.address) as client:
        stream = client.generate_stream(token_ids=PROMPT, max_tokens=200, temperature=0.0, ignore_eos=True)
        received = 0
        for chunk in stream:
            received += len(chunk.token_ids)
            if received >= 5:
                break
        info = client.model_info()
        assert info.num_running == 1 and info.num_free_kv_blocks < info.num_kv_blocks
        stream.cancel()
        wait_until_all_blocks_free(client)


def test_abort_rpc_ends_stream_with_abort(stack):
    with Client(stack.address) as client:
        stream = client.generate_stream(token_ids=PROMPT, request_id="to-abort", max_tokens=200, temperature=0.0,
                                        ignore_eos=True)
        first = next(stream)
        assert first.request_id == "to-abort"
        assert client.abort("to-abort")
        last = None
        for chunk in stream:
            last = chunk
        assert last is not None and last.finish_reason == "abort"
        assert not client.abort("to-abort")
        wait_until_all_blocks_free(client)


def test_duplicate_request_id_is_rejected(stack):
    with Client(stack.address) as client:
        stream = client.generate_stream(token_ids=PROMPT, request_id="dup", max_tokens=100, temperature=0.0,
                                        ignore_eos=True)
        next(stream)
        with pytest.raises(AlreadyExistsError) as caught:
            client.generate(token_ids=PROMPT, request_id="dup", max_tokens=3)
        assert caught.value.code == grpc.StatusCode.ALREADY_EXISTS and "request_id" in caught.value.details
        stream.cancel()
        wait_until_all_blocks_free(client)


def test_stop_string_and_stop_token(stack):
    with Client(stack.address) as client:
        free = client.generate(token_ids=PROMPT, max_tokens=30, temperature=0.0, ignore_eos=True)
        stop_token = free.token_ids[5]
        first_index = free.token_ids.index(stop_token)
        stopped = client.generate(token_ids=PROMPT, max_tokens=30, temperature=0.0, ignore_eos=True,
                                  stop_token_ids=[stop_token])
        assert stopped.finish_reason == "stop" and stopped.token_ids == free.token_ids[: first_index + 1]
        assert stopped.stop_reason == str(stop_token)
        text = free.text
        needle = text[len(text) // 2 : len(text) // 2 + 2]
        if needle.strip():
            by_string = client.generate(token_ids=PROMPT, max_tokens=30, temperature=0.0, ignore_eos=True,
                                        stop=[needle])
            assert by_string.finish_reason == "stop" and by_string.stop_reason == needle
            assert needle not in by_string.text and text.startswith(by_string.text)
        min_tokens = client.generate(token_ids=PROMPT, max_tokens=30, temperature=0.0, ignore_eos=True,
                                     stop_token_ids=[stop_token], min_tokens=first_index + 2)
        assert len(min_tokens.token_ids) > first_index + 1


def test_tokenize_gives_generates_prompt_and_detokenize_its_text(stack):
    messages = [{"role": "user", "content": "The quick brown fox"}]
    with Client(stack.address) as client:
        counted = client.tokenize(messages=messages)
        result = client.generate(messages=messages, temperature=0.0, max_tokens=12, ignore_eos=True)
        assert counted.count == result.usage.prompt_tokens and counted.max_model_len == 256
        again = client.generate(token_ids=counted.token_ids, temperature=0.0, max_tokens=12, ignore_eos=True)
        assert again.token_ids == result.token_ids
        assert client.detokenize(result.token_ids) == result.text
        assert client.model_info().server_version == version("stepahead")
        long_prompt = client.tokenize("the lazy dog sleeps " * 80)
        assert long_prompt.count >= 256  # counted, though generate would refuse it
        for call, kwargs, field in ((client.tokenize, dict(prompt="hi", model="other"), "model"),
                                    (client.tokenize, dict(messages=[{"role": "robot", "content": "hi"}]),
                                     "chat.messages[0].role"),
                                    (client.detokenize, dict(token_ids=[5, 400]), "token_ids[1]")):
            with pytest.raises(InvalidArgumentError) as caught:
                call(**kwargs)
            assert caught.value.details.startswith(field)
