"""Prompt logprobs over HTTP: vLLM's ``prompt_logprobs`` on both endpoints, and a completion's ``echo`` (the prompt
before the text, its tokens' logprobs before the output's), as lm-evaluation-harness scores a continuation."""

from __future__ import annotations

from typing import Any

import pytest
from http_helpers import PROMPT_TOP_LOGPROB, UNLIKELY_PROMPT_LOGPROB, events, serve
from tiny_tokenizers import build_byte_level

from scheduler_svc.tokenizer import Tokenizer

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
PROMPT = "hello world"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_dir(build_byte_level(tmp_path_factory.mktemp("tok")))


def text(tokenizer: Tokenizer, token_id: int) -> str:
    return tokenizer.decode([token_id], skip_special_tokens=False)


def own_logprob(position: int) -> float:
    """The fake executor's logprob of the prompt token at ``position``: the most likely at even positions."""
    return PROMPT_TOP_LOGPROB if position % 2 == 0 else UNLIKELY_PROMPT_LOGPROB


def alternatives(token: int, position: int, count: int) -> list[tuple[int, float]]:
    """The fake executor's first ``count`` alternatives at a prompt position, most likely first."""
    ids = ([token] if position % 2 == 0 else []) + [(token + offset) % 300 for offset in range(1, count + 1)]
    return [(token_id, PROMPT_TOP_LOGPROB - rank) for rank, token_id in enumerate(ids[:count])]


def vllm_entry(tokenizer: Tokenizer, prompt: list[int], position: int, count: int, sent: int) -> dict[str, Any]:
    """vLLM's prompt_logprobs entry at ``position`` with ``count`` alternatives, the server having sent ``sent``: the
    prompt's token first (rank 1 where the most likely, else one more than the alternatives sent), then the rest."""
    token = prompt[position]
    rank = 1 if position % 2 == 0 else sent + 1
    entry = {str(token): {"logprob": own_logprob(position), "rank": rank, "decoded_token": text(tokenizer, token)}}
    for index, (token_id, logprob) in enumerate(alternatives(token, position, count)):
        entry.setdefault(str(token_id), {"logprob": logprob, "rank": index + 1,
                                         "decoded_token": text(tokenizer, token_id)})
    return entry


def test_completion_prompt_logprobs_in_vllms_shape(tokenizer):
    prompt = tokenizer.encode(PROMPT)
    assert len(prompt) >= 4  # positions of both kinds

    async def test(client, served):
        body = (await client.post(COMPLETIONS, json={"prompt": PROMPT, "max_tokens": 2, "prompt_logprobs": 2})).json()
        (choice,) = body["choices"]
        assert choice["prompt_logprobs"] == [None, *(vllm_entry(tokenizer, prompt, p, 2, 2)
                                                     for p in range(1, len(prompt)))]
        assert list(choice["prompt_logprobs"][1]) == [str(prompt[1]), str((prompt[1] + 1) % 300),
                                                      str((prompt[1] + 2) % 300)]  # the prompt's own token first
        assert choice["prompt_logprobs"][2][str(prompt[2])]["rank"] == 1
        assert choice["text"] == tokenizer.decode([10, 11]) and choice["logprobs"] is None
        assert body["usage"]["prompt_tokens"] == len(prompt)
        plain = (await client.post(COMPLETIONS, json={"prompt": PROMPT, "max_tokens": 2})).json()
        assert "prompt_logprobs" not in plain["choices"][0]
        assert list(served.executor.prompt_logprobs_asked.values()) == [2, None]

    serve(tokenizer, test)


def test_prompt_logprobs_of_several_prompts_and_samples(tokenizer):
    prompts = ["hello world", "the lazy dog"]

    async def test(client, served):
        body = (await client.post(COMPLETIONS, json={"prompt": prompts, "n": 2, "max_tokens": 1,
                                                     "prompt_logprobs": 0, "seed": 1})).json()
        for choice in body["choices"]:
            ids = tokenizer.encode(prompts[choice["index"] // 2])
            assert choice["prompt_logprobs"] == [None, *(vllm_entry(tokenizer, ids, p, 0, 0)
                                                         for p in range(1, len(ids)))]

    serve(tokenizer, test)


def test_chat_prompt_logprobs_are_on_the_response(tokenizer):
    messages = [{"role": "user", "content": PROMPT}]
    prompt = tokenizer.apply_chat_template(messages)

    async def test(client, served):
        request = {"messages": messages, "max_tokens": 1, "prompt_logprobs": 1, "logprobs": True, "n": 2}
        body = (await client.post(CHAT, json=request)).json()
        assert body["prompt_logprobs"] == [None, *(vllm_entry(tokenizer, prompt, p, 1, 1)
                                                   for p in range(1, len(prompt)))]
        assert all("prompt_logprobs" not in choice for choice in body["choices"])
        assert [len(choice["logprobs"]["content"]) for choice in body["choices"]] == [1, 1]
        assert "prompt_logprobs" not in (await client.post(CHAT, json={"messages": messages, "max_tokens": 1})).json()

    serve(tokenizer, test)


def test_echo_puts_the_prompt_before_the_text(tokenizer):
    ids = tokenizer.encode(PROMPT)

    async def test(client, served):
        output = tokenizer.decode([10, 11])
        body = (await client.post(COMPLETIONS, json={"prompt": [PROMPT, "hi"], "max_tokens": 2, "echo": True})).json()
        assert [choice["text"] for choice in body["choices"]] == [PROMPT + output, "hi" + output]
        assert all(choice["logprobs"] is None for choice in body["choices"])
        by_ids = (await client.post(COMPLETIONS, json={"prompt": ids, "max_tokens": 2, "echo": True})).json()
        assert by_ids["choices"][0]["text"] == tokenizer.decode(ids, skip_special_tokens=False) + output
        special = [1, *ids]  # a special token in a token-id prompt is echoed as its text
        kept = (await client.post(COMPLETIONS, json={"prompt": special, "max_tokens": 1, "echo": True})).json()
        assert kept["choices"][0]["text"] == text(tokenizer, 1) + PROMPT + text(tokenizer, 10)
        assert set(served.executor.prompt_logprobs_asked.values()) == {None}  # echo alone scores no prompt
        assert body["usage"]["completion_tokens"] == 4

    serve(tokenizer, test)


def test_lm_eval_loglikelihood_request(tokenizer):
    """lm-evaluation-harness's local-completions scoring: one greedy token after the context and continuation,
    the answer read from the echoed prompt's logprobs."""
    context, continuation = "The capital of France", " is Paris"
    ids = tokenizer.encode(context + continuation)
    ctxlen = len(tokenizer.encode(context))
    assert tokenizer.encode(context) == ids[:ctxlen] and len(ids) - ctxlen >= 2

    async def test(client, served):
        request = {"prompt": context + continuation, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
        response = await client.post(COMPLETIONS, json=request)
        assert response.status_code == 200, response.text
        (choice,) = response.json()["choices"]
        assert choice["text"] == context + continuation + text(tokenizer, 10)
        assert "prompt_logprobs" not in choice
        logprobs = choice["logprobs"]
        tokens = [text(tokenizer, token) for token in [*ids, 10]]
        assert logprobs["tokens"] == tokens
        assert logprobs["token_logprobs"] == [None, *(own_logprob(p) for p in range(1, len(ids))), -0.5]
        assert logprobs["top_logprobs"][0] is None
        assert logprobs["top_logprobs"][1:len(ids)] == [
            {text(tokenizer, token_id): logprob for token_id, logprob in alternatives(ids[p], p, 1)}
            for p in range(1, len(ids))]
        assert len(logprobs["top_logprobs"][-1]) == 1
        assert logprobs["text_offset"] == [len("".join(tokens[:i])) for i in range(len(tokens))]
        # what lm-eval reads: the continuation's summed logprob, and whether greedy decoding would produce it
        continuation_logprobs = logprobs["token_logprobs"][ctxlen:-1]
        assert sum(continuation_logprobs) == sum(own_logprob(p) for p in range(ctxlen, len(ids)))
        is_greedy = all(lp == max(top.values()) for lp, top in zip(continuation_logprobs,
                                                                    logprobs["top_logprobs"][ctxlen:-1]))
        assert not is_greedy  # the fake makes odd positions unlikely
        (asked,) = served.executor.prompt_logprobs_asked.values()
        assert asked == 1

    serve(tokenizer, test)


def test_echo_streams_the_prompt_in_the_first_chunk(tokenizer):
    async def test(client, served):
        request = {"prompt": PROMPT, "max_tokens": 3, "echo": True, "logprobs": 2}
        whole = (await client.post(COMPLETIONS, json=request)).json()["choices"][0]
        chunks = [chunk for chunk in events(await client.post(COMPLETIONS, json={**request, "stream": True}))
                  if chunk != "[DONE]"]
        first = chunks[0]["choices"][0]
        assert first["text"] == PROMPT + text(tokenizer, 10)
        assert first["logprobs"]["token_logprobs"][0] is None
        assert len(first["logprobs"]["tokens"]) == len(tokenizer.encode(PROMPT)) + 1
        assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == whole["text"]
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            streamed = [value for chunk in chunks for value in chunk["choices"][0]["logprobs"][key]]
            assert streamed == whole["logprobs"][key], key
        plain = [chunk for chunk in events(await client.post(COMPLETIONS, json={
            "prompt": PROMPT, "max_tokens": 2, "echo": True, "stream": True})) if chunk != "[DONE]"]
        assert plain[0]["choices"][0]["text"] == PROMPT + text(tokenizer, 10)
        assert plain[0]["choices"][0]["logprobs"] is None

    serve(tokenizer, test)


def test_echo_and_prompt_logprobs_keep_their_own_counts(tokenizer):
    prompt = tokenizer.encode(PROMPT)

    async def test(client, served):
        for logprobs, prompt_logprobs in ((1, 3), (3, 1)):
            request = {"prompt": PROMPT, "max_tokens": 1, "echo": True, "logprobs": logprobs,
                       "prompt_logprobs": prompt_logprobs}
            (choice,) = (await client.post(COMPLETIONS, json=request)).json()["choices"]
            sent = max(logprobs, prompt_logprobs)  # the server is asked for the larger count
            assert choice["prompt_logprobs"][1:] == [vllm_entry(tokenizer, prompt, p, prompt_logprobs, sent)
                                                     for p in range(1, len(prompt))]
            assert [len(top) for top in choice["logprobs"]["top_logprobs"][1:]] == [logprobs] * len(prompt)
        assert list(served.executor.prompt_logprobs_asked.values()) == [3, 3]

    serve(tokenizer, test)


def test_a_truncated_prompt_is_echoed_and_scored_as_the_tokens_kept(tokenizer):
    """With truncate_prompt_tokens, echo gives the text of the prompt tokens the model read, and the echoed and
    vLLM's prompt logprobs score those tokens (the first kept one has no context); an uncut prompt is echoed as
    written."""
    ids = tokenizer.encode(PROMPT)
    kept = ids[-3:]
    kept_text = tokenizer.decode(kept, skip_special_tokens=False)
    assert len(ids) > 3 and PROMPT.endswith(kept_text) and kept_text != PROMPT

    async def test(client, served):
        request = {"prompt": PROMPT, "max_tokens": 1, "echo": True, "logprobs": 1, "prompt_logprobs": 1, "n": 2,
                   "truncate_prompt_tokens": 3}
        body = (await client.post(COMPLETIONS, json=request)).json()
        assert body["usage"]["prompt_tokens"] == 3
        for choice in body["choices"]:
            assert choice["text"] == kept_text + text(tokenizer, 10)
            logprobs = choice["logprobs"]
            assert logprobs["tokens"] == [text(tokenizer, token) for token in [*kept, 10]]
            assert logprobs["token_logprobs"][:3] == [None, own_logprob(1), own_logprob(2)]
            assert logprobs["text_offset"] == [len("".join(logprobs["tokens"][:i])) for i in range(4)]
            assert choice["prompt_logprobs"] == [None, *(vllm_entry(tokenizer, kept, p, 1, 1) for p in (1, 2))]
        streamed = [chunk for chunk in events(await client.post(COMPLETIONS, json={
            "prompt": PROMPT, "max_tokens": 1, "echo": True, "stream": True, "truncate_prompt_tokens": 3}))
            if chunk != "[DONE]"]
        assert streamed[0]["choices"][0]["text"] == kept_text + text(tokenizer, 10)
        by_ids = (await client.post(COMPLETIONS, json={"prompt": [1, *ids], "max_tokens": 1, "echo": True,
                                                       "truncate_prompt_tokens": 3})).json()
        assert by_ids["choices"][0]["text"] == kept_text + text(tokenizer, 10)
        for keep in (len(ids), 100, -1):  # nothing cut: the prompt as written
            uncut = (await client.post(COMPLETIONS, json={"prompt": PROMPT, "max_tokens": 1, "echo": True,
                                                          "truncate_prompt_tokens": keep})).json()
            assert uncut["choices"][0]["text"] == PROMPT + text(tokenizer, 10), keep
        assert kept in served.executor.prompts.values()  # the model read only these

    serve(tokenizer, test)


def test_prompt_logprobs_of_a_prompt_prefilled_in_chunks(tokenizer):
    """Two samples of a 150-token prompt overflow one step's 256-token budget: the second's prefill is split, and
    its prompt logprobs come from both chunks."""
    long_prompt = " ".join(f"w{i}" for i in range(60))
    prompt = tokenizer.encode(long_prompt)
    assert 130 < len(prompt) < 250

    async def test(client, served):
        request = {"prompt": long_prompt, "max_tokens": 1, "n": 2, "prompt_logprobs": 1}
        body = (await client.post(COMPLETIONS, json=request)).json()
        expected = [None, *(vllm_entry(tokenizer, prompt, p, 1, 1) for p in range(1, len(prompt)))]
        assert [choice["prompt_logprobs"] for choice in body["choices"]] == [expected, expected]

    serve(tokenizer, test)
