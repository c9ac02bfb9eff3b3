"""Repetition, presence and frequency penalties applied to logits on device.

Semantics:
- repetition (HF / vLLM): for every token seen in the prompt OR the output so far,
  ``logit / p`` when the logit is positive, else ``logit * p`` (p > 1 discourages).
- presence and frequency (OpenAI): on OUTPUT tokens only,
  ``logit -= frequency * count + presence * (count > 0)``, after the repetition penalty.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from executor_svc.host_transfer import host_list_to_device


class PenaltyParams(Protocol):
    """The three penalty knobs of one row (satisfied by RowSamplingParams)."""

    @property
    def repetition_penalty(self) -> float: ...

    @property
    def presence_penalty(self) -> float: ...

    @property
    def frequency_penalty(self) -> float: ...


@dataclass
class PenaltyTensors:
    """The (row, token) pairs a batch penalises, with each pair's penalty, on device.

    Pairs may repeat (a token seen twice); repeats carry identical values. Penalising only
    these pairs costs O(tokens seen) instead of O(rows x vocabulary).
    """

    rows: Tensor  # [M] long
    tokens: Tensor  # [M] long
    repetition: Tensor  # [M] float32, the row's repetition penalty (1.0: none)
    subtract: Tensor  # [M] float32, frequency * count + presence * (count > 0) over the output


def row_has_penalty(p: PenaltyParams) -> bool:
    """True when any penalty of the row changes logits."""
    return p.repetition_penalty != 1.0 or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0


def build_penalty_tensors(
    params: Sequence[PenaltyParams],
    prompt_token_ids: Sequence[Sequence[int]],
    output_token_ids: Sequence[Sequence[int]],
    vocab_size: int,
    device: torch.device | str,
) -> PenaltyTensors | None:
    """Builds the penalty tensors of a batch, or None when no row has a penalty."""
    if not any(row_has_penalty(p) for p in params):
        return None
    # Output tokens of penalised rows, then the prompt tokens the repetition penalty also sees.
    outputs = [out if row_has_penalty(p) else () for p, out in zip(params, output_token_ids)]
    prompts = [set(pr) if p.repetition_penalty != 1.0 else ()
               for p, pr in zip(params, prompt_token_ids)]
    rows = _row_of_each_token(outputs) + _row_of_each_token(prompts)
    tokens = list(itertools.chain(itertools.chain.from_iterable(outputs),
                                  itertools.chain.from_iterable(prompts)))
    pairs = host_list_to_device([rows, tokens], device)
    num_output = sum(len(out) for out in outputs)
    counts = torch.zeros(len(params), vocab_size, dtype=torch.float32, device=device)
    counts.index_put_((pairs[0, :num_output], pairs[1, :num_output]),
                      torch.ones((), device=device), accumulate=True)
    pair_counts = counts[pairs[0], pairs[1]]
    frequency = host_list_to_device([p.frequency_penalty for p in params], device, torch.float32)
    presence = host_list_to_device([p.presence_penalty for p in params], device, torch.float32)
    repetition = host_list_to_device([p.repetition_penalty for p in params], device, torch.float32)
    return PenaltyTensors(
        rows=pairs[0],
        tokens=pairs[1],
        repetition=repetition[pairs[0]],
        subtract=frequency[pairs[0]] * pair_counts + presence[pairs[0]] * (pair_counts > 0),
    )


def apply_penalties(logits: Tensor, pen: PenaltyTensors) -> Tensor:
    """Returns penalised logits [N, V] (a new tensor; the input is left untouched).

    Repetition first (divide positive logits, multiply negative ones), then subtract the
    presence and frequency terms.
    """
    values = logits[pen.rows, pen.tokens]
    values = torch.where(values > 0, values / pen.repetition, values * pen.repetition)
    penalised = logits.clone()
    # Repeated pairs write identical values, so the order of the writes does not matter.
    penalised[pen.rows, pen.tokens] = (values - pen.subtract).to(logits.dtype)
    return penalised


def _row_of_each_token(token_ids: Sequence[Sized]) -> list[int]:
    """The row index of every token of the flattened ``token_ids``."""
    return list(itertools.chain.from_iterable([i] * len(ids) for i, ids in enumerate(token_ids)))
