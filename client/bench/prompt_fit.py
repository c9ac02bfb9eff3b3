"""Benchmark prompts that fit the served model: prompt tokens (through the chat template) + max tokens within its
context, as the server checks. A prompt that does not fit would be refused and end the run, so it is left out."""

from __future__ import annotations

import json
from pathlib import Path


def model_context_length(model_dir: str, max_model_len: int | None) -> int | None:
    """The server's limit before KV capacity, as the executor derives it (executor_svc/server.py): the model's
    max_position_embeddings, lowered by --max-model-len; None when neither is known."""
    config = Path(model_dir) / "config.json"
    positions = json.loads(config.read_text()).get("max_position_embeddings") if config.is_file() else None
    if positions is None or max_model_len is None:
        return positions if max_model_len is None else max_model_len
    return min(max_model_len, positions)


def fitting_prompts(prompts: list[str], model_dir: str, max_model_len: int | None, max_tokens: int) -> list[str]:
    """The prompts whose chat-formatted tokens plus ``max_tokens`` fit the model's context, in order; prints how
    many were left out. Raises ValueError when none fits."""
    limit = model_context_length(model_dir, max_model_len)
    if limit is None:
        return prompts
    from scheduler_svc.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_dir(model_dir)
    kept = [prompt for prompt in prompts
            if len(tokenizer.apply_chat_template([{"role": "user", "content": prompt}])) + max_tokens <= limit]
    if not kept:
        raise ValueError(f"no benchmark prompt fits the model's context of {limit} tokens with --max-tokens "
                         f"{max_tokens}")
    if len(kept) < len(prompts):
        print(f"bench: {len(prompts) - len(kept)} of {len(prompts)} prompts left out: with --max-tokens "
              f"{max_tokens} they exceed the model's context of {limit} tokens")
    return kept
