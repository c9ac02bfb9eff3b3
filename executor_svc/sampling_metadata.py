"""Per-request sampling parameters and the per-step tensors the sampler reads."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from executor_svc.bad_words import BannedTokens, bad_word_sequences, build_banned_tokens
from executor_svc.host_transfer import host_column_to_device, host_list_to_device
from executor_svc.logit_bias import LogitBiasTensors, bias_pairs, build_logit_bias
from executor_svc.penalties import PenaltyTensors, build_penalty_tensors
from executor_svc.token_mask import TokenMask
from stepahead_proto import sampling_pb2

# Temperatures below this are treated as greedy (as vLLM does): dividing by them only
# sharpens the distribution into an argmax while risking overflow.
GREEDY_TEMPERATURE = 1e-5
MAX_LOGPROBS = 20
MAX_ABS_LOGIT_BIAS = 100.0
# top_p of rows that do not use nucleus filtering: above any cumulative probability.
_TOP_P_DISABLED = 2.0
_MASK64 = (1 << 64) - 1


def _check(ok: bool, field: str, rule: str, value: object) -> None:
    """Raises ValueError naming the field when a rule is broken."""
    if not ok:
        raise ValueError(f"{field} {rule}, got {value!r}")


@dataclass(frozen=True)
class RowSamplingParams:
    """Resolved sampling parameters of one request (defaults already applied).

    temperature 0 means greedy; top_k -1 and top_p 1.0 disable those filters; logprobs None
    returns no logprobs, n >= 0 the sampled token's logprob plus the top n alternatives; logit_bias: (token id,
    bias) pairs sorted by id, added to the logits before penalties; prompt_logprobs: as logprobs, for the prompt's
    own tokens (scored while the prompt is computed, not sampled); bad_words: token sequences whose last token is
    forbidden after the others (``executor_svc.bad_words``).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    logprobs: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    prompt_logprobs: int | None = None
    bad_words: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        _check(self.temperature >= 0.0, "temperature", "must be >= 0", self.temperature)
        _check(0.0 < self.top_p <= 1.0, "top_p", "must be in (0, 1]", self.top_p)
        _check(self.top_k == -1 or self.top_k >= 1, "top_k", "must be -1 or >= 1", self.top_k)
        _check(0.0 <= self.min_p <= 1.0, "min_p", "must be in [0, 1]", self.min_p)
        _check(self.repetition_penalty > 0.0, "repetition_penalty", "must be > 0",
               self.repetition_penalty)
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            _check(-2.0 <= value <= 2.0, name, "must be in [-2, 2]", value)
        if self.seed is not None:
            _check(0 <= self.seed <= _MASK64, "seed", "must be an unsigned 64-bit integer",
                   self.seed)
        if self.logprobs is not None:
            _check(0 <= self.logprobs <= MAX_LOGPROBS, "logprobs",
                   f"must be in [0, {MAX_LOGPROBS}]", self.logprobs)
        if self.prompt_logprobs is not None:
            _check(0 <= self.prompt_logprobs <= MAX_LOGPROBS, "prompt_logprobs", f"must be in [0, {MAX_LOGPROBS}]",
                   self.prompt_logprobs)
        for token, bias in self.logit_bias:
            _check(token >= 0, f"logit_bias[{token}]", "token id must be >= 0", token)
            _check(math.isfinite(bias) and abs(bias) <= MAX_ABS_LOGIT_BIAS, f"logit_bias[{token}]",
                   f"must be a number in [-{MAX_ABS_LOGIT_BIAS:g}, {MAX_ABS_LOGIT_BIAS:g}]", bias)
        for index, sequence in enumerate(self.bad_words):
            _check(bool(sequence) and min(sequence) >= 0, f"bad_words[{index}]",
                   "must be a non-empty sequence of token ids >= 0", sequence)

    @classmethod
    def from_proto(cls, p: sampling_pb2.SamplingParams,
                   bad_words: Sequence[Sequence[int]] = ()) -> RowSamplingParams:
        """Reads a proto message; unset optional fields take the defaults the proto documents. ``bad_words``: the
        request's bad words as token sequences (the scheduler tokenizes them: the proto's strings are not read)."""
        return cls(
            temperature=p.temperature if p.HasField("temperature") else 1.0,
            top_p=p.top_p if p.HasField("top_p") else 1.0,
            top_k=p.top_k if p.HasField("top_k") else -1,
            min_p=p.min_p,
            repetition_penalty=p.repetition_penalty if p.HasField("repetition_penalty") else 1.0,
            presence_penalty=p.presence_penalty,
            frequency_penalty=p.frequency_penalty,
            seed=p.seed if p.HasField("seed") else None,
            logprobs=p.logprobs if p.HasField("logprobs") else None,
            logit_bias=bias_pairs(dict(p.logit_bias)),
            prompt_logprobs=p.prompt_logprobs if p.HasField("prompt_logprobs") else None,
            bad_words=bad_word_sequences(bad_words),
        )

    @property
    def is_greedy(self) -> bool:
        """True when the row takes the argmax instead of sampling."""
        return self.temperature < GREEDY_TEMPERATURE


# Parameters that leave logits unchanged; stand in for greedy rows in sampling tensors.
_NEUTRAL = RowSamplingParams()


@dataclass
class LogprobRequest:
    """Which rows want logprobs and how many alternatives each."""

    rows: Tensor  # [R] long, row indices on device
    row_ids: list[int]  # the same indices on the host
    counts: list[int]  # top-n requested per listed row
    max_count: int


@dataclass
class TopKTopP:
    """Per-row top-k / top-p limits; rows that use neither are left unfiltered."""

    top_k: Tensor  # [N, 1] long, vocab_size when disabled
    top_p: Tensor  # [N, 1] float32, 2.0 (above any cumulative probability) when disabled
    filter_rows: Tensor  # [N, 1] bool, rows that use top-k or top-p
    max_top_k: int  # largest top_k in use, 0 when no row uses top-k
    needs_full_sort: bool  # some row uses top-p without top-k: its nucleus may span the vocabulary


@dataclass
class RandomSampling:
    """Tensors of the rows that sample; greedy rows hold neutral values and are masked."""

    temperature: Tensor  # [N, 1] float32 (1.0 for greedy rows)
    greedy_mask: Tensor | None  # [N] bool; None when no row is greedy
    min_p: Tensor | None  # [N, 1] float32; None when no row uses min-p
    top_k_top_p: TopKTopP | None  # None when no row uses top-k or top-p
    seeded_rows: list[tuple[int, int]]  # (row, mixed seed) of sampling rows with a seed


@dataclass
class SamplingMetadata:
    """Per-row inputs of one sampling call, built once per step by the model runner.

    Tensors live on the logits' device. Parts are None when no row needs them, so the
    sampler skips that work: ``sampling`` is None for an all-greedy batch.
    """

    num_rows: int
    vocab_size: int
    sampling: RandomSampling | None
    penalties: PenaltyTensors | None
    logprobs: LogprobRequest | None
    logit_bias: LogitBiasTensors | None = None
    banned_tokens: BannedTokens | None = None
    """Tokens bad words forbid at each row."""
    token_mask: TokenMask | None = None
    """Rows that may take only some tokens: structured output's and allowed_token_ids' (built by the model runner,
    which holds the matchers)."""

    @property
    def all_greedy(self) -> bool:
        """True when every row takes the argmax."""
        return self.sampling is None

    @classmethod
    def build(
        cls,
        params: list[RowSamplingParams],
        prompt_token_ids: list[list[int]],
        output_token_ids: list[list[int]],
        vocab_size: int,
        device: torch.device | str,
        output_positions: list[int] | None = None,
        token_mask: TokenMask | None = None,
        num_unread: list[int] | None = None,
        newest_tokens: Tensor | None = None,
    ) -> SamplingMetadata:
        """Builds the tensors for one step; row i samples the token at output position
        ``output_positions[i]`` of its request (default ``len(output_token_ids[i])``; this position
        seeds seeded rows). Penalties and bad words read ``output_token_ids``; ``token_mask``: the rows that may
        take only some tokens (None: none). ``num_unread`` / ``newest_tokens``: per row, output tokens sampled but not
        in ``output_token_ids`` yet, and the newest output token on the device (bad words of a step running ahead)."""
        if not len(params) == len(prompt_token_ids) == len(output_token_ids):
            raise ValueError("params, prompt_token_ids and output_token_ids need one entry per row")
        if output_positions is None:
            output_positions = [len(out) for out in output_token_ids]
        elif len(output_positions) != len(params):
            raise ValueError("output_positions needs one entry per row")
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        return cls(
            num_rows=len(params),
            vocab_size=vocab_size,
            sampling=_random_sampling(params, output_positions, vocab_size, device),
            penalties=build_penalty_tensors(
                params, prompt_token_ids, output_token_ids, vocab_size, device),
            logprobs=_logprob_request(params, device),
            logit_bias=build_logit_bias(params, vocab_size, device),
            banned_tokens=build_banned_tokens(params, output_token_ids, device, num_unread, newest_tokens),
            token_mask=token_mask,
        )


def _random_sampling(
    params: Sequence[RowSamplingParams],
    output_positions: Sequence[int],
    vocab_size: int,
    device: torch.device | str,
) -> RandomSampling | None:
    """Temperature, filters and seeds of the sampling rows; None when every row is greedy."""
    greedy = [p.is_greedy for p in params]
    if all(greedy):
        return None
    rows = [_NEUTRAL if g else p for p, g in zip(params, greedy)]
    return RandomSampling(
        temperature=host_column_to_device([p.temperature for p in rows], device),
        greedy_mask=host_list_to_device(greedy, device, torch.bool) if any(greedy) else None,
        min_p=(host_column_to_device([p.min_p for p in rows], device)
               if any(p.min_p > 0.0 for p in rows) else None),
        top_k_top_p=_top_k_top_p(rows, vocab_size, device),
        seeded_rows=[
            (i, mix_seed(p.seed, position))
            for i, (p, position) in enumerate(zip(rows, output_positions))
            if p.seed is not None
        ],
    )


def _top_k_top_p(
    rows: Sequence[RowSamplingParams], vocab_size: int, device: torch.device | str
) -> TopKTopP | None:
    """The per-row top-k / top-p limits, or None when no sampling row filters."""
    uses_k = [0 < p.top_k < vocab_size for p in rows]
    uses_p = [p.top_p < 1.0 for p in rows]
    if not any(uses_k) and not any(uses_p):
        return None
    top_k = [p.top_k if uk else vocab_size for p, uk in zip(rows, uses_k)]
    top_p = [p.top_p if up else _TOP_P_DISABLED for p, up in zip(rows, uses_p)]
    filter_rows = [uk or up for uk, up in zip(uses_k, uses_p)]
    return TopKTopP(
        top_k=host_list_to_device(top_k, device).unsqueeze(1),
        top_p=host_column_to_device(top_p, device),
        filter_rows=host_list_to_device(filter_rows, device, torch.bool).unsqueeze(1),
        max_top_k=max((k for k, uk in zip(top_k, uses_k) if uk), default=0),
        needs_full_sort=any(up and not uk for uk, up in zip(uses_k, uses_p)),
    )


def mix_seed(seed: int, position: int) -> int:
    """The generator seed of a request's (seed, output position): two splitmix64 rounds."""
    return _splitmix64(_splitmix64(seed) ^ position)


def _splitmix64(x: int) -> int:
    """One splitmix64 output step: a well-mixed bijection of 64-bit integers."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _logprob_request(
    params: Sequence[RowSamplingParams], device: torch.device | str
) -> LogprobRequest | None:
    """The rows that asked for logprobs, or None when none did."""
    row_ids = [i for i, p in enumerate(params) if p.logprobs is not None]
    if not row_ids:
        return None
    counts = [params[i].logprobs or 0 for i in row_ids]
    return LogprobRequest(rows=host_list_to_device(row_ids, device), row_ids=row_ids,
                          counts=counts, max_count=max(counts))

