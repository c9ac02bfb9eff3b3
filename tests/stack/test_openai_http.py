"""The OpenAI-compatible HTTP front through real processes, driven by the official `openai` package.

Tiny random checkpoint (fast): sync and async clients, streaming and not, agree with the gRPC API;
n samples with a seed are reproducible and each equals the gRPC request with seed + i; logprobs,
stop, usage and include_usage as OpenAI documents them; errors in OpenAI's shape and status, the
server serving on; a client that goes away frees its KV blocks; traceparent continued; an
unreachable executor is 503. Default model (slow): greedy chat completions equal the gRPC API's
tokens on 10 MT-Bench prompts.
"""

from __future__ import annotations

import asyncio
import os
import time

import httpx
import openai
import pytest
from cpu_share import executor_threads

from client import AsyncClient, Client
from client.bench.otlp_receiver import OtlpReceiver
from client.stack import LocalStack

pytestmark = pytest.mark.stack

MESSAGES = [{"role": "user", "content": "Tell me about the sea."}]
GREEDY = dict(temperature=0.0, max_tokens=12, extra_body={"ignore_eos": True})


@pytest.fixture(scope="module")
def receiver():
    with OtlpReceiver() as started:
        yield started


@pytest.fixture(scope="module")
def stack(request, tiny_model_dir, receiver):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "STEPAHEAD_"))}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY="100")
    stack = LocalStack(str(tiny_model_dir), ["--num-threads", executor_threads()],
                       ["--http-port", "0", "--metrics-port", "0"], env=env)
    failed_before = request.session.testsfailed
    try:
        stack.start(timeout_s=300)
        assert stack.http_url and stack.http_url.startswith("http://127.0.0.1:")
        yield stack
    finally:
        if request.session.testsfailed > failed_before:
            print(stack.logs())
        stack.stop()


@pytest.fixture(scope="module")
def model_name(stack) -> str:
    with Client(stack.address) as client:
        return client.model_info().model


def sync_openai(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused", max_retries=0)


def async_openai(stack) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{stack.http_url}/v1", api_key="unused", max_retries=0)


def wait_until_all_blocks_free(address: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    with Client(address) as client:
        while True:
            info = client.model_info()
            if info.num_free_kv_blocks == info.num_kv_blocks and info.num_running == info.num_waiting == 0:
                return
            assert time.monotonic() < deadline, f"blocks not freed: {info}"
            time.sleep(0.05)


def test_sync_and_async_streaming_or_not_agree_with_grpc(stack, model_name):
    with Client(stack.address) as grpc_client:
        expected = grpc_client.generate(messages=MESSAGES, temperature=0.0, max_tokens=12, ignore_eos=True)
    with sync_openai(stack) as client:
        whole = client.chat.completions.create(model=model_name, messages=MESSAGES, **GREEDY)
        streamed = list(client.chat.completions.create(model=model_name, messages=MESSAGES, stream=True, **GREEDY))

    async def run_async():
        async with async_openai(stack) as client:
            whole = await client.chat.completions.create(model=model_name, messages=MESSAGES, **GREEDY)
            stream = await client.chat.completions.create(model=model_name, messages=MESSAGES, stream=True, **GREEDY)
            return whole, [chunk async for chunk in stream]

    async_whole, async_streamed = asyncio.run(run_async())
    for response in (whole, async_whole):
        (choice,) = response.choices
        assert choice.message.content == expected.text and choice.message.role == "assistant"
        assert choice.finish_reason == "length" and response.model == model_name
        assert response.usage.prompt_tokens == expected.usage.prompt_tokens
        assert response.usage.completion_tokens == 12
        assert response.usage.total_tokens == expected.usage.prompt_tokens + 12
    for chunks in (streamed, async_streamed):
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == expected.text
        assert [chunk.choices[0].finish_reason for chunk in chunks][-1] == "length"
        assert all(chunk.usage is None for chunk in chunks)


def test_the_responses_api_agrees_with_grpc_whole_streamed_and_async(stack, model_name):
    """POST /v1/responses through the openai package: create, the stream helper's final response, async events."""
    with Client(stack.address) as grpc_client:
        expected = grpc_client.generate(messages=[{"role": "system", "content": "Be brief."}, *MESSAGES],
                                        temperature=0.0, max_tokens=12)
    status = "incomplete" if expected.finish_reason == "length" else "completed"
    request = dict(model=model_name, input=MESSAGES, instructions="Be brief.", temperature=0.0, max_output_tokens=12)
    with sync_openai(stack) as client:
        whole = client.responses.create(**request)
        with client.responses.stream(**request) as stream:  # (its get_final_response wants "completed" only)
            streamed = [event for event in stream][-1].response

    async def run_async():
        async with async_openai(stack) as client:
            return [event async for event in await client.responses.create(**request, stream=True)]

    events = asyncio.run(run_async())
    for response in (whole, streamed, events[-1].response):
        assert response.output_text == expected.text and response.status == status and response.model == model_name
        assert response.usage.input_tokens == expected.usage.prompt_tokens
        assert response.usage.output_tokens == expected.usage.completion_tokens
    assert "".join(event.delta for event in events if event.type == "response.output_text.delta") == expected.text
    counted = sync_openai_count(stack, request)
    assert counted.input_tokens == expected.usage.prompt_tokens


def test_responses_continue_from_stored_ones_and_can_be_retrieved_and_deleted(stack, model_name):
    """The openai package's previous_response_id, responses.retrieve, input_items.list and responses.delete: a
    continued conversation gives the greedy text of the whole conversation sent at once."""
    first_turn = dict(model=model_name, temperature=0.0, max_output_tokens=8)
    with sync_openai(stack) as client:
        first = client.responses.create(input="Name a colour.", **first_turn)
        assert client.responses.retrieve(first.id).output_text == first.output_text
        (item,) = client.responses.input_items.list(first.id)
        assert (item.role, item.content[0].text) == ("user", "Name a colour.")
        continued = client.responses.create(input="Another one?", previous_response_id=first.id, **first_turn)
        whole = client.responses.create(input=[{"role": "user", "content": "Name a colour."},
                                               {"role": "assistant", "content": first.output_text},
                                               {"role": "user", "content": "Another one?"}], store=False, **first_turn)
        assert continued.output_text == whole.output_text
        assert continued.usage.input_tokens == whole.usage.input_tokens
        client.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)


def test_background_responses_are_polled_and_cancelled_through_the_openai_package(stack, model_name):
    request = dict(model=model_name, input="Name a colour.", temperature=0.0, max_output_tokens=8)
    with sync_openai(stack) as client:
        foreground = client.responses.create(**request)
        queued = client.responses.create(**request, background=True)
        assert queued.status == "queued" and queued.background
        deadline = time.monotonic() + 60
        while (done := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert done.status == foreground.status and done.output_text == foreground.output_text
        long = client.responses.create(**{**request, "max_output_tokens": 400}, background=True)
        cancelled = client.responses.cancel(long.id)
        assert cancelled.status == "cancelled" and client.responses.retrieve(long.id).status == "cancelled"


def test_responses_output_text_logprobs_are_the_chat_endpoints(stack, model_name):
    with sync_openai(stack) as client:
        chat = client.chat.completions.create(model=model_name, messages=MESSAGES, max_tokens=6, temperature=0.0,
                                              logprobs=True, top_logprobs=3)
        response = client.responses.create(model=model_name, input=MESSAGES, max_output_tokens=6, temperature=0.0,
                                           include=["message.output_text.logprobs"], top_logprobs=3)
    (part,) = response.output[0].content
    expected = chat.choices[0].logprobs.content
    assert [(entry.token, len(entry.top_logprobs)) for entry in part.logprobs] == [
        (entry.token, 3) for entry in expected]
    assert [entry.logprob for entry in part.logprobs] == pytest.approx([entry.logprob for entry in expected], abs=1e-4)


def sync_openai_count(stack, request: dict):
    """The openai package's responses.input_tokens.count of ``request``'s prompt."""
    with sync_openai(stack) as client:
        return client.responses.input_tokens.count(model=request["model"], input=request["input"],
                                                   instructions=request["instructions"])


def test_include_usage_adds_a_last_chunk_with_the_usage(stack, model_name):
    with sync_openai(stack) as client:
        chunks = list(client.chat.completions.create(
            model=model_name, messages=MESSAGES, stream=True, stream_options={"include_usage": True}, **GREEDY))
    *body, last = chunks
    assert last.choices == [] and last.usage.completion_tokens == 12 and last.usage.prompt_tokens > 0
    assert all(chunk.usage is None for chunk in body)


def test_n_seeded_samples_are_reproducible_and_each_is_the_grpc_sample_of_seed_plus_i(stack, model_name):
    params = dict(model=model_name, messages=MESSAGES, n=3, seed=1234, temperature=1.0, max_tokens=16,
                  extra_body={"ignore_eos": True})
    with sync_openai(stack) as client:
        first = client.chat.completions.create(**params)
        again = client.chat.completions.create(**params)
    texts = [choice.message.content for choice in sorted(first.choices, key=lambda c: c.index)]
    assert texts == [choice.message.content for choice in sorted(again.choices, key=lambda c: c.index)]
    assert len(set(texts)) == 3
    assert first.usage.completion_tokens == 48
    with Client(stack.address) as grpc_client:
        for index, text in enumerate(texts):
            sample = grpc_client.generate(messages=MESSAGES, seed=1234 + index, temperature=1.0, max_tokens=16,
                                          ignore_eos=True)
            assert sample.text == text
        assert first.usage.prompt_tokens == sample.usage.prompt_tokens  # counted once for the three samples


def test_chat_logprobs_match_grpc_and_openai_semantics(stack, model_name):
    with sync_openai(stack) as client:
        response = client.chat.completions.create(model=model_name, messages=MESSAGES, logprobs=True, top_logprobs=3,
                                                  **GREEDY)
    with Client(stack.address) as grpc_client:
        expected = grpc_client.generate(messages=MESSAGES, temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=3)
    content = response.choices[0].logprobs.content
    assert len(content) == response.usage.completion_tokens == len(expected.logprobs)
    for entry, position in zip(content, expected.logprobs):
        assert entry.logprob == pytest.approx(position.sampled.logprob, abs=1e-4)
        assert len(entry.top_logprobs) == 3
        top = [alternative.logprob for alternative in entry.top_logprobs]
        assert top == sorted(top, reverse=True) and entry.logprob == pytest.approx(top[0])  # greedy: the best
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token or "\ufffd" in entry.token


def test_completions_with_token_ids_and_legacy_logprobs(stack, model_name):
    prompt = [5, 17, 33, 64, 90]
    with sync_openai(stack) as client:
        response = client.completions.create(model=model_name, prompt=prompt, max_tokens=8, temperature=0.0,
                                             logprobs=2, extra_body={"ignore_eos": True})
        streamed = list(client.completions.create(model=model_name, prompt=prompt, max_tokens=8, temperature=0.0,
                                                  stream=True, extra_body={"ignore_eos": True}))
    with Client(stack.address) as grpc_client:
        expected = grpc_client.generate(token_ids=prompt, temperature=0.0, max_tokens=8, ignore_eos=True)
    (choice,) = response.choices
    assert choice.text == expected.text == "".join(chunk.choices[0].text for chunk in streamed)
    assert response.object == "text_completion" and response.usage.prompt_tokens == len(prompt)
    logprobs = choice.logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.text_offset) == 8
    assert all(len(top) <= 2 for top in logprobs.top_logprobs)


def test_stop_string_ends_the_text_before_it(stack, model_name):
    with Client(stack.address) as grpc_client:
        text = grpc_client.generate(messages=MESSAGES, temperature=0.0, max_tokens=24, ignore_eos=True).text
    stop = next(text[i:i + 2] for i in range(4, len(text) - 2)
                if text[i:i + 2].strip() and text[i:i + 2] not in text[:i])
    with sync_openai(stack) as client:
        response = client.chat.completions.create(model=model_name, messages=MESSAGES, temperature=0.0, max_tokens=24,
                                                  stop=[stop], extra_body={"ignore_eos": True})
    (choice,) = response.choices
    assert choice.finish_reason == "stop" and choice.message.content == text[:text.index(stop)]


def test_logit_bias_is_the_grpc_bias_on_both_endpoints(stack, model_name):
    with Client(stack.address) as grpc_client:
        plain = grpc_client.generate(messages=MESSAGES, temperature=0.0, max_tokens=12, ignore_eos=True)
        bias = {plain.token_ids[0]: -100.0, plain.token_ids[3]: -100.0, 65: 5.0}
        expected = grpc_client.generate(messages=MESSAGES, temperature=0.0, max_tokens=12, ignore_eos=True,
                                        logit_bias=bias)
        forced = grpc_client.generate(token_ids=[5, 17, 33], temperature=0.0, max_tokens=6, ignore_eos=True,
                                      logit_bias={65: 100.0})
    assert expected.text != plain.text and list(forced.token_ids) == [65] * 6
    with sync_openai(stack) as client:
        chat = client.chat.completions.create(model=model_name, messages=MESSAGES,
                                              logit_bias={str(k): v for k, v in bias.items()}, **GREEDY)
        completion = client.completions.create(model=model_name, prompt=[5, 17, 33], max_tokens=6, temperature=0.0,
                                               logit_bias={"65": 100}, extra_body={"ignore_eos": True})
    assert chat.choices[0].message.content == expected.text
    assert completion.choices[0].text == forced.text


BAD = [
    (dict(logit_bias={"5": 101}), "logit_bias"),
    (dict(logit_bias={"100000": 1}), "logit_bias"),
    (dict(temperature=-1.0), "temperature"),
    (dict(n=0), "n"),
    (dict(top_logprobs=2), "top_logprobs"),
    (dict(max_tokens=100_000), "max_tokens"),
    (dict(extra_body={"temperature": "hot"}), "temperature"),
    (dict(messages=[{"role": "robot", "content": "hi"}]), "messages[0].role"),
    (dict(extra_body={"guided_regex": "[a-"}), "guided_regex"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objec"}}}),
     "response_format.json_schema.schema"),
    (dict(extra_body={"guided_decoding_backend": "xgrammar"}), "guided_decoding_backend"),
]


@pytest.mark.parametrize("params, param", BAD, ids=[p for _, p in BAD])
def test_bad_requests_are_openai_400s_and_the_server_serves_on(stack, model_name, params, param):
    with sync_openai(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(**{"model": model_name, "messages": MESSAGES, **params})
        error = caught.value.response.json()["error"]
        assert caught.value.status_code == 400 and error["param"] == param
        assert error["type"] == "invalid_request_error" and set(error) == {"message", "type", "param", "code"}
        assert client.chat.completions.create(model=model_name, messages=MESSAGES, max_tokens=2).choices


def test_a_reply_message_sent_back_as_the_sdk_returned_it_is_accepted(stack, model_name):
    """A conversation that appends the SDK's reply object itself, as the openai package's examples do."""
    with sync_openai(stack) as client:
        reply = client.chat.completions.create(model=model_name, messages=MESSAGES, **GREEDY).choices[0].message
        follow_up = [*MESSAGES, reply, {"role": "user", "content": "And the sky?"}]
        answer = client.chat.completions.create(model=model_name, messages=follow_up, **GREEDY)
        assert answer.choices[0].finish_reason == "length" and answer.usage.completion_tokens == 12


def test_the_reasoning_parser_splits_grpc_and_http_outputs_alike(tiny_model_dir, launch_stack):
    """--reasoning-parser deepseek_r1 through the real scheduler: the whole output (gRPC, split_reasoning false) split
    as the parser reads it is the gRPC result's reasoning and text, and what the openai package reads as the message's
    reasoning and content, whole and streamed; it accepts the reply sent back."""
    from scheduler_svc.reasoning.splitters import split_reasoning

    stack = launch_stack.with_scheduler(tiny_model_dir, [], ["--http-port", "0", "--reasoning-parser", "deepseek_r1"])
    with Client(stack.address) as grpc_client, sync_openai(stack) as client:
        name = grpc_client.model_info().model
        expected = grpc_client.generate(messages=MESSAGES, temperature=0.0, max_tokens=12, ignore_eos=True,
                                        skip_special_tokens=False, split_reasoning=False).text  # as a parser reads
        reasoning, content = split_reasoning("deepseek_r1", expected)
        split = grpc_client.generate(messages=MESSAGES, temperature=0.0, max_tokens=12, ignore_eos=True)
        assert (split.reasoning, split.text) == (reasoning, content)
        reply = client.chat.completions.create(model=name, messages=MESSAGES, **GREEDY).choices[0].message
        assert (reply.reasoning, reply.reasoning_content, reply.content or "") == (reasoning, reasoning, content)
        chunks = list(client.chat.completions.create(model=name, messages=MESSAGES, stream=True, **GREEDY))
        deltas = [chunk.choices[0].delta for chunk in chunks]
        assert "".join(getattr(delta, "reasoning", None) or "" for delta in deltas) == reasoning
        assert "".join(delta.content or "" for delta in deltas) == content
        follow_up = [*MESSAGES, reply, {"role": "user", "content": "And the sky?"}]
        assert client.chat.completions.create(model=name, messages=follow_up, **GREEDY).usage.completion_tokens == 12


def test_unknown_model_is_404_model_not_found(stack, model_name):
    with sync_openai(stack) as client:
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(model="gpt-nothing", messages=MESSAGES)
        assert caught.value.code == "model_not_found" and caught.value.param == "model"
        assert [model.id for model in client.models.list()] == [model_name]
        assert client.models.retrieve(model_name).id == model_name


def aborted_so_far(stack) -> float:
    """The scheduler's count of requests that ended aborted (other tests of this module's stack abort some too)."""
    with httpx.Client(base_url=stack.http_url) as http:
        text = http.get("/metrics").text
    series = 'stepahead_scheduler_requests_finished_total{finish_reason="abort"} '
    return next((float(line.removeprefix(series)) for line in text.splitlines() if line.startswith(series)), 0.0)


def test_a_client_that_goes_away_mid_stream_frees_its_blocks(stack, model_name):
    aborted_before = aborted_so_far(stack)
    with sync_openai(stack) as client:
        stream = client.chat.completions.create(model=model_name, messages=MESSAGES, stream=True, max_tokens=400,
                                                temperature=0.0, extra_body={"ignore_eos": True})
        for received, _ in enumerate(stream):
            if received == 3:
                break
        with Client(stack.address) as grpc_client:
            assert grpc_client.model_info().num_running == 1
        stream.close()
    wait_until_all_blocks_free(stack.address)
    assert aborted_so_far(stack) == aborted_before + 1


def test_health_metrics_and_http_counters(stack, model_name):
    with httpx.Client(base_url=stack.http_url) as http:
        assert http.get("/health").json() == {"status": "SERVING"}
        metrics = http.get("/metrics")
    assert metrics.status_code == 200
    assert 'stepahead_scheduler_http_requests_total{route="/v1/chat/completions",status="200"}' in metrics.text
    assert "stepahead_scheduler_time_to_first_token_seconds_bucket" in metrics.text


def test_tokenize_and_detokenize_agree_with_grpc_and_the_chat_usage(stack, model_name):
    with httpx.Client(base_url=stack.http_url) as http, Client(stack.address) as client:
        counted = http.post("/tokenize", json={"model": model_name, "messages": MESSAGES}).json()
        assert counted["tokens"] == list(client.tokenize(messages=MESSAGES).token_ids)
        reply = sync_openai(stack).chat.completions.create(model=model_name, messages=MESSAGES, **GREEDY)
        assert counted["count"] == reply.usage.prompt_tokens
        text = http.post("/detokenize", json={"tokens": counted["tokens"][:5]}).json()["prompt"]
        assert text == client.detokenize(counted["tokens"][:5])


def test_traceparent_is_continued(stack, model_name, receiver):
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with sync_openai(stack) as client:
        client.chat.completions.create(model=model_name, messages=MESSAGES, max_tokens=3,
                                       extra_headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})

    def found(spans):
        names = {span.name for span in spans if span.trace_id == trace_id}
        return {"POST /v1/chat/completions", f"chat {model_name}", "stepahead.decode"} <= names

    assert receiver.wait_for(found, timeout_s=30), [(s.name, s.trace_id) for s in receiver.spans()]
    spans = [span for span in receiver.spans() if span.trace_id == trace_id]
    server = next(span for span in spans if span.name == "POST /v1/chat/completions")
    request = next(span for span in spans if span.name == f"chat {model_name}")
    assert server.parent_span_id == parent_id and request.parent_span_id == server.span_id
    assert request.attributes["gen_ai.usage.output_tokens"] == 3


def test_an_unreachable_executor_is_503(tiny_model_dir, launch_stack):
    stack = launch_stack(tiny_model_dir, ["--max-model-len", "256"],
                         ["--http-port", "0", "--executor-recovery-timeout-s", "0.5"])
    stack.executor.stop()
    with openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused", max_retries=0) as client:
        for stream in (False, True):
            with pytest.raises(openai.APIStatusError) as caught:
                client.chat.completions.create(model=stack_model(stack), messages=MESSAGES, max_tokens=2,
                                               stream=stream)
            assert caught.value.status_code == 503
            assert caught.value.response.json()["error"]["type"] == "server_error"
    deadline = time.monotonic() + 30
    with httpx.Client(base_url=stack.http_url) as http:
        while http.get("/health").status_code != 503:
            assert time.monotonic() < deadline, "readiness never turned off"
            time.sleep(0.2)


def stack_model(stack) -> str:
    with httpx.Client(base_url=stack.http_url) as http:
        return http.get("/v1/models").json()["data"][0]["id"]


@pytest.mark.slow
def test_greedy_chat_equals_grpc_tokens_on_mtbench(default_model_dir, launch_stack):
    from client.mtbench import load_mtbench_first_turns
    from scheduler_svc.tokenizer import Tokenizer

    prompts = load_mtbench_first_turns(6)  # CI time: each runs twice, gRPC and HTTP at once
    stack = launch_stack.with_scheduler(default_model_dir, [], ["--http-port", "0"])
    tokenizer = Tokenizer.from_dir(default_model_dir)

    async def both():
        async with AsyncClient(stack.address) as grpc_client, async_openai(stack) as http_client:
            name = (await grpc_client.model_info()).model
            grpc_runs = asyncio.gather(*(grpc_client.generate(
                messages=[{"role": "user", "content": p}], temperature=0.0, max_tokens=48) for p in prompts))
            http_runs = asyncio.gather(*(http_client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": p}], temperature=0.0, max_tokens=48,
                logprobs=True) for p in prompts))
            return name, await grpc_runs, await http_runs

    name, grpc_results, http_results = asyncio.run(both())
    for expected, response in zip(grpc_results, http_results):
        choice = response.choices[0]
        assert [entry.token for entry in choice.logprobs.content] == [
            tokenizer.decode([token], skip_special_tokens=False) for token in expected.token_ids]
        assert choice.message.content == expected.text
        assert choice.finish_reason == expected.finish_reason
        assert response.usage.completion_tokens == len(expected.token_ids)
        assert response.usage.prompt_tokens == expected.usage.prompt_tokens
    # the sync client, streaming, on two of them
    with sync_openai(stack) as client:
        for prompt, expected in list(zip(prompts, grpc_results))[:2]:
            chunks = client.chat.completions.create(model=name, messages=[{"role": "user", "content": prompt}],
                                                    temperature=0.0, max_tokens=48, stream=True)
            assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == expected.text
