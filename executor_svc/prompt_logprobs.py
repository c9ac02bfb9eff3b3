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
from executor_svc.sampler import RowLogprobs, gather_logprobs
from executor_svc.sampling_metadata import LogprobRequest


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


@dataclass(frozen=True)
class ScoredPrompt:
    """One request's prompt logprobs from one chunk: the prompt position of the first token scored, the tokens,
    and their logprobs (the sampler's form, as for output tokens)."""

    start: int
    token_ids: list[int]
    logprobs: list[RowLogprobs]


def score_prompt_rows(logits: Tensor, rows: list[PromptRows]) -> dict[str, ScoredPrompt]:
    """{request id: its scored prompt tokens} from the logits [sum of rows, V] of ``rows``' flat rows, in order,
    through the sampler's own logprob gathering (reads them back to the host)."""
    counts = [row.count for row in rows for _ in row.targets]
    request = LogprobRequest(rows=torch.arange(len(counts), device=logits.device), row_ids=list(range(len(counts))),
                             counts=counts, max_count=max(counts))
    targets = host_list_to_device([token for row in rows for token in row.targets], logits.device)
    every_row = logits.log_softmax(dim=-1, dtype=torch.float32)  # raw_logprobs of a request asking on every row
    per_row = gather_logprobs(targets, every_row, request).to_host(len(counts))
    scored, index = {}, 0
    for row in rows:
        logprobs = [lp for lp in per_row[index : index + len(row.targets)] if lp is not None]
        scored[row.request_id] = ScoredPrompt(row.start, row.targets, logprobs)
        index += len(row.targets)
    return scored
