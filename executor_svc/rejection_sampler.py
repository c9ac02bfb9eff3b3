"""Lossless verification of draft tokens against the target's distribution (Leviathan et al. 2023).

For one request with drafts d_1..d_K, the target scored K + 1 positions in one forward; row j holds
the target's logits for the token after input j (input 0 is the last accepted token). Row j is
processed with the request's own sampling transforms (penalties over the outputs *including*
d_1..d_j, temperature, top-k, top-p, min-p), giving p_j.

- Greedy rows accept d_{j+1} while it equals argmax p_j; the first mismatch emits argmax p_j.
- Sampling rows accept d_{j+1} with probability min(1, p_j(d) / q_j(d)); the first rejection emits a
  draw from normalise(max(p_j - q_j, 0)). Drafts come from argmax drafters, so q_j is one-hot at d:
  acceptance is p_j(d) and the residual is p_j with d removed.
- When all K are accepted, the bonus token is sampled from p_K like any other position.
A draft id < 0 marks a padded slot (the drafter had fewer than K proposals): always rejected.
Per-position randomness comes from (seed, output position) for seeded requests, as in the sampler.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from executor_svc.row_argmax import row_argmax
from executor_svc.sampler import Sampler
from executor_svc.sampling_metadata import SamplingMetadata, mix_seed

_ACCEPT_STREAM = 0x5EED_ACCE


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

    def __call__(
        self,
        logits: Tensor,
        meta: SamplingMetadata,
        draft_token_ids: list[list[int]],
        row_seeds: list[int | None],
    ) -> VerifyResult:
        """``logits`` [rows, V] with len(drafts_i) + 1 rows per request, in order; ``row_seeds`` the
        mixed (seed, position) of each row, None for unseeded rows."""
        processed = self.sampler.processed_logits(logits, meta)
        greedy = row_argmax(processed)
        if meta.sampling is None:
            row_tokens = greedy
            accept = None
        else:
            probs = self.sampler.probabilities(processed, meta.sampling)
            row_tokens, accept = self._sample_rows(probs, greedy, meta, draft_token_ids, row_seeds)
        return _walk(row_tokens, accept, draft_token_ids)

    def _sample_rows(self, probs, greedy, meta, drafts, row_seeds):
        """Acceptance flags per draft row, and the token each row would emit if it were the stop row."""
        rows = probs.shape[0]
        padded = torch.tensor(_drafts_per_row(drafts, rows), dtype=torch.long, device=probs.device)
        valid = padded >= 0
        draft_prob = probs.gather(1, padded.clamp_min(0).unsqueeze(1)).squeeze(1) * valid
        uniform = _uniform(rows, row_seeds, self.sampler, probs.device)
        accept = uniform < draft_prob
        residual = probs.clone()
        valid_rows = valid.nonzero().squeeze(1)
        residual[valid_rows, padded[valid_rows]] = 0.0
        # A residual with no mass left (p was one-hot at the draft) can only be reached with
        # probability 0; fall back to p to stay finite.
        empty = residual.sum(dim=-1, keepdim=True) <= 0
        residual = torch.where(empty, probs, residual)
        noise = self.sampler.exponential_noise(residual, meta.sampling.seeded_rows)
        sampled = row_argmax(residual / noise)
        if meta.sampling.greedy_mask is not None:
            sampled = torch.where(meta.sampling.greedy_mask, greedy, sampled)
            accept = torch.where(meta.sampling.greedy_mask, greedy == padded, accept)
        return sampled, accept


def _drafts_per_row(drafts: list[list[int]], rows: int) -> list[int]:
    """The draft each row verifies (-1 for a request's last row, which only yields the bonus)."""
    flat: list[int] = []
    for request_drafts in drafts:
        flat.extend(request_drafts)
        flat.append(-1)
    if len(flat) != rows:
        raise ValueError(f"draft_token_ids need {rows} rows in all, got {len(flat)}")
    return flat


def _uniform(rows: int, row_seeds: list[int | None], sampler: Sampler, device) -> Tensor:
    uniform = torch.empty(rows, device=device)
    uniform.uniform_(generator=sampler.shared_generator(device))
    for row, seed in enumerate(row_seeds):
        if seed is not None:
            generator = torch.Generator(device=device).manual_seed(mix_seed(seed, _ACCEPT_STREAM))
            uniform[row] = torch.rand((), generator=generator, device=device)
    return uniform


def _walk(row_tokens: Tensor, accept: Tensor | None, drafts: list[list[int]]) -> VerifyResult:
    """Per request: accept drafts in order until the first rejection, then emit that row's token."""
    tokens_host = row_tokens.tolist()
    accept_host = accept.tolist() if accept is not None else None
    token_ids, num_accepted = [], []
    row = 0
    for request_drafts in drafts:
        accepted = 0
        for draft in request_drafts:
            ok = accept_host[row + accepted] if accept_host is not None else tokens_host[row + accepted] == draft
            if not ok or draft < 0:
                break
            accepted += 1
        token_ids.append(list(request_drafts[:accepted]) + [tokens_host[row + accepted]])
        num_accepted.append(accepted)
        row += len(request_drafts) + 1
    return VerifyResult(token_ids=token_ids, num_accepted=num_accepted, row_tokens=row_tokens)
