"""vLLM's response controls over HTTP: ``stream_options.continuous_usage_stats`` (every chunk carries the usage so
far), ``return_tokens_as_token_ids`` (logprobs name tokens ``"token_id:{id}"``) and chat's ``echo`` (the last
message's content before the response's, when it is the assistant's), and a 400 naming each for a bad value."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from http_helpers import FakeExecutor, events, serve
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from tiny_tokenizers import build_byte_level

from scheduler_svc.http.logprobs import TokenTexts
from scheduler_svc.tokenizer import Tokenizer

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
QUESTION = {"role": "user", "content": "Capital of France?"}
PREFILL = {"role": "assistant", "content": "The capital is"}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def check_running_usage(chunks: list[dict[str, Any]], prompt_tokens: list[int], tokens_in) -> dict[int, int]:
    """Every chunk's usage is its choice's prompt and the tokens that choice has had so far (``tokens_in``: how many
    tokens a chunk's choice carries); returns each choice's total."""
    seen: dict[int, int] = defaultdict(int)
    for chunk in chunks:
        (choice,) = chunk["choices"]
        seen[choice["index"]] += tokens_in(choice)
        assert chunk["usage"] == usage(prompt_tokens[choice["index"]], seen[choice["index"]]), chunk
    return seen


# ---- stream_options.continuous_usage_stats ----------------------------------------------------------------------
def test_chat_chunks_carry_the_usage_so_far_and_the_final_usage_is_unchanged(tokenizer):
    prompt = len(tokenizer.apply_chat_template([QUESTION]))

    async def test(client, served):
        request = {"messages": [QUESTION], "max_tokens": 10, "n": 2, "seed": 1, "logprobs": True, "stream": True,
                   "stream_options": CONTINUOUS}
        chunks = events(await client.post(CHAT, json=request))
        assert chunks[-1] == "[DONE]"
        role, body, final = chunks[0], chunks[1:-2], chunks[-2]
        for chunk in chunks[:-1]:
            ChatCompletionChunk.model_validate(chunk)
        assert [choice["index"] for choice in role["choices"]] == [0, 1] and role["usage"] == usage(prompt, 0)
        totals = check_running_usage(body, [prompt, prompt], lambda choice: len(choice["logprobs"]["content"]))
        assert totals == {0: 4, 1: 4}  # three tokens and EOS each
        assert final["choices"] == [] and final["usage"] == {**usage(prompt, 8),
                                                             "prompt_tokens_details": {"cached_tokens": 0}}

    serve(tokenizer, test, executor=FakeExecutor(eos_after=3))


def test_completion_chunks_count_their_own_prompt_and_choice(tokenizer):
    prompts = ["hi", "the quick brown fox"]
    sizes = [len(tokenizer.encode(prompt)) for prompt in prompts]
    assert sizes[0] != sizes[1]

    async def test(client, served):
        request = {"prompt": prompts, "n": 2, "max_tokens": 3, "logprobs": 0, "stream": True,
                   "stream_options": CONTINUOUS}
        chunks = events(await client.post(COMPLETIONS, json=request))
        body, final = chunks[:-2], chunks[-2]
        totals = check_running_usage(body, [sizes[0], sizes[0], sizes[1], sizes[1]],
                                     lambda choice: len(choice["logprobs"]["tokens"]))
        assert totals == {0: 3, 1: 3, 2: 3, 3: 3}
        assert final["usage"]["completion_tokens"] == 12 and final["usage"]["prompt_tokens"] == sum(sizes)

    serve(tokenizer, test)


def test_continuous_usage_alone_implies_include_usage_as_vllm_defaults_it(tokenizer):
    async def test(client, served):
        request = {"prompt": "hi", "max_tokens": 2, "stream": True, "stream_options": {"continuous_usage_stats": True}}
        chunks = events(await client.post(COMPLETIONS, json=request))
        assert [chunk["usage"]["completion_tokens"] for chunk in chunks[:-1]] == [1, 2, 2]  # the last: the total
        assert chunks[-2]["choices"] == []
        for options in ({"include_usage": True, "continuous_usage_stats": False},
                        {"include_usage": True, "continuous_usage_stats": None}):
            chunks = events(await client.post(COMPLETIONS, json={**request, "stream_options": options}))
            assert all(chunk["usage"] is None for chunk in chunks[:-2]) and chunks[-2]["usage"] is not None

    serve(tokenizer, test)


@pytest.mark.parametrize("path, base", [(CHAT, {"messages": [QUESTION]}), (COMPLETIONS, {"prompt": "hi"})])
@pytest.mark.parametrize("options, words", [
    ({"include_usage": False, "continuous_usage_stats": True}, "requires stream_options.include_usage"),
    ({"include_usage": True, "continuous_usage_stats": "yes"}, "boolean"),
    ({"include_usage": True, "continuous_usage_stats": 1}, "boolean"),
])
def test_a_bad_continuous_usage_stats_is_400_naming_it(tokenizer, path, base, options, words):
    async def test(client, served):
        response = await client.post(path, json={**base, "stream": True, "stream_options": options})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "stream_options.continuous_usage_stats" and words in error["message"], error
        assert served.executor.prompts == {}

    serve(tokenizer, test)


# ---- return_tokens_as_token_ids ---------------------------------------------------------------------------------
def by_id(token_id: int) -> str:
    return f"token_id:{token_id}"


def test_chat_logprobs_name_tokens_by_id_and_keep_their_bytes(tokenizer):
    texts = TokenTexts(tokenizer)

    async def test(client, served):
        request = {"messages": [QUESTION], "max_tokens": 3, "logprobs": True, "top_logprobs": 2}
        plain = (await client.post(CHAT, json=request)).json()
        named = (await client.post(CHAT, json={**request, "return_tokens_as_token_ids": True})).json()
        ChatCompletion.model_validate(named)
        assert named["choices"][0]["message"] == plain["choices"][0]["message"]
        content = named["choices"][0]["logprobs"]["content"]
        expected = []
        for entry, token_id in zip(plain["choices"][0]["logprobs"]["content"], [10, 11, 12]):
            assert entry["token"] == texts.get(token_id)[0]
            top = [{**alt, "token": by_id((token_id + rank) % 300)} for rank, alt in enumerate(entry["top_logprobs"])]
            expected.append({**entry, "token": by_id(token_id), "top_logprobs": top})
        assert content == expected
        assert [alt["bytes"] for alt in content[0]["top_logprobs"]] == [texts.get(10)[1], texts.get(11)[1]]

    serve(tokenizer, test)


def test_completion_logprobs_name_tokens_by_id_echoed_prompt_too(tokenizer):
    prompt = tokenizer.encode("hello world")

    async def test(client, served):
        request = {"prompt": "hello world", "max_tokens": 2, "logprobs": 1, "echo": True, "prompt_logprobs": 1}
        plain = (await client.post(COMPLETIONS, json=request)).json()["choices"][0]
        named = (await client.post(COMPLETIONS, json={**request, "return_tokens_as_token_ids": True})).json()
        (choice,) = named["choices"]
        ids = [*prompt, 10, 11]
        assert choice["logprobs"]["tokens"] == [by_id(token_id) for token_id in ids]
        assert choice["logprobs"]["top_logprobs"][0] is None  # the first prompt token: no context
        for top, plain_top in zip(choice["logprobs"]["top_logprobs"][1:], plain["logprobs"]["top_logprobs"][1:]):
            assert len(top) == 1 and list(top.values()) == list(plain_top.values())
            assert all(key.startswith("token_id:") for key in top)
        assert choice["logprobs"]["top_logprobs"][-1] == {by_id(11): -0.5}
        # the offsets are still the tokens' places in the text; prompt_logprobs keep their text (vLLM's too)
        for key in ("text", "prompt_logprobs"):
            assert choice[key] == plain[key], key
        for key in ("text_offset", "token_logprobs"):
            assert choice["logprobs"][key] == plain["logprobs"][key], key

    serve(tokenizer, test)


def test_streamed_completion_logprobs_name_tokens_by_id_at_the_texts_offsets(tokenizer):
    async def test(client, served):
        request = {"prompt": "hi", "max_tokens": 3, "logprobs": 1, "stream": True}
        plain = events(await client.post(COMPLETIONS, json=request))[:-1]
        named = events(await client.post(COMPLETIONS, json={**request, "return_tokens_as_token_ids": True}))[:-1]
        tokens = [token for chunk in named for token in chunk["choices"][0]["logprobs"]["tokens"]]
        assert tokens == [by_id(10), by_id(11), by_id(12)]
        assert ([chunk["choices"][0]["logprobs"]["text_offset"] for chunk in named]
                == [chunk["choices"][0]["logprobs"]["text_offset"] for chunk in plain])

    serve(tokenizer, test)


@pytest.mark.parametrize("path, base", [(CHAT, {"messages": [QUESTION]}), (COMPLETIONS, {"prompt": "hi"})])
def test_return_tokens_as_token_ids_must_be_a_bool_and_needs_no_logprobs(tokenizer, path, base):
    async def test(client, served):
        response = await client.post(path, json={**base, "return_tokens_as_token_ids": "true"})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "return_tokens_as_token_ids"
        for value in (True, False, None):
            accepted = await client.post(path, json={**base, "max_tokens": 1, "return_tokens_as_token_ids": value})
            assert accepted.status_code == 200, accepted.text
            assert accepted.json()["choices"][0]["logprobs"] is None

    serve(tokenizer, test)


# ---- chat echo --------------------------------------------------------------------------------------------------
def contents(body: dict[str, Any]) -> list[str]:
    return [choice["message"]["content"] for choice in sorted(body["choices"], key=lambda choice: choice["index"])]


def test_echo_puts_the_assistants_last_message_before_each_choices_content(tokenizer):
    generated = tokenizer.decode([10, 11, 12])

    async def test(client, served):
        request = {"messages": [QUESTION, PREFILL], "continue_final_message": True, "max_tokens": 3, "n": 2}
        echoed = (await client.post(CHAT, json={**request, "echo": True})).json()
        ChatCompletion.model_validate(echoed)
        assert contents(echoed) == [PREFILL["content"] + generated] * 2
        for plain in ({**request, "echo": False}, {**request, "echo": None}, request):
            assert contents((await client.post(CHAT, json=plain)).json()) == [generated] * 2
        # vLLM echoes the last message whenever its role is the response's: without continuing it too
        answered = {"messages": [QUESTION, PREFILL], "max_tokens": 3, "echo": True}
        assert contents((await client.post(CHAT, json=answered)).json()) == [PREFILL["content"] + generated]
        # a last message of another role is not echoed
        asked = {"messages": [PREFILL, QUESTION], "max_tokens": 3, "echo": True}
        assert contents((await client.post(CHAT, json=asked)).json()) == [generated]
        parts = {"role": "assistant", "content": [{"type": "text", "text": "The "}, {"type": "text", "text": "cap"}]}
        joined = {"messages": [QUESTION, parts], "max_tokens": 3, "echo": True}
        assert contents((await client.post(CHAT, json=joined)).json()) == ["The cap" + generated]

    serve(tokenizer, test)


def test_streamed_echo_is_a_chunk_per_choice_after_the_role_chunk(tokenizer):
    prompt = len(tokenizer.apply_chat_template([QUESTION, PREFILL], continue_final_message=True,
                                               add_generation_prompt=False))

    async def test(client, served):
        request = {"messages": [QUESTION, PREFILL], "continue_final_message": True, "max_tokens": 3, "n": 2,
                   "echo": True}
        whole = (await client.post(CHAT, json=request)).json()
        chunks = events(await client.post(CHAT, json={**request, "stream": True, "stream_options": CONTINUOUS}))
        for chunk in chunks[:-1]:
            ChatCompletionChunk.model_validate(chunk)
        for index, chunk in enumerate(chunks[1:3]):
            assert chunk["choices"] == [{"index": index, "delta": {"content": PREFILL["content"]}, "logprobs": None,
                                         "finish_reason": None}]
            assert chunk["usage"] == usage(prompt, 0)
        gathered = defaultdict(str)
        for chunk in chunks[1:-2]:
            (choice,) = chunk["choices"]
            gathered[choice["index"]] += choice["delta"].get("content") or ""
        assert [gathered[0], gathered[1]] == contents(whole)
        unechoed = events(await client.post(CHAT, json={**request, "stream": True, "echo": False}))
        assert unechoed[1]["choices"][0]["delta"] == {"content": tokenizer.decode([10])}

    serve(tokenizer, test)


def test_echo_with_a_named_tool_call_is_the_messages_content(tokenizer):
    arguments = '{"city": "Paris"}'
    named = {"type": "function", "function": {"name": "get_weather"}}

    async def test(client, served):
        request = {"messages": [QUESTION, {"role": "assistant", "content": "Let me check."}], "tools": TOOLS,
                   "tool_choice": named, "echo": True}
        body = (await client.post(CHAT, json=request)).json()
        ChatCompletion.model_validate(body)
        message = body["choices"][0]["message"]
        assert message["content"] == "Let me check." and message["tool_calls"][0]["function"]["arguments"] == arguments
        chunks = events(await client.post(CHAT, json={**request, "stream": True}))
        assert chunks[1]["choices"][0]["delta"] == {"content": "Let me check."}
        unechoed = (await client.post(CHAT, json={**request, "echo": False})).json()
        assert unechoed["choices"][0]["message"]["content"] is None

    serve(tokenizer, test, executor=FakeExecutor(script=tokenizer.encode(arguments, add_special_tokens=False)))


def test_a_non_bool_echo_is_400_naming_it(tokenizer):
    async def test(client, served):
        response = await client.post(CHAT, json={"messages": [QUESTION, PREFILL], "echo": "yes"})
        assert response.status_code == 400 and response.json()["error"]["param"] == "echo", response.text

    serve(tokenizer, test)


def test_without_a_generation_prompt_the_reply_has_the_last_messages_role_and_echoes_it(tokenizer):
    """vLLM's role of the reply: the assistant's when the template adds a generation prompt, else the last message's
    (the reply continues it), in the message, the first streamed delta, and for echo."""
    generated = tokenizer.decode([10, 11, 12])

    def roles(body: dict[str, Any]) -> list[str]:
        return [choice["message"]["role"] for choice in body["choices"]]

    async def test(client, served):
        asked = {"messages": [PREFILL, QUESTION], "max_tokens": 3}
        assert roles((await client.post(CHAT, json=asked)).json()) == ["assistant"]
        continued = {**asked, "add_generation_prompt": False, "echo": True}
        body = (await client.post(CHAT, json=continued)).json()  # openai's types allow only "assistant" here
        assert roles(body) == ["user"] and contents(body) == [QUESTION["content"] + generated]
        first = events(await client.post(CHAT, json={**continued, "stream": True}))[0]
        assert first["choices"][0]["delta"]["role"] == "user"
        prefilled = {"messages": [QUESTION, PREFILL], "continue_final_message": True, "max_tokens": 3}
        assert roles((await client.post(CHAT, json=prefilled)).json()) == ["assistant"]

    serve(tokenizer, test)
