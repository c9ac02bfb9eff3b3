"""The HTTP app in process (httpx over ASGI) against a real Engine and a fake executor: shapes of
responses and stream chunks, usage, n and seeds, logprobs, stop, errors and their statuses, keys."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest
from http_helpers import EOS, MAX_MODEL_LEN, MODEL, FakeExecutor, events, serve
from tiny_tokenizers import build_byte_level

from scheduler_svc.tokenizer import Tokenizer

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def test_chat_completion_shape_and_usage(tokenizer):
    async def test(client, served):
        response = await client.post(CHAT, json={"model": MODEL, "messages": MESSAGES, "max_tokens": 5})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["object"] == "chat.completion" and body["model"] == MODEL and body["id"].startswith("chatcmpl-")
        (choice,) = body["choices"]
        assert choice["index"] == 0 and choice["finish_reason"] == "length" and choice["logprobs"] is None
        assert choice["message"] == {"role": "assistant", "content": tokenizer.decode(list(range(10, 15)))}
        prompt_tokens = len(tokenizer.apply_chat_template(MESSAGES))
        assert body["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 5,
                                 "total_tokens": prompt_tokens + 5, "prompt_tokens_details": {"cached_tokens": 0}}

    serve(tokenizer, test)


def test_eos_finishes_with_stop(tokenizer):
    async def test(client, served):
        body = (await client.post(CHAT, json={"messages": MESSAGES, "max_tokens": 50})).json()
        assert body["choices"][0]["finish_reason"] == "stop"
        assert body["usage"]["completion_tokens"] == 4  # three tokens, then EOS

    serve(tokenizer, test, executor=FakeExecutor(eos_after=3))


def test_chat_stream_chunks_role_first_usage_last_and_done(tokenizer):
    async def test(client, served):
        request = {"messages": MESSAGES, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}
        chunks = events(await client.post(CHAT, json=request))
        assert chunks[-1] == "[DONE]"
        usage_chunk, body = chunks[-2], chunks[:-2]
        assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 4
        assert all(chunk["object"] == "chat.completion.chunk" and chunk["usage"] is None for chunk in body)
        assert body[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in body)
        assert text == tokenizer.decode(list(range(10, 14)))
        assert [chunk["choices"][0]["finish_reason"] for chunk in body][-1] == "length"
        assert all(chunk["choices"][0]["finish_reason"] is None for chunk in body[:-1])

    serve(tokenizer, test)


def test_stream_without_include_usage_has_no_usage_field(tokenizer):
    async def test(client, served):
        chunks = events(await client.post(COMPLETIONS, json={"prompt": "hi", "max_tokens": 3, "stream": True}))
        assert chunks[-1] == "[DONE]" and all("usage" not in chunk for chunk in chunks[:-1])
        assert all(chunk["object"] == "text_completion" for chunk in chunks[:-1])

    serve(tokenizer, test)


def test_n_choices_get_consecutive_seeds_and_usage_counts_the_prompt_once(tokenizer):
    async def test(client, served):
        body = (await client.post(COMPLETIONS, json={"prompt": "hi", "max_tokens": 3, "n": 3, "seed": 40})).json()
        assert sorted(served.executor.seeds.values()) == [40, 41, 42]
        texts = [choice["text"] for choice in sorted(body["choices"], key=lambda c: c["index"])]
        assert texts == [tokenizer.decode([50 + i, 51 + i, 52 + i]) for i in range(3)]
        prompt_tokens = len(tokenizer.encode("hi"))
        assert body["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 9,
                                 "total_tokens": prompt_tokens + 9, "prompt_tokens_details": {"cached_tokens": 0}}
        served.executor.seeds.clear()
        await client.post(COMPLETIONS, json={"prompt": "hi", "max_tokens": 2, "n": 2})
        assert list(served.executor.seeds.values()) == [None, None]

    serve(tokenizer, test)


def test_n_choices_stream_each_index_to_its_finish(tokenizer):
    async def test(client, served):
        request = {"messages": MESSAGES, "max_tokens": 3, "n": 2, "seed": 0, "stream": True}
        chunks = events(await client.post(CHAT, json=request))[:-1]
        assert [c["index"] for c in chunks[0]["choices"]] == [0, 1]  # the role chunk names every choice
        finishes = [c["choices"][0]["index"] for c in chunks[1:] if c["choices"][0]["finish_reason"] == "length"]
        assert sorted(finishes) == [0, 1]

    serve(tokenizer, test)


def test_prompt_forms_of_completions(tokenizer):
    async def test(client, served):
        for prompt, count in (([5, 6, 7], 1), ([[5, 6], [7, 8, 9]], 2), (["a", "b"], 2)):
            body = (await client.post(COMPLETIONS, json={"prompt": prompt, "max_tokens": 2})).json()
            assert len(body["choices"]) == count, body
        body = (await client.post(COMPLETIONS, json={"prompt": [[5, 6], [7, 8, 9]], "max_tokens": 2})).json()
        assert body["usage"]["prompt_tokens"] == 5

    serve(tokenizer, test)


def test_stop_string_ends_with_stop_and_is_not_included(tokenizer):
    async def test(client, served):
        full = tokenizer.decode(list(range(10, 20)))
        stop = full[4:6]
        body = (await client.post(COMPLETIONS, json={"prompt": "hi", "max_tokens": 10, "stop": stop})).json()
        (choice,) = body["choices"]
        assert choice["finish_reason"] == "stop" and choice["text"] == full[:4]

    serve(tokenizer, test)


def test_chat_logprobs_one_entry_per_token_with_top_alternatives(tokenizer):
    async def test(client, served):
        request = {"messages": MESSAGES, "max_tokens": 4, "logprobs": True, "top_logprobs": 2}
        body = (await client.post(CHAT, json=request)).json()
        content = body["choices"][0]["logprobs"]["content"]
        assert len(content) == body["usage"]["completion_tokens"] == 4
        for offset, entry in enumerate(content):
            assert entry["token"] == tokenizer.decode([10 + offset]) and entry["logprob"] == -0.5
            assert entry["bytes"] == list(entry["token"].encode())
            assert [alt["logprob"] for alt in entry["top_logprobs"]] == [-0.5, -1.5]
        plain = (await client.post(CHAT, json={**request, "top_logprobs": None})).json()
        assert all(entry["top_logprobs"] == [] for entry in plain["choices"][0]["logprobs"]["content"])

    serve(tokenizer, test)


def test_completion_logprobs_in_the_legacy_shape(tokenizer):
    async def test(client, served):
        body = (await client.post(COMPLETIONS, json={"prompt": "hi", "max_tokens": 3, "logprobs": 2})).json()
        logprobs = body["choices"][0]["logprobs"]
        assert logprobs["tokens"] == [tokenizer.decode([token]) for token in (10, 11, 12)]
        assert logprobs["token_logprobs"] == [-0.5] * 3 and all(len(top) <= 2 for top in logprobs["top_logprobs"])
        assert logprobs["text_offset"] == [0, len(logprobs["tokens"][0]), len("".join(logprobs["tokens"][:2]))]
        stream = events(await client.post(COMPLETIONS, json={"prompt": "hi", "max_tokens": 3, "logprobs": 0,
                                                             "stream": True}))
        tokens = [token for chunk in stream[:-1] for token in chunk["choices"][0]["logprobs"]["tokens"]]
        assert tokens == logprobs["tokens"]

    serve(tokenizer, test)


BAD = [
    (CHAT, {"messages": MESSAGES, "temperature": "hot"}, "temperature"),
    (CHAT, {"messages": MESSAGES, "temperature": -1}, "temperature"),
    (CHAT, {"messages": MESSAGES, "top_p": 0}, "top_p"),
    (CHAT, {"messages": MESSAGES, "max_tokens": 0}, "max_tokens"),
    (CHAT, {"messages": MESSAGES, "max_completion_tokens": 10_000}, "max_completion_tokens"),
    (CHAT, {"messages": MESSAGES, "n": 0}, "n"),
    (CHAT, {"messages": MESSAGES, "n": 1.5}, "n"),
    (CHAT, {"messages": MESSAGES, "top_logprobs": 2}, "top_logprobs"),
    (CHAT, {"messages": MESSAGES, "logprobs": True, "top_logprobs": 50}, "top_logprobs"),
    (CHAT, {"messages": MESSAGES, "stream_options": {"include_usage": True}}, "stream_options"),
    (CHAT, {"messages": MESSAGES, "presence_penalty": 3}, "presence_penalty"),
    (CHAT, {"messages": MESSAGES, "stop": 5}, "stop"),
    (CHAT, {"messages": MESSAGES, "tools": [{"type": "function"}]}, "tools[0].function"),
    (CHAT, {"messages": MESSAGES, "logit_bias": {"five": 10}}, "logit_bias"),
    (CHAT, {"messages": MESSAGES, "logit_bias": {"5": "ten"}}, "logit_bias"),
    (CHAT, {"messages": MESSAGES, "logit_bias": {"5": True}}, "logit_bias"),
    (CHAT, {"messages": MESSAGES, "logit_bias": {"-5": 1}}, "logit_bias"),
    (CHAT, {"messages": MESSAGES, "logit_bias": {"5": -100.5}}, "logit_bias"),
    (COMPLETIONS, {"prompt": "hi", "logit_bias": {"100000": 1}}, "logit_bias"),
    (COMPLETIONS, {"prompt": "hi", "logit_bias": {"99999999999": 1}}, "logit_bias"),
    (CHAT, {"messages": []}, "messages"),
    (CHAT, {"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
    (CHAT, {"messages": [{"content": "hi"}]}, "messages[0].role"),
    (CHAT, {}, "messages"),
    (CHAT, {"messages": [{"role": "user", "content": "x " * 400}]}, "messages"),
    (COMPLETIONS, {"prompt": ""}, "prompt"),
    (COMPLETIONS, {"prompt": []}, "prompt"),
    (COMPLETIONS, {"prompt": [5, 400]}, "prompt"),
    (COMPLETIONS, {"prompt": "hi", "logprobs": 50}, "logprobs"),
    (COMPLETIONS, {"prompt": "hi", "logprobs": True}, "logprobs"),
    (COMPLETIONS, {"prompt": "hi", "echo": True, "max_tokens": 0}, "max_tokens"),
    (COMPLETIONS, {"prompt": "hi", "prompt_logprobs": 21}, "prompt_logprobs"),
    (CHAT, {"messages": MESSAGES, "prompt_logprobs": -1}, "prompt_logprobs"),
    (CHAT, {"messages": MESSAGES, "prompt_logprobs": True}, "prompt_logprobs"),
    (COMPLETIONS, {"prompt": "hi", "prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    (CHAT, {"messages": MESSAGES, "prompt_logprobs": 0, "stream": True}, "prompt_logprobs"),
    (COMPLETIONS, {"prompt": "hi", "stop_token_ids": [100_000]}, "stop_token_ids[0]"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 4, "min_tokens": 5}, "min_tokens"),
    (COMPLETIONS, {"prompt": "hi", "seed": 2**70}, "seed"),
    (COMPLETIONS, {"prompt": [5, 2**40]}, "prompt"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 2**40}, "max_tokens"),
    (CHAT, {"messages": MESSAGES, "stop_token_ids": [2**33]}, "stop_token_ids[0]"),
    (CHAT, {"messages": MESSAGES, "max_token": 5}, "max_token"),
    (COMPLETIONS, {"prompt": "hi", "guided_decoding_backend": "xgrammar"}, "guided_decoding_backend"),
    (CHAT, {"messages": MESSAGES, "mirostat": 2}, "mirostat"),
    # structured output: shapes refused here, formats refused by the gRPC checks (named as the request set them)
    (CHAT, {"messages": MESSAGES, "guided_regex": "("}, "guided_regex"),
    (COMPLETIONS, {"prompt": "hi", "guided_grammar": "start: missing_rule"}, "guided_grammar"),
    (COMPLETIONS, {"prompt": "hi", "guided_json": "{not json"}, "guided_json"),
    (CHAT, {"messages": MESSAGES, "guided_choice": ["yes", ""]}, "guided_choice[1]"),
    (CHAT, {"messages": MESSAGES, "guided_choice": "yes"}, "guided_choice"),
    (CHAT, {"messages": MESSAGES, "guided_json": {"type": "object"}, "guided_regex": "a+"}, "guided_regex"),
    (COMPLETIONS, {"prompt": "hi", "response_format": {"type": "json_object"}, "guided_choice": ["a"]},
     "guided_choice"),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "json_schema", "json_schema": {
        "name": "n", "schema": {"type": "object", "properties": {"a": {"type": "integer", "minimum": "x"}}}}}},
     "response_format.json_schema.schema"),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "json_schema", "json_schema": {"name": "n"}}},
     "response_format.json_schema.schema"),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    (COMPLETIONS, {"prompt": "hi", "response_format": {"type": "xml"}}, "response_format.type"),
    (CHAT, {"messages": MESSAGES, "response_format": "json"}, "response_format"),
    (CHAT, {"messages": [{"role": "user", "content": "hi", "cache_control": {"type": "ephemeral"}}]},
     "messages[0].cache_control"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "detail": "high"}]}]},
     "messages[0].content[0].detail"),
    (CHAT, {"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True, "chunk_size": 4}},
     "stream_options.chunk_size"),
    (CHAT, {"messages": MESSAGES, "tool_choice": "required"}, "tool_choice"),
    (CHAT, {"messages": [{"role": "assistant", "tool_calls": [{"id": "c1"}]}, *MESSAGES]},
     "messages[0].tool_calls[0].type"),
    (CHAT, {"messages": MESSAGES, "store": True}, "store"),
    (COMPLETIONS, {"prompt": "hi", "store": True}, "store"),
    (CHAT, {"messages": MESSAGES, "priority": 1}, "priority"),  # this server schedules first come, first served
    (COMPLETIONS, {"prompt": "hi", "priority": 2**31}, "priority"),
    # vLLM's token restrictions and prompt truncation (the gRPC checks, named as the request set them)
    (COMPLETIONS, {"prompt": "hi", "allowed_token_ids": [5, 100_000]}, "allowed_token_ids[1]"),
    (CHAT, {"messages": MESSAGES, "allowed_token_ids": [5, "6"]}, "allowed_token_ids[1]"),
    (CHAT, {"messages": MESSAGES, "allowed_token_ids": [5], "guided_regex": "a+"}, "allowed_token_ids"),
    (CHAT, {"messages": MESSAGES, "bad_words": ["fine", " "]}, "bad_words[1]"),
    (COMPLETIONS, {"prompt": "hi", "bad_words": ["x"] * 129}, "bad_words"),
    (COMPLETIONS, {"prompt": "hi", "bad_words": "x"}, "bad_words"),
    (COMPLETIONS, {"prompt": "hi", "truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
    (CHAT, {"messages": MESSAGES, "truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
    (CHAT, {"messages": MESSAGES, "truncate_prompt_tokens": 2**31}, "truncate_prompt_tokens"),
]


@pytest.mark.parametrize("route, body, param", BAD, ids=[f"{p}-{i}" for i, (_, _, p) in enumerate(BAD)])
def test_bad_requests_are_400_naming_the_parameter(tokenizer, route, body, param):
    async def test(client, served):
        response = await client.post(route, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param and error["type"] == "invalid_request_error"
        assert error["message"].startswith(f"{param}: "), error["message"]
        assert set(error) == {"message", "type", "param", "code"}
        still = await client.post(route, json={**({"messages": MESSAGES} if route == CHAT else {"prompt": "hi"}),
                                               "max_tokens": 2})
        assert still.status_code == 200

    serve(tokenizer, test)


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def test_each_structured_output_parameter_reaches_the_executor(tokenizer):
    cases = [
        (CHAT, {"response_format": {"type": "json_object"}}, "json_object", True),
        (COMPLETIONS, {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA,
                                                                                  "strict": True}}},
         "json_schema", json.dumps(SCHEMA)),
        (CHAT, {"guided_json": SCHEMA}, "json_schema", json.dumps(SCHEMA)),
        (COMPLETIONS, {"guided_regex": "[a-z]+"}, "regex", "[a-z]+"),
        (CHAT, {"guided_choice": ["yes", "no"]}, "choice", ["yes", "no"]),
        (COMPLETIONS, {"guided_grammar": 'start: "a"+'}, "grammar", 'start: "a"+'),
        (CHAT, {"response_format": {"type": "text"}}, None, None),
    ]

    async def test(client, served):
        for route, fields, kind, value in cases:
            served.executor.formats.clear()
            body = {**({"messages": MESSAGES} if route == CHAT else {"prompt": "hi"}), "max_tokens": 2, "n": 2,
                    **fields}
            response = await client.post(route, json=body)
            assert response.status_code == 200, response.text
            formats = list(served.executor.formats.values())
            assert len(formats) == 2 and formats[0] == formats[1]
            assert formats[0].WhichOneof("kind") == kind, fields
            if kind is not None:
                got = list(formats[0].choice.choices) if kind == "choice" else getattr(formats[0], kind)
                assert got == value

    serve(tokenizer, test)


def test_token_restrictions_and_prompt_truncation_reach_the_executor(tokenizer):
    long_text = "x " * 400  # more tokens than the model's context: refused unless truncated
    fields = {"allowed_token_ids": [10, 11, 12], "bad_words": ["hello"], "truncate_prompt_tokens": 5,
              "max_tokens": 2, "n": 2}

    async def test(client, served):
        for route, prompt in ((CHAT, {"messages": [{"role": "user", "content": long_text}]}),
                              (COMPLETIONS, {"prompt": long_text}), (COMPLETIONS, {"prompt": [7] * 300})):
            assert (await client.post(route, json={**prompt, "max_tokens": 2})).status_code == 400
            served.executor.samplings.clear()
            response = await client.post(route, json={**prompt, **fields})
            assert response.status_code == 200, response.text
            assert response.json()["usage"]["prompt_tokens"] == 5  # the tokens kept
            samplings = list(served.executor.samplings.values())
            assert len(samplings) == 2
            for sampling in samplings:
                assert list(sampling.allowed_token_ids) == [10, 11, 12] and list(sampling.bad_words) == ["hello"]
            assert all(len(served.executor.prompts[request_id]) == 5 for request_id in served.executor.samplings)
        whole = await client.post(COMPLETIONS, json={"prompt": long_text, "truncate_prompt_tokens": -1,
                                                     "max_tokens": 1})
        assert whole.status_code == 200 and whole.json()["usage"]["prompt_tokens"] == MAX_MODEL_LEN - 1

    serve(tokenizer, test)


def test_a_body_over_the_limit_is_refused_unread(tokenizer):
    async def test(client, served):
        big = {"prompt": "x" * 2000}
        for path in (COMPLETIONS, "/tokenize"):
            response = await client.post(path, json=big)
            assert response.status_code == 400, path
            assert "larger than 1000 bytes (the server's --max-request-bytes)" in response.json()["error"]["message"]
        assert (await client.post(COMPLETIONS, json={"prompt": "hello " * 50, "max_tokens": 1})).status_code == 200

    serve(tokenizer, test, max_body_bytes=1000)


def test_unknown_fields_are_accepted_only_at_a_neutral_value(tokenizer):
    """What a client gets back when it appends a reply's message to the next request (the openai SDK's
    message object dumped: its empty extras) and OpenAI's no-op fields are served; an unknown field that asks
    for something is refused (the BAD cases above)."""
    async def test(client, served):
        echoed = {"role": "assistant", "content": "hi", "refusal": None, "annotations": [], "audio": None,
                  "function_call": None, "tool_calls": []}
        body = {"messages": [*MESSAGES, echoed, *MESSAGES], "max_tokens": 2, "frobnicate": None, "store": False,
                "user": "u1", "metadata": {"team": "a"}, "parallel_tool_calls": True, "tool_choice": "none",
                "logit_bias": {}, "guided_choice": []}
        response = await client.post(CHAT, json=body)
        assert response.status_code == 200, response.text
        tool_reply = {"role": "tool", "content": "42", "tool_call_id": "c1"}
        response = await client.post(CHAT, json={"messages": [*MESSAGES, tool_reply], "max_tokens": 2})
        assert response.status_code == 200, response.text
        response = await client.post(COMPLETIONS, json={"prompt": "hi", "max_tokens": 2, "echo": False, "x": ""})
        assert response.status_code == 200, response.text

    serve(tokenizer, test)


def test_malformed_json_and_unknown_model(tokenizer):
    async def test(client, served):
        response = await client.post(CHAT, content=b"{not json", headers={"content-type": "application/json"})
        assert response.status_code == 400 and "JSON" in response.json()["error"]["message"]
        response = await client.post(COMPLETIONS, content=b"[1, 2]")
        assert response.status_code == 400
        response = await client.post(CHAT, json={"model": "gpt-9", "messages": MESSAGES})
        assert response.status_code == 404
        assert response.json()["error"] | {"message": ""} == {
            "message": "", "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
        assert (await client.get("/v1/models/gpt-9")).status_code == 404
        assert (await client.get(f"/v1/models/{MODEL}")).json()["id"] == MODEL
        response = await client.get("/v1/nothing-here")
        assert response.status_code == 404 and "error" in response.json()
        assert (await client.get(CHAT)).status_code == 405

    serve(tokenizer, test)


def test_unreachable_executor_is_503_streaming_or_not(tokenizer):
    async def test(client, served):
        for body in ({"messages": MESSAGES, "max_tokens": 2}, {"messages": MESSAGES, "max_tokens": 2, "stream": True}):
            response = await client.post(CHAT, json=body)
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["type"] == "server_error" and "executor" in error["message"]

    serve(tokenizer, test, executor=FakeExecutor(fail=True))


def test_api_keys_guard_v1_but_not_health(tokenizer):
    async def test(client, served):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "secret-1"}):
            for method, path, body in (("POST", CHAT, {"messages": MESSAGES}), ("GET", "/v1/models", None)):
                response = await client.request(method, path, json=body, headers=headers)
                assert response.status_code == 401, (headers, path)
                error = response.json()["error"]
                assert error["code"] == "invalid_api_key" and "secret" not in error["message"]
                assert response.headers["www-authenticate"] == "Bearer"
        for key in ("secret-1", "secret-2"):
            response = await client.post(CHAT, json={"messages": MESSAGES, "max_tokens": 2},
                                         headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == 200
        assert (await client.get("/health")).status_code == 200

    serve(tokenizer, test, api_keys=("secret-1", "secret-2"))


def test_health_follows_readiness_and_metrics_follow_the_switch(tokenizer):
    async def test(client, served):
        assert (await client.get("/health")).json() == {"status": "SERVING"}
        assert (await client.get("/version")).json() == {"version": version("stepahead")}
        served.ready = False
        response = await client.get("/health")
        assert response.status_code == 503 and response.json() == {"status": "NOT_SERVING"}
        await client.post(CHAT, json={"messages": MESSAGES, "max_tokens": 2})
        await client.post(CHAT, json={"messages": MESSAGES, "n": 0})
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200
        text = metrics.text
        assert 'stepahead_scheduler_http_requests_total{route="/v1/chat/completions",status="200"} 1.0' in text
        assert 'stepahead_scheduler_http_requests_total{route="/v1/chat/completions",status="400"} 1.0' in text
        assert 'stepahead_scheduler_requests_finished_total{finish_reason="length"} 1.0' in text

    serve(tokenizer, test, metrics_on=True)


def test_metrics_are_404_when_off(tokenizer):
    async def test(client, served):
        assert (await client.get("/metrics")).status_code == 404

    serve(tokenizer, test)


def test_eos_id_used_by_the_fake_is_the_limits_eos():
    assert EOS == 2
