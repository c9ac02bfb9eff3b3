"""Token sampling on device: penalties, greedy, temperature, min-p, top-k, top-p, seeds, logprobs.

Order of operations for a batch of logits [N, V]:
1. logprobs (when asked for) are log_softmax of the RAW logits, before penalties and
   temperature, as vLLM returns by default;
2. the request's logit bias (``executor_svc.logit_bias``), then penalties (repetition,
   presence, frequency; see ``executor_svc.penalties``), then bad words (``executor_svc.bad_words``), then the
   mask of tokens outside structured output's format or allowed_token_ids (``executor_svc.token_mask``), all
   also on greedy rows;
3. greedy rows (temperature 0) take the argmax of the penalised logits;
4. sampling rows divide by their temperature, drop tokens below min_p times the top
   token's probability, keep their top_k tokens, then the smallest set whose
   probability reaches top_p (computed over what top-k kept), and sample from the
   softmax of what is left. Tokens tied with the last kept one are kept too.

Sampling is an "exponential race": token = argmax(probs / E) with E ~ Exp(1) iid per
token, which draws exactly from probs without a host sync or a loop over rows. A row
with a seed draws its E from a generator seeded by (seed, output position), so a request
gets the same tokens alone, at any row of any batch, and after being recomputed.
Rows without a seed draw from the Sampler's own generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from executor_svc.bad_words import apply_banned_tokens
from executor_svc.logit_bias import apply_logit_bias
from executor_svc.penalties import apply_penalties
from executor_svc.row_argmax import row_argmax
from executor_svc.sampling_metadata import (
    LogprobRequest,
    RandomSampling,
    SamplingMetadata,
    TopKTopP,
)
from executor_svc.token_mask import apply_token_mask

# Tokens a CPU top-p filter sorts per row in successive rounds before a full sort
# (SmolLM2 at temperature 1: the 0.95 nucleus is under 256 tokens at ~75% of positions).
CPU_TOP_P_PREFIXES = (256, 4096)


@dataclass
class RowLogprobs:
    """Logprobs of one row: the sampled token's, and the top alternatives, most likely first."""

    sampled_logprob: float
    top_ids: list[int]
    top_logprobs: list[float]


@dataclass
class SamplerOutput:
    """Host results of one sampling call."""

    token_ids: list[int]  # one per row
    logprobs: list[RowLogprobs | None]  # per row; None when not requested


@dataclass
class DeviceLogprobs:
    """Logprobs of the rows listed in ``request``, still on device."""

    request: LogprobRequest
    sampled: Tensor  # [R] float32
    top_ids: Tensor  # [R, max_count] long
    top_values: Tensor  # [R, max_count] float32

    def to_host(self, num_rows: int) -> list[RowLogprobs | None]:
        """Per-row host logprobs, truncated to each row's requested count."""
        per_row: list[RowLogprobs | None] = [None] * num_rows
        sampled = self.sampled.tolist()
        top_ids, top_values = self.top_ids.tolist(), self.top_values.tolist()
        for j, (row, n) in enumerate(zip(self.request.row_ids, self.request.counts)):
            per_row[row] = RowLogprobs(sampled[j], top_ids[j][:n], top_values[j][:n])
        return per_row


@dataclass
class DeviceSamplerOutput:
    """Results of one sampling call still on device; producing them did not wait for the device."""

    token_ids: Tensor  # [N] long
    logprobs: DeviceLogprobs | None

    def to_host(self) -> SamplerOutput:
        """Copies to the host (this waits for the device)."""
        token_ids = self.token_ids.tolist()
        if self.logprobs is None:
            return SamplerOutput(token_ids=token_ids, logprobs=[None] * len(token_ids))
        return SamplerOutput(token_ids=token_ids, logprobs=self.logprobs.to_host(len(token_ids)))


class Sampler:
    """Chooses one token per row of logits; see the module docstring for the semantics.

    ``seed`` seeds the generator used by rows without their own seed (None: random).
    """

    def __init__(self, seed: int | None = None) -> None:
        self._seed = seed
        self._generators: dict[torch.device, torch.Generator] = {}

    def __call__(self, logits: Tensor, meta: SamplingMetadata) -> SamplerOutput:
        """Samples and copies the results to the host."""
        return self.sample(logits, meta).to_host()

    def sample(self, logits: Tensor, meta: SamplingMetadata) -> DeviceSamplerOutput:
        """Samples one token per row of ``logits`` [N, V] without waiting for the device."""
        if tuple(logits.shape) != (meta.num_rows, meta.vocab_size):
            raise ValueError(
                f"logits shape {tuple(logits.shape)} does not match metadata "
                f"({meta.num_rows}, {meta.vocab_size})")
        raw = raw_logprobs(logits, meta.logprobs)
        logits = self.processed_logits(logits, meta)
        if meta.sampling is None:
            token_ids = row_argmax(logits)
        else:
            token_ids = self._sample_rows(logits, meta.sampling)
        logprobs = None
        if meta.logprobs is not None and raw is not None:
            logprobs = gather_logprobs(token_ids, raw, meta.logprobs)
        return DeviceSamplerOutput(token_ids=token_ids, logprobs=logprobs)

    def processed_logits(self, logits: Tensor, meta: SamplingMetadata) -> Tensor:
        """The logits after the logit bias, penalties, bad words and token mask (a new tensor when any applies; the
        input is never modified)."""
        if meta.logit_bias is not None:
            logits = apply_logit_bias(logits, meta.logit_bias)
        if meta.penalties is not None:
            logits = apply_penalties(logits, meta.penalties)
        if meta.banned_tokens is not None:
            logits = apply_banned_tokens(logits, meta.banned_tokens)
        if meta.token_mask is not None:
            logits = apply_token_mask(logits, meta.token_mask)
        return logits

    def probabilities(self, logits: Tensor, sampling: RandomSampling) -> Tensor:
        """The distribution each sampling row draws from: temperature, min-p, top-k, top-p, softmax."""
        scaled = logits.float() / sampling.temperature
        if sampling.min_p is not None:
            apply_min_p_(scaled, sampling.min_p)
        if sampling.top_k_top_p is not None:
            apply_top_k_top_p_(scaled, sampling.top_k_top_p)
        return scaled.softmax(dim=-1)

    def _sample_rows(self, logits: Tensor, sampling: RandomSampling) -> Tensor:
        """Samples every row, then puts the argmax back into greedy rows."""
        probs = self.probabilities(logits, sampling)
        sampled = row_argmax(probs.div_(self.exponential_noise(probs, sampling.seeded_rows)))
        if sampling.greedy_mask is None:
            return sampled
        return torch.where(sampling.greedy_mask, row_argmax(logits), sampled)

    def exponential_noise(self, like: Tensor, seeded_rows: list[tuple[int, int]]) -> Tensor:
        """Exp(1) noise shaped like ``like``; seeded rows use their own (seed, position) stream."""
        uniform = torch.empty_like(like)
        if len(seeded_rows) < like.shape[0]:
            uniform.uniform_(generator=self.shared_generator(like.device))
        for row, seed in seeded_rows:
            uniform[row].uniform_(generator=torch.Generator(device=like.device).manual_seed(seed))
        # -log(U) is Exp(1) and ~5x cheaper than exponential_() on CPU. The clamps keep it
        # finite and non-zero: a zero would make 0/0 = NaN, which argmax picks.
        tiny = torch.finfo(like.dtype).tiny
        return uniform.clamp_min_(tiny).log_().neg_().clamp_min_(tiny)

    def shared_generator(self, device: torch.device) -> torch.Generator:
        """The generator of unseeded rows on ``device``, created on first use."""
        if device not in self._generators:
            generator = torch.Generator(device=device)
            if self._seed is None:
                generator.seed()
            else:
                generator.manual_seed(self._seed)
            self._generators[device] = generator
        return self._generators[device]


def apply_min_p_(logits: Tensor, min_p: Tensor) -> None:
    """Masks, in place, tokens whose probability is below min_p [N, 1] times the top one's.

    Works in log space: p_i < min_p * p_max  <=>  logit_i < logit_max + log(min_p).
    """
    threshold = logits.amax(dim=-1, keepdim=True) + torch.log(min_p)
    logits.masked_fill_(logits < threshold, float("-inf"))


def apply_top_k_top_p_(logits: Tensor, limits: TopKTopP) -> None:
    """Masks, in place, tokens outside each filtering row's top-k, then outside its top-p
    nucleus (whose probabilities are renormalised over the top-k set)."""
    vocab_size = logits.shape[-1]
    if not limits.needs_full_sort:
        threshold, _ = _cut_thresholds(logits, limits, limits.max_top_k)
    elif logits.device.type == "cpu":
        threshold = _cpu_cut_thresholds(logits, limits)
    else:
        threshold, _ = _cut_thresholds(logits, limits, vocab_size)
    threshold = torch.where(limits.filter_rows, threshold, float("-inf"))
    logits.masked_fill_(logits < threshold, float("-inf"))


def _cpu_cut_thresholds(logits: Tensor, limits: TopKTopP) -> Tensor:
    """Thresholds from growing sorted prefixes: each round sorts more tokens of only the rows
    whose nucleus did not fit, ending with a full sort.

    A full sort costs ~30x a top-256 on CPU and most nuclei are short. Reading which rows
    did not fit is a host sync, which costs nothing on CPU.
    """
    vocab_size = logits.shape[-1]
    threshold = torch.full((logits.shape[0], 1), float("-inf"), device=logits.device)
    pending = limits.filter_rows.squeeze(1).nonzero().squeeze(1)
    for size in (*CPU_TOP_P_PREFIXES, vocab_size):
        if pending.numel() == 0:
            break
        rows = TopKTopP(limits.top_k[pending], limits.top_p[pending], limits.filter_rows[pending],
                        limits.max_top_k, limits.needs_full_sort)
        prefix = min(vocab_size, max(limits.max_top_k, size))
        threshold[pending], covered = _cut_thresholds(logits[pending], rows, prefix)
        pending = pending[~covered.squeeze(1)]
    return threshold


def _cut_thresholds(logits: Tensor, limits: TopKTopP, num_candidates: int) -> tuple[Tensor, Tensor]:
    """The lowest kept logit [N, 1] per row, looking at its ``num_candidates`` best tokens.

    Also returns [N, 1] bool: whether those candidates hold the row's whole top-k / top-p
    set (always true when every token is a candidate). Tokens tied with the threshold stay.
    """
    vocab_size = logits.shape[-1]
    if num_candidates >= vocab_size:
        candidates = logits.sort(dim=-1, descending=True).values
    else:
        candidates = logits.topk(num_candidates, dim=-1).values
    in_top_k = torch.arange(candidates.shape[-1], device=logits.device) < limits.top_k
    top_k_logits = candidates.masked_fill(~in_top_k, float("-inf"))
    log_norm = top_k_logits.logsumexp(dim=-1, keepdim=True)
    has_whole_top_k = limits.top_k <= candidates.shape[-1]
    if num_candidates < vocab_size and limits.needs_full_sort:
        # Rows without top-k renormalise over the whole vocabulary, not the candidates.
        log_norm = torch.where(has_whole_top_k, log_norm, logits.logsumexp(dim=-1, keepdim=True))
    probs = (top_k_logits - log_norm).exp()
    cumulative = probs.cumsum(dim=-1)
    kept = (in_top_k & (cumulative - probs < limits.top_p)).sum(dim=-1, keepdim=True)
    threshold = candidates.gather(1, (kept - 1).clamp_min(0))
    covered = has_whole_top_k | (cumulative[:, -1:] >= limits.top_p)
    return threshold, covered


def raw_logprobs(logits: Tensor, request: LogprobRequest | None) -> Tensor | None:
    """log_softmax [R, V] of the raw logits of the rows that asked for logprobs."""
    if request is None:
        return None
    if len(request.row_ids) < logits.shape[0]:
        logits = logits.index_select(0, request.rows)
    return logits.log_softmax(dim=-1, dtype=torch.float32)


def gather_logprobs(
    token_ids: Tensor, logprobs: Tensor, request: LogprobRequest
) -> DeviceLogprobs:
    """Picks the sampled tokens' logprobs and the top alternatives for the rows that asked, from their
    ``raw_logprobs``."""
    if len(request.row_ids) < token_ids.shape[0]:
        token_ids = token_ids.index_select(0, request.rows)
    sampled = logprobs.gather(1, token_ids.unsqueeze(1)).squeeze(1)
    top = logprobs.topk(request.max_count, dim=-1)
    return DeviceLogprobs(request=request, sampled=sampled, top_ids=top.indices,
                          top_values=top.values)
