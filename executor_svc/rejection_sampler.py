"""Lossless verification of draft tokens against the target's distribution (Leviathan et al. 2023).

For one request with drafts d_1..d_K, the target scored K + 1 positions in one forward; row j holds
the target's logits for the token after input j (input 0 is the last accepted token). Row j is
processed with the request's own sampling transforms (penalties over the outputs *including*
d_1..d_j, temperature, top-k, top-p, min-p), giving p_j.

- Greedy rows accept d_{j+1} while it equals argmax p_j; the first mismatch emits argmax p_j.
- Sampling rows draw x_j from p_j exactly as the plain sampler does (the exponential race with the
  row's (seed, output position) noise), accept d_{j+1} when x_j equals it, and on the first
  rejection emit x_j. Drafts come from argmax drafters, so q_j is one-hot at d and this is the
  min(1, p/q) rule: d is accepted with probability p_j(d), and a rejected row emits x_j given
  x_j != d, i.e. a draw from normalise(max(p_j - q_j, 0)). Because the draw does not depend on
  the drafts, a seeded request emits the same tokens with or without speculation, whatever K the
  scheduler picks at each step. A drafter whose q is not one-hot would need the general rule.
- When all K are accepted, the bonus token is sampled from p_K like any other position.
A draft id < 0 marks a padded slot (the drafter had fewer than K proposals): always rejected.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from executor_svc.row_argmax import row_argmax
from executor_svc.sampler import Sampler
from executor_svc.sampling_metadata import SamplingMetadata


@dataclass
class VerifyResult:
    """Per request: the emitted tokens (accepted drafts then one more) and how many drafts were accepted."""

    token_ids: list[list[int]]
    num_accepted: list[int]
    row_tokens: Tensor
    """[rows] the token emitted at each row (only the first num_accepted + 1 rows of a request matter)."""


class RejectionSampler:
    """Verifies drafts for a batch of requests whose K + 1 rows are consecutive in the logits."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def __call__(self, logits: Tensor, meta: SamplingMetadata, draft_token_ids: list[list[int]]) -> VerifyResult:
        """``logits`` [rows, V] with len(drafts_i) + 1 rows per request, in order."""
        expected_rows = sum(len(drafts) + 1 for drafts in draft_token_ids)
        if logits.shape[0] != expected_rows:
            raise ValueError(f"draft_token_ids need {logits.shape[0]} rows in all, got {expected_rows}")
        processed = self.sampler.processed_logits(logits, meta)
        greedy = row_argmax(processed)
        if meta.sampling is None:
            row_tokens = greedy
        else:
            probs = self.sampler.probabilities(processed, meta.sampling)
            row_tokens = self._sample_rows(probs, greedy, meta)
        return _walk(row_tokens, draft_token_ids)

    def _sample_rows(self, probs: Tensor, greedy: Tensor, meta: SamplingMetadata) -> Tensor:
        """The token each row draws (the argmax on greedy rows); a row accepts its draft iff they match."""
        sampled = row_argmax(probs / self.sampler.exponential_noise(probs, meta.sampling.seeded_rows))
        if meta.sampling.greedy_mask is not None:
            sampled = torch.where(meta.sampling.greedy_mask, greedy, sampled)
        return sampled


def _walk(row_tokens: Tensor, drafts: list[list[int]]) -> VerifyResult:
    """Per request: accept drafts in order while each equals its row's token, then emit that row's token."""
    tokens_host = row_tokens.tolist()
    token_ids, num_accepted = [], []
    row = 0
    for request_drafts in drafts:
        accepted = 0
        for draft in request_drafts:
            if draft < 0 or tokens_host[row + accepted] != draft:
                break
            accepted += 1
        token_ids.append(list(request_drafts[:accepted]) + [tokens_host[row + accepted]])
        num_accepted.append(accepted)
        row += len(request_drafts) + 1
    return VerifyResult(token_ids=token_ids, num_accepted=num_accepted, row_tokens=row_tokens)
