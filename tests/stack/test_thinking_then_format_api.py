"""A structured output format waits for the thinking, through real processes: with --reasoning-parser deepseek_r1
the model thinks freely, and only its answer after ``</think>`` is held to the format (SDK and OpenAI's
response_format alike); ``split_reasoning: false`` holds the whole output to it, as before. A thinking budget shorter
than the thinking forces ``</think>`` after it, the answer then HF's greedy continuation (SDK, OpenAI's chat with
vLLM's thinking_token_budget, Anthropic's Messages with budget_tokens).

The tiny random model writes ``</think>`` as its third greedy token because the test relabels it: the token it
writes there and ``</think>`` swap their embedding and LM head rows, a renaming that changes nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import openai
import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_models import make_tiny_llama
from tiny_tokenizers import build_thinking

from client import Client
from scheduler_svc.tokenizer import Tokenizer

pytestmark = pytest.mark.stack

MESSAGES = [{"role": "user", "content": "Is 91 prime?"}]
SCHEMA = {"type": "object", "properties": {"prime": {"type": "boolean"}}, "required": ["prime"],
          "additionalProperties": False}
THOUGHT_TOKENS = 2
"""Greedy tokens the relabelled model thinks before it writes ``</think>``."""


def swap_tokens(model_dir: Path, a: int, b: int) -> None:
    """Rename token ``a`` as ``b`` and back in the checkpoint's embedding and LM head."""
    path = model_dir / "model.safetensors"
    weights = load_file(path)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        weights[name][[a, b]] = weights[name][[b, a]].clone()
    save_file(weights, path, metadata={"format": "pt"})


def hf_greedy(model_dir: Path, prompt: list[int], count: int) -> list[int]:
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=count, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[Path, list[int]]:
    """The relabelled checkpoint and its free greedy output's first tokens (``</think>`` third)."""
    model_dir = build_thinking(tmp_path_factory.mktemp("thinker"), markers=True)
    tokenizer = Tokenizer.from_dir(model_dir)
    make_tiny_llama(model_dir, seed=3, vocab_size=tokenizer.vocab_size)
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
    (end,) = tokenizer.encode("</think>", add_special_tokens=False)
    free = hf_greedy(model_dir, prompt, THOUGHT_TOKENS + 1)
    assert end not in free and free[THOUGHT_TOKENS] not in prompt, "pick another seed"
    swap_tokens(model_dir, free[THOUGHT_TOKENS], end)
    relabelled = hf_greedy(model_dir, prompt, THOUGHT_TOKENS + 1)
    assert relabelled == [*free[:THOUGHT_TOKENS], end]
    return model_dir, relabelled


@pytest.fixture(scope="module")
def stack(model, launch_module_stack):
    return launch_module_stack(model[0], [], ["--reasoning-parser", "deepseek_r1", "--http-port", "0"])


def test_the_model_thinks_freely_then_answers_in_the_format(model, stack):
    model_dir, thought = model
    thinking = Tokenizer.from_dir(model_dir).decode(thought[:THOUGHT_TOKENS], skip_special_tokens=False)
    with Client(stack.address) as client:
        assert client.model_info().format_after_thinking
        result = client.generate(messages=MESSAGES, json_schema=SCHEMA, temperature=0.0, max_tokens=40)
        assert list(result.token_ids[:THOUGHT_TOKENS + 1]) == thought
        assert result.reasoning == thinking and result.finish_reason == "stop", result
        jsonschema.validate(json.loads(result.text), SCHEMA)
        whole = client.generate(messages=MESSAGES, json_schema=SCHEMA, temperature=0.0, max_tokens=40,
                                split_reasoning=False)
    assert whole.reasoning is None and list(whole.token_ids[:THOUGHT_TOKENS + 1]) != thought
    jsonschema.validate(json.loads(whole.text), SCHEMA)


def test_openai_response_format_holds_the_answer_after_the_thinking(model, stack):
    model_dir, thought = model
    thinking = Tokenizer.from_dir(model_dir).decode(thought[:THOUGHT_TOKENS], skip_special_tokens=False)
    with Client(stack.address) as grpc_client:
        served = grpc_client.model_info().model
    client = openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused")
    response_format = {"type": "json_schema", "json_schema": {"name": "prime", "schema": SCHEMA}}
    reply = client.chat.completions.create(model=served, messages=MESSAGES, max_tokens=40, temperature=0,
                                           response_format=response_format)
    message = reply.choices[0].message
    assert message.model_extra["reasoning_content"] == thinking
    jsonschema.validate(json.loads(message.content), SCHEMA)



def budget_cut(model_dir: Path, budget: int, count: int) -> tuple[list[int], str]:
    """The greedy output with the thinking cut after ``budget`` tokens: its first ``count`` tokens (``</think>``
    forced, then HF's greedy continuation of the prompt and what was written), and the thinking's text."""
    tokenizer = Tokenizer.from_dir(model_dir)
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
    (end,) = tokenizer.encode("</think>", add_special_tokens=False)
    thought = hf_greedy(model_dir, prompt, budget) if budget else []
    written = [*thought, end]
    return written + hf_greedy(model_dir, prompt + written, count - len(written)), tokenizer.decode(thought)


@pytest.mark.parametrize("budget", [0, 1])
def test_a_thinking_budget_forces_the_end_of_the_thinking(model, stack, budget):
    model_dir, thought = model
    expected, thinking = budget_cut(model_dir, budget, 12)
    with Client(stack.address) as client:
        result = client.generate(messages=MESSAGES, temperature=0.0, max_tokens=12, thinking_token_budget=budget,
                                 ignore_eos=True)
    assert list(result.token_ids) == expected and expected[:THOUGHT_TOKENS + 1] != thought
    assert (result.reasoning or "") == thinking


def test_openai_and_anthropic_clients_send_budgets(model, stack):
    model_dir, _ = model
    expected, thinking = budget_cut(model_dir, 1, 12)
    answer = Tokenizer.from_dir(model_dir).decode(expected[2:])
    with Client(stack.address) as grpc_client:
        served = grpc_client.model_info().model
    chat = openai.OpenAI(base_url=f"{stack.http_url}/v1", api_key="unused").chat.completions.create(
        model=served, messages=MESSAGES, max_tokens=12, temperature=0,
        extra_body={"thinking_token_budget": 1, "ignore_eos": True})
    message = chat.choices[0].message
    assert (message.model_extra["reasoning_content"], message.content) == (thinking, answer)
    import anthropic

    reply = anthropic.Anthropic(base_url=stack.http_url, api_key="unused").messages.create(
        model=served, messages=MESSAGES, max_tokens=12, thinking={"type": "enabled", "budget_tokens": 1},
        extra_body={"temperature": 0})
    blocks = [(block.type, getattr(block, "thinking", None) or getattr(block, "text", None)) for block in reply.content]
    assert blocks[0] == ("thinking", thinking) and blocks[1][0] == "text"
    assert answer.startswith(blocks[1][1])  # it may stop at EOS before max_tokens
