"""Lossless verification of draft tokens against the target's distribution (Leviathan et al. 2023).

For one request with drafts d_1..d_K, the target scored K + 1 positions in one forward; row j holds
the target's logits for the token after input j (input 0 is the last accepted token). Row j is
processed with the request's own sampling transforms (penalties over the outputs *including*
d_1..d_j, temperature, top-k, top-p, min-p), giving p_j.

- Greedy rows accept d_{j+1} while it equals argmax p_j; the first mismatch emits argmax p_j.
- Sampling rows draw x_j from p_j with the plain sampler itself (the exponential race with the
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

from torch import Tensor

from executor_svc.sampler import DeviceSamplerOutput, RowLogprobs, Sampler, SamplerOutput
from executor_svc.sampling_metadata import SamplingMetadata


@dataclass
class VerifyResult:
    """Per request: the emitted tokens (accepted drafts then one more), how many drafts were accepted,
    and the logprobs of each emitted token (None where not requested)."""

    token_ids: list[list[int]]
    num_accepted: list[int]
    logprobs: list[list[RowLogprobs | None]]


class RejectionSampler:
    """Verifies drafts for a batch of requests whose K + 1 rows are consecutive in the logits.

    In two phases, so that the device work can be queued before its results are read:
    ``sample_rows`` draws every row's token on the device (argmax on greedy rows), and
    ``accept_drafts`` then walks each request's rows on the host, accepting drafts while they match."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def __call__(self, logits: Tensor, meta: SamplingMetadata, draft_token_ids: list[list[int]]) -> VerifyResult:
        """Both phases at once; ``logits`` [rows, V] with len(drafts_i) + 1 rows per request, in order."""
        return accept_drafts(self.sample_rows(logits, meta, draft_token_ids).to_host(), draft_token_ids)

    def sample_rows(
        self, logits: Tensor, meta: SamplingMetadata, draft_token_ids: list[list[int]]
    ) -> DeviceSamplerOutput:
        """The token each row emits if the walk reaches it. With one-hot drafts that is the row's plain
        sample, whatever the draft: this is what keeps seeded requests unchanged by speculation."""
        expected_rows = sum(len(drafts) + 1 for drafts in draft_token_ids)
        if logits.shape[0] != expected_rows:
            raise ValueError(f"draft_token_ids need {logits.shape[0]} rows in all, got {expected_rows}")
        return self.sampler.sample(logits, meta)


def accept_drafts(rows: SamplerOutput, drafts: list[list[int]]) -> VerifyResult:
    """Per request: accept drafts in order while each equals its row's token, then emit that row's token.
    Every emitted token is its row's sampled token, so its logprobs are that row's."""
    token_ids, num_accepted, logprobs = [], [], []
    row = 0
    for request_drafts in drafts:
        accepted = 0
        for draft in request_drafts:
            if draft < 0 or rows.token_ids[row + accepted] != draft:
                break
            accepted += 1
        token_ids.append(rows.token_ids[row : row + accepted + 1])
        logprobs.append(rows.logprobs[row : row + accepted + 1])
        num_accepted.append(accepted)
        row += len(request_drafts) + 1
    return VerifyResult(token_ids=token_ids, num_accepted=num_accepted, logprobs=logprobs)
