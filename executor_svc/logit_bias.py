"""Per-request logit bias (OpenAI's ``logit_bias``) applied to logits on device.

Each biased (row, token) pair is listed once, so adding the batch's biases is one scatter over the pairs that
exist, not a pass over rows x vocabulary. The bias does not depend on the request's outputs, so a step that
carries one can still run ahead of the host (unlike the penalties).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from executor_svc.host_transfer import host_list_to_device


class BiasParams(Protocol):
    """The bias of one row (satisfied by RowSamplingParams)."""

    @property
    def logit_bias(self) -> tuple[tuple[int, float], ...]: ...


@dataclass
class LogitBiasTensors:
    """The (row, token) pairs a batch biases, with each pair's bias, on device; no pair repeats."""

    rows: Tensor  # [M] long
    tokens: Tensor  # [M] long
    values: Tensor  # [M] float32


def build_logit_bias(params: Sequence[BiasParams], vocab_size: int,
                     device: torch.device | str) -> LogitBiasTensors | None:
    """The bias tensors of a batch, or None when no row has a bias. ValueError for a token outside the vocabulary."""
    if not any(p.logit_bias for p in params):
        return None
    pairs = [(row, token, bias) for row, p in enumerate(params) for token, bias in p.logit_bias]
    for _, token, _ in pairs:
        if not 0 <= token < vocab_size:
            raise ValueError(f"logit_bias: token id {token} is outside the vocabulary [0, {vocab_size})")
    rows, tokens, values = (list(column) for column in zip(*pairs))
    index = host_list_to_device([rows, tokens], device)
    return LogitBiasTensors(rows=index[0], tokens=index[1], values=host_list_to_device(values, device, torch.float32))


def apply_logit_bias(logits: Tensor, bias: LogitBiasTensors) -> Tensor:
    """Biased logits [N, V] (a new tensor; the input is left untouched), added in float32."""
    biased = logits.clone()
    sums = logits[bias.rows, bias.tokens].float() + bias.values
    biased[bias.rows, bias.tokens] = sums.to(logits.dtype)
    return biased


def bias_pairs(mapping: dict[int, float] | None) -> tuple[tuple[int, float], ...]:
    """A request's bias as sorted (token, bias) pairs, the form RowSamplingParams keeps (hashable, ordered)."""
    return tuple(sorted((int(token), float(bias)) for token, bias in (mapping or {}).items()))

