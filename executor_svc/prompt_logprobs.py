"""Logprobs of a prompt's own tokens (vLLM's ``prompt_logprobs``), scored while a prefill chunk computes them.

The row of prompt position p predicts the token at p + 1, so a chunk covering positions [start, end) scores prompt
tokens start + 1 .. min(end, n - 1) of an n-token prompt (the row of position n - 1 is the one sampled for the first
output token). Those rows' logits are computed with the sampled rows, in one pass over the LM head; a step that scores
prompt rows reads them back at once (it is not deferred). Logprobs are the raw logits' log-softmax, as for outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from executor_svc.host_transfer import host_list_to_device
from executor_svc.request_state import ExecutorRequestState
from stepahead_proto import generation_pb2


@dataclass(frozen=True)
class PromptRows:
    """The consecutive flat rows of one request's chunk that score prompt tokens."""

    request_id: str
    first_flat: int
    start: int
    """The prompt position of the first token scored (>= 1)."""
    targets: list[int]
    """The prompt tokens scored, in order."""
    count: int
    """Top alternatives asked per position."""

    @property
    def flat_rows(self) -> range:
        return range(self.first_flat, self.first_flat + len(self.targets))


def wants_prompt_logprobs(state: ExecutorRequestState) -> bool:
    """Whether the request still has prompt tokens to score (its next chunk may score some)."""
    return state.params.prompt_logprobs is not None and state.num_computed_tokens < len(state.prompt_token_ids) - 1


def prompt_rows(state: ExecutorRequestState, start: int, num_tokens: int, first_flat: int) -> PromptRows | None:
    """The rows of a chunk of ``num_tokens`` from position ``start`` (flat row ``first_flat``) that score prompt
    tokens, or None when it scores none or the request did not ask."""
    if state.params.prompt_logprobs is None:
        return None
    end = min(start + num_tokens, len(state.prompt_token_ids) - 1)
    if end <= start:
        return None
    return PromptRows(state.request_id, first_flat, start + 1, state.prompt_token_ids[start + 1 : end + 1],
                      state.params.prompt_logprobs)


def score_prompt_rows(
    logits: Tensor, rows: list[PromptRows]
) -> dict[str, tuple[int, list[generation_pb2.PositionLogprobs]]]:
    """{request id: (start position, one PositionLogprobs per scored token)} from the logits [sum of rows, V] of
    ``rows``' flat rows, in order (reads them back to the host)."""
    logprobs = logits.log_softmax(dim=-1, dtype=torch.float32)
    targets = host_list_to_device([token for row in rows for token in row.targets], logits.device)
    own = logprobs.gather(1, targets.unsqueeze(1)).squeeze(1).tolist()
    max_count = max(row.count for row in rows)
    top_ids: list[list[int]] = []
    top_values: list[list[float]] = []
    if max_count:
        top = logprobs.topk(max_count, dim=-1)
        top_ids, top_values = top.indices.tolist(), top.values.tolist()
    scored: dict[str, tuple[int, list[generation_pb2.PositionLogprobs]]] = {}
    index = 0
    for row in rows:
        positions = []
        for token in row.targets:
            ids, values = (top_ids[index][: row.count], top_values[index][: row.count]) if row.count else ([], [])
            alternatives = [generation_pb2.TokenLogprob(token_id=t, logprob=v) for t, v in zip(ids, values)]
            positions.append(generation_pb2.PositionLogprobs(
                sampled=generation_pb2.TokenLogprob(token_id=token, logprob=own[index]), top=alternatives))
            index += 1
        scored[row.request_id] = (row.start, positions)
    return scored
